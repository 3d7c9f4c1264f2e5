//! Streaming `.npy` reading: the header, then samples read a batch at a time.
//!
//! Why not ndarray-npy: it reads a whole array into memory, and calibration sets are routinely
//! larger than RAM. Here the header is parsed (a small, fully specified format) and the data
//! is then read sequentially from any `Read` (a file, or a zip entry being inflated), one batch
//! of samples along axis 0 at a time. Object arrays (pickles) are refused, never executed.

use std::io::Read;

use half::f16;
use ndarray::{ArrayD, IxDyn};

use super::DataError;
use crate::model::{DataType, TensorArray};

/// The largest header accepted (numpy writes a few hundred bytes).
const MAX_HEADER: usize = 1 << 16;

/// Bytes reserved before a batch's data arrives; beyond that the buffer grows with the data.
const INITIAL_READ: usize = 64 << 20;

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: DataType,
    /// Shape; axis 0 counts samples.
    pub shape: Vec<usize>,
    /// Bytes of the header, magic included (where the data starts).
    pub header_bytes: u64,
}

impl NpyHeader {
    /// Elements per sample (product of the dims after axis 0).
    pub fn sample_elements(&self) -> Option<usize> {
        self.shape
            .iter()
            .skip(1)
            .try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// Bytes per sample.
    pub fn sample_bytes(&self) -> Option<usize> {
        self.sample_elements()?.checked_mul(self.dtype.bits() / 8)
    }

    /// Number of samples (axis 0; 1 for a 0-d array).
    pub fn samples(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Total data bytes.
    pub fn data_bytes(&self) -> Option<u64> {
        (self.sample_bytes()? as u64).checked_mul(self.samples() as u64)
    }
}

fn descr_type(descr: &str, name: &str) -> Result<DataType, DataError> {
    let unsupported = || DataError::UnsupportedNpy {
        name: name.to_owned(),
        reason: format!(
            "element type '{descr}' is not supported (float32, float16, float64, int64, int32, int8, uint8, bool are)"
        ),
    };
    if descr.contains('O') {
        return Err(DataError::UnsupportedNpy {
            name: name.to_owned(),
            reason: "it holds Python objects (a pickle); qdq-studio never unpickles data"
                .to_owned(),
        });
    }
    // The byte-order character, then the type code (the header may hold any text: split on a
    // character, never on a byte index).
    let mut chars = descr.chars();
    let order = chars.next();
    let code = chars.as_str();
    if order == Some('>') && code != "b1" && code != "u1" && code != "i1" {
        return Err(DataError::UnsupportedNpy {
            name: name.to_owned(),
            reason: format!("big-endian data ('{descr}') is not supported; save it little-endian"),
        });
    }
    Ok(match code {
        "f4" => DataType::Float32,
        "f2" => DataType::Float16,
        "f8" => DataType::Float64,
        "i8" => DataType::Int64,
        "i4" => DataType::Int32,
        "i1" => DataType::Int8,
        "u1" => DataType::Uint8,
        "b1" => DataType::Bool,
        _ => return Err(unsupported()),
    })
}

/// Extracts the value text of `'key': value` from numpy's header dict.
fn dict_value<'a>(dict: &'a str, key: &str) -> Option<&'a str> {
    let start = dict.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = dict[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.find('\'')? + 2
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// A `.npy` header as written, before its element type is interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawHeader {
    /// numpy's type description (`<f4`, `<U22`, `|S8`).
    pub descr: String,
    /// Shape; axis 0 counts samples.
    pub shape: Vec<usize>,
    /// Bytes of the header, magic included (where the data starts).
    pub header_bytes: u64,
}

/// Reads the header dict from the start of `reader`: type description and shape, Fortran
/// order refused. `name` labels errors.
pub fn read_raw_header(reader: &mut dyn Read, name: &str) -> Result<RawHeader, DataError> {
    let bad = |reason: &str| DataError::Corrupt {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let io = |e: std::io::Error| DataError::Corrupt {
        name: name.to_owned(),
        reason: e.to_string(),
    };
    let mut magic = [0u8; 8];
    reader.read_exact(&mut magic).map_err(io)?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy array (bad magic)"));
    }
    let (len, prefix) = if magic[6] == 1 {
        let mut b = [0u8; 2];
        reader.read_exact(&mut b).map_err(io)?;
        (u16::from_le_bytes(b) as usize, 10)
    } else {
        let mut b = [0u8; 4];
        reader.read_exact(&mut b).map_err(io)?;
        (u32::from_le_bytes(b) as usize, 12)
    };
    if len > MAX_HEADER {
        return Err(bad("header larger than 64 KiB"));
    }
    let mut text = vec![0u8; len];
    reader.read_exact(&mut text).map_err(io)?;
    let text = String::from_utf8_lossy(&text);
    let descr = dict_value(&text, "descr").ok_or_else(|| bad("header has no 'descr'"))?;
    if dict_value(&text, "fortran_order") == Some("True") {
        return Err(DataError::UnsupportedNpy {
            name: name.to_owned(),
            reason: "Fortran-ordered arrays are not supported; save with np.ascontiguousarray"
                .to_owned(),
        });
    }
    let shape_text = dict_value(&text, "shape").ok_or_else(|| bad("header has no 'shape'"))?;
    let shape = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| bad("shape is not a tuple of sizes"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RawHeader {
        descr: descr.trim_matches('\'').to_owned(),
        shape,
        header_bytes: (prefix + len) as u64,
    })
}

/// Reads and parses the header from the start of `reader`. `name` labels errors.
pub fn read_header(reader: &mut dyn Read, name: &str) -> Result<NpyHeader, DataError> {
    let raw = read_raw_header(reader, name)?;
    let header = NpyHeader {
        dtype: descr_type(&raw.descr, name)?,
        shape: raw.shape,
        header_bytes: raw.header_bytes,
    };
    if header.data_bytes().is_none() {
        return Err(DataError::Corrupt {
            name: name.to_owned(),
            reason: "shape overflows".to_owned(),
        });
    }
    Ok(header)
}

/// Reads the next `bytes` bytes of array `name`. The buffer grows as bytes arrive, never
/// sized from the header alone: a header that claims terabytes over a short (or endlessly
/// inflating) stream costs what the stream holds, then an error.
pub(super) fn read_bytes(
    reader: &mut dyn Read,
    bytes: usize,
    name: &str,
) -> Result<Vec<u8>, DataError> {
    let mut raw = Vec::with_capacity(bytes.min(INITIAL_READ));
    reader
        .take(bytes as u64)
        .read_to_end(&mut raw)
        .map_err(|e| DataError::Corrupt {
            name: name.to_owned(),
            reason: format!("data cannot be read ({e})"),
        })?;
    if raw.len() != bytes {
        return Err(DataError::Corrupt {
            name: name.to_owned(),
            reason: format!(
                "data ends early: {} of the {bytes} bytes the header promises",
                raw.len()
            ),
        });
    }
    Ok(raw)
}

/// Reads `count` samples of `header`'s layout from `reader` into an array of shape
/// `[count, dims[1..]...]`.
pub fn read_samples(
    reader: &mut dyn Read,
    header: &NpyHeader,
    count: usize,
    name: &str,
) -> Result<TensorArray, DataError> {
    let sample_bytes = header.sample_bytes().unwrap_or(0);
    let bytes = sample_bytes
        .checked_mul(count)
        .ok_or_else(|| DataError::Corrupt {
            name: name.to_owned(),
            reason: "batch size overflows".to_owned(),
        })?;
    let raw = read_bytes(reader, bytes, name)?;
    let mut shape = vec![count];
    shape.extend(header.shape.iter().skip(1));
    let shape = IxDyn(&shape);
    macro_rules! le {
        ($t:ty, $n:literal) => {
            raw.chunks_exact($n)
                .map(|c| {
                    <$t>::from_le_bytes(c.try_into().unwrap_or_else(|_| unreachable!("chunk size")))
                })
                .collect::<Vec<$t>>()
        };
    }
    let corrupt = |_| DataError::Corrupt {
        name: name.to_owned(),
        reason: "shape does not match data".to_owned(),
    };
    Ok(match header.dtype {
        DataType::Float32 => {
            TensorArray::Float32(ArrayD::from_shape_vec(shape, le!(f32, 4)).map_err(corrupt)?)
        }
        DataType::Float64 => {
            TensorArray::Float64(ArrayD::from_shape_vec(shape, le!(f64, 8)).map_err(corrupt)?)
        }
        DataType::Float16 => TensorArray::Float16(
            ArrayD::from_shape_vec(shape, le!(u16, 2).into_iter().map(f16::from_bits).collect())
                .map_err(corrupt)?,
        ),
        DataType::Int64 => {
            TensorArray::Int64(ArrayD::from_shape_vec(shape, le!(i64, 8)).map_err(corrupt)?)
        }
        DataType::Int32 => {
            TensorArray::Int32(ArrayD::from_shape_vec(shape, le!(i32, 4)).map_err(corrupt)?)
        }
        DataType::Int8 => TensorArray::Int8(
            ArrayD::from_shape_vec(shape, raw.iter().map(|&b| b as i8).collect())
                .map_err(corrupt)?,
        ),
        DataType::Uint8 => TensorArray::Uint8(ArrayD::from_shape_vec(shape, raw).map_err(corrupt)?),
        DataType::Bool => TensorArray::Bool(
            ArrayD::from_shape_vec(shape, raw.iter().map(|&b| b != 0).collect())
                .map_err(corrupt)?,
        ),
        other => {
            return Err(DataError::UnsupportedNpy {
                name: name.to_owned(),
                reason: format!("{other} arrays are not supported"),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let mut header = dict.into_bytes();
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(b' ');
        }
        header.push(b'\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header);
        out.extend(data);
        out
    }

    #[test]
    fn headers_and_batches_are_read() {
        let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let bytes = npy("<f4", "(3, 2)", &data);
        let mut reader = &bytes[..];
        let header = read_header(&mut reader, "x").unwrap();
        assert_eq!(
            (header.dtype, header.shape.clone(), header.samples()),
            (DataType::Float32, vec![3, 2], 3)
        );
        let first = read_samples(&mut reader, &header, 2, "x").unwrap();
        assert_eq!(first.shape(), [2, 2]);
        let rest = read_samples(&mut reader, &header, 1, "x").unwrap();
        assert_eq!(rest.to_f32().as_slice().unwrap(), &[4.0, 5.0]);
        assert!(
            read_samples(&mut reader, &header, 1, "x").is_err(),
            "past the end"
        );
    }

    #[test]
    fn pickles_fortran_and_big_endian_are_refused() {
        for (descr, word) in [
            ("|O", "pickle"),
            (">f4", "big-endian"),
            ("<c8", "not supported"),
        ] {
            let bytes = npy(descr, "(1,)", &[0; 8]);
            let err = read_header(&mut &bytes[..], "x").unwrap_err();
            assert!(err.to_string().contains(word), "{descr}: {err}");
        }
        let dict = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((dict.len() as u16).to_le_bytes());
        bytes.extend(dict.as_bytes());
        assert!(
            read_header(&mut &bytes[..], "x")
                .unwrap_err()
                .to_string()
                .contains("Fortran")
        );
    }

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        assert!(matches!(
            read_header(&mut &b"hello"[..], "x"),
            Err(DataError::Corrupt { .. })
        ));
        assert!(matches!(
            read_header(&mut &b"\x93NUMPY\x01\x00\xff\xff"[..], "x"),
            Err(DataError::Corrupt { .. })
        ));
    }
}
