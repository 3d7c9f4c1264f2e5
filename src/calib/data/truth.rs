//! Ground truth kept beside the inputs in an evaluation file: class labels (`labels`) or
//! reference texts (`texts`), one per sample, as datasets are usually saved
//! (`np.savez(f, x=images, labels=classes)`). Read whole: a few bytes per sample.

use std::io::Read;

use super::DataError;
use super::npy::{RawHeader, read_bytes, read_raw_header};

/// The array names read as ground truth when none is named (`--labels KEY`).
pub const TRUTH_KEYS: [&str; 2] = ["labels", "texts"];

/// Ground truth values, one per sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TruthValues {
    /// Class indices: an integer array `[N]` or `[N, 1]`.
    Labels(Vec<i64>),
    /// Reference texts: a numpy unicode (`<U`) or byte-string (`|S`, UTF-8) array `[N]`.
    Texts(Vec<String>),
    /// Token sequences, one per sample: a language model's text, whose every token is the
    /// truth of the scores at the position before it ([`super::text`]).
    Tokens(std::sync::Arc<Vec<Vec<i64>>>),
}

/// The ground truth of an evaluation file: the array it came from and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroundTruth {
    /// The array's name in the file.
    pub key: String,
    /// One value per sample.
    pub values: TruthValues,
}

impl GroundTruth {
    /// Samples described.
    pub fn len(&self) -> usize {
        match &self.values {
            TruthValues::Labels(v) => v.len(),
            TruthValues::Texts(v) => v.len(),
            TruthValues::Tokens(v) => v.len(),
        }
    }

    /// True when it describes no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What it holds, for messages ("labels", "texts").
    pub fn describe(&self) -> &'static str {
        match self.values {
            TruthValues::Labels(_) => "class labels",
            TruthValues::Texts(_) => "texts",
            TruthValues::Tokens(_) => "token sequences",
        }
    }
}

/// Reads the `.npy` array at the start of `reader` as ground truth named `key`.
pub fn read_truth(reader: &mut dyn Read, key: &str) -> Result<GroundTruth, DataError> {
    let header = read_raw_header(reader, key)?;
    let refuse = |reason: String| DataError::UnsupportedNpy {
        name: key.to_owned(),
        reason,
    };
    let samples = one_per_sample(&header).ok_or_else(|| {
        refuse(format!(
            "ground truth holds one value per sample ([N] or [N, 1]), not shape {:?}",
            header.shape
        ))
    })?;
    let (kind, width) = element(&header.descr).ok_or_else(|| {
        refuse(format!(
            "ground truth is integer class labels or strings, not '{}'",
            header.descr
        ))
    })?;
    let bytes = samples
        .checked_mul(width)
        .ok_or_else(|| refuse("its size overflows".to_owned()))?;
    let raw = read_bytes(reader, bytes, key)?;
    let values = match kind {
        Element::Int { signed } => TruthValues::Labels(
            raw.chunks_exact(width)
                .map(|c| integer(c, signed))
                .collect(),
        ),
        Element::Utf32 => TruthValues::Texts(raw.chunks_exact(width).map(utf32).collect()),
        Element::Bytes => TruthValues::Texts(
            raw.chunks_exact(width)
                .map(|c| String::from_utf8_lossy(trim_nul(c)).into_owned())
                .collect(),
        ),
    };
    Ok(GroundTruth {
        key: key.to_owned(),
        values,
    })
}

/// The sample count of an `[N]` or `[N, 1]` array.
fn one_per_sample(header: &RawHeader) -> Option<usize> {
    match header.shape.as_slice() {
        [n] | [n, 1] => Some(*n),
        _ => None,
    }
}

/// How an element is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    /// A little-endian integer.
    Int { signed: bool },
    /// numpy's `U`: fixed-width UTF-32, padded with NULs.
    Utf32,
    /// numpy's `S`: fixed-width bytes, padded with NULs.
    Bytes,
}

/// The element kind and byte width of a numpy type description.
fn element(descr: &str) -> Option<(Element, usize)> {
    let mut chars = descr.chars();
    let order = chars.next()?;
    let code = chars.as_str();
    let single = matches!(code, "i1" | "u1");
    if order == '>' && !single {
        return None;
    }
    let (letter, size) = code.split_at(1);
    let size: usize = size.parse().ok()?;
    match letter {
        "i" if matches!(size, 1 | 2 | 4 | 8) => Some((Element::Int { signed: true }, size)),
        "u" if matches!(size, 1 | 2 | 4 | 8) => Some((Element::Int { signed: false }, size)),
        "U" if size > 0 => Some((Element::Utf32, size.checked_mul(4)?)),
        "S" if size > 0 => Some((Element::Bytes, size)),
        _ => None,
    }
}

/// A little-endian integer of 1 to 8 bytes.
fn integer(bytes: &[u8], signed: bool) -> i64 {
    let mut buffer = [0u8; 8];
    buffer[..bytes.len()].copy_from_slice(bytes);
    let negative = signed && bytes.last().is_some_and(|b| b & 0x80 != 0);
    if negative {
        buffer[bytes.len()..].fill(0xff);
    }
    i64::from_le_bytes(buffer)
}

/// A fixed-width UTF-32 string, NUL padding dropped (invalid code points become U+FFFD).
fn utf32(bytes: &[u8]) -> String {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&c| c != 0)
        .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// `bytes` without its trailing NULs.
fn trim_nul(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &bytes[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((dict.len() as u16).to_le_bytes());
        out.extend(dict.as_bytes());
        out.extend(data);
        out
    }

    #[test]
    fn labels_texts_and_byte_strings_are_read() {
        let data: Vec<u8> = [3i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let truth = read_truth(&mut npy("<i8", "(2,)", &data).as_slice(), "labels").unwrap();
        assert_eq!(truth.values, TruthValues::Labels(vec![3, -1]));
        let truth = read_truth(&mut npy("|u1", "(2, 1)", &[7, 200]).as_slice(), "y").unwrap();
        assert_eq!(truth.values, TruthValues::Labels(vec![7, 200]));
        let truth = read_truth(&mut npy("<i2", "(1,)", &[0xfe, 0xff]).as_slice(), "y").unwrap();
        assert_eq!(truth.values, TruthValues::Labels(vec![-2]));
        let utf32: Vec<u8> = ['é', 'a', '\0', '\u{4e2d}', '\0', '\0']
            .iter()
            .flat_map(|c| (*c as u32).to_le_bytes())
            .collect();
        let truth = read_truth(&mut npy("<U3", "(2,)", &utf32).as_slice(), "texts").unwrap();
        assert_eq!(
            truth.values,
            TruthValues::Texts(vec!["éa".to_owned(), "中".to_owned()])
        );
        let truth = read_truth(&mut npy("|S3", "(2,)", b"ab\0xyz").as_slice(), "t").unwrap();
        assert_eq!(
            truth.values,
            TruthValues::Texts(vec!["ab".to_owned(), "xyz".to_owned()])
        );
    }

    #[test]
    fn floats_matrices_and_short_data_are_refused_with_the_reason() {
        let err = read_truth(&mut npy("<f4", "(1,)", &[0; 4]).as_slice(), "labels").unwrap_err();
        assert!(err.to_string().contains("not '<f4'"), "{err}");
        let err = read_truth(&mut npy("<i8", "(2, 3)", &[0; 48]).as_slice(), "labels").unwrap_err();
        assert!(err.to_string().contains("one value per sample"), "{err}");
        let err = read_truth(&mut npy("<i8", "(2,)", &[0; 9]).as_slice(), "labels").unwrap_err();
        assert!(err.to_string().contains("ends early"), "{err}");
    }
}
