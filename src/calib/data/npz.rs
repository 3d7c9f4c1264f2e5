//! `.npz` and `.npy` calibration files, read lazily a batch at a time.
//!
//! ModelOpt's convention: a dict keyed by model input name, samples stacked on axis 0 (a
//! single-input model may use a bare `.npy`). The zip directory is read with the `zip` crate;
//! each array is then streamed from its own file handle (inflated with `flate2` when the
//! archive is compressed), so memory holds one batch, whatever the file's size.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::npy::{NpyHeader, read_header, read_samples};
use super::truth::{GroundTruth, TRUTH_KEYS, read_truth};
use super::{ArraySpec, Batch, BatchCursor, BatchSource, DataError};

/// One array of the file and the stream positioned at its next sample.
struct Stream {
    name: String,
    header: NpyHeader,
    reader: Box<dyn Read + Send>,
}

/// Where an array's bytes are inside the file.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    data_start: u64,
    compressed_size: u64,
    uncompressed_size: u64,
    deflated: bool,
}

/// A `.npz` or `.npy` file as a batch source.
pub struct NpzSource {
    path: PathBuf,
    entries: Vec<Entry>,
    /// Arrays that are not model inputs, left aside.
    aside: Vec<Entry>,
    streams: Vec<Stream>,
    cursor: BatchCursor,
    samples: usize,
}

impl std::fmt::Debug for NpzSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpzSource")
            .field("path", &self.path)
            .field("arrays", &self.arrays())
            .finish_non_exhaustive()
    }
}

fn open_err(path: &Path) -> impl Fn(std::io::Error) -> DataError + '_ {
    move |e| DataError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// A reader of `entry`'s `.npy` bytes, inflated when the archive is compressed.
fn open_reader(path: &Path, entry: &Entry) -> Result<Box<dyn Read + Send>, DataError> {
    let mut file = crate::util::open_regular(path).map_err(open_err(path))?;
    file.seek(SeekFrom::Start(entry.data_start))
        .map_err(open_err(path))?;
    let raw = BufReader::new(file).take(entry.compressed_size);
    Ok(if entry.deflated {
        Box::new(flate2::read::DeflateDecoder::new(raw))
    } else {
        Box::new(raw)
    })
}

fn open_stream(path: &Path, entry: &Entry) -> Result<Stream, DataError> {
    let mut reader = open_reader(path, entry)?;
    let header = read_header(&mut reader, &entry.name)?;
    let expected = header.header_bytes + header.data_bytes().unwrap_or(u64::MAX);
    if entry.uncompressed_size != u64::MAX && expected != entry.uncompressed_size {
        return Err(DataError::Corrupt {
            name: entry.name.clone(),
            reason: format!(
                "its header describes {expected} bytes but the archive holds {} (a truncated or tampered file)",
                entry.uncompressed_size
            ),
        });
    }
    Ok(Stream {
        name: entry.name.clone(),
        header,
        reader,
    })
}

/// Splits `entries` into those named after one of `inputs` and the names of the others;
/// nothing is set aside when no entry names an input.
fn set_aside(entries: Vec<Entry>, inputs: &[&str]) -> (Vec<Entry>, Vec<Entry>) {
    if !entries.iter().any(|e| inputs.contains(&e.name.as_str())) {
        return (entries, Vec::new());
    }
    let (used, aside): (Vec<Entry>, Vec<Entry>) = entries
        .into_iter()
        .partition(|e| inputs.contains(&e.name.as_str()));
    (used, aside)
}

impl NpzSource {
    /// Opens an `.npz` archive, or a bare `.npy` file whose array is named `npy_name`.
    /// Arrays not named after one of `inputs` (labels, texts, ids kept beside the inputs, as
    /// datasets usually are) are left aside, unread, and listed once in the notes, as long
    /// as some array does name an input (else the names tell of a mismatch, reported whole).
    pub fn open(path: &Path, npy_name: &str, inputs: &[&str]) -> Result<Self, DataError> {
        let file = crate::util::open_regular(path).map_err(open_err(path))?;
        let mut magic = [0u8; 6];
        (&file)
            .read_exact(&mut magic)
            .map_err(|_| DataError::Corrupt {
                name: path.display().to_string(),
                reason: "too short to be .npy or .npz".to_owned(),
            })?;
        let entries = if &magic == b"\x93NUMPY" {
            let len = file.metadata().map_err(open_err(path))?.len();
            vec![Entry {
                name: npy_name.to_owned(),
                data_start: 0,
                compressed_size: len,
                uncompressed_size: len,
                deflated: false,
            }]
        } else {
            Self::zip_entries(path, file)?
        };
        if entries.is_empty() {
            return Err(DataError::Corrupt {
                name: path.display().to_string(),
                reason: "the archive holds no arrays".to_owned(),
            });
        }
        let (entries, aside) = set_aside(entries, inputs);
        let mut source = NpzSource {
            path: path.to_path_buf(),
            entries,
            aside,
            streams: Vec::new(),
            cursor: BatchCursor::default(),
            samples: 0,
        };
        source.rewind()?;
        Ok(source)
    }

    /// The arrays left aside, in words, for an error naming a missing one.
    fn aside_in_words(&self) -> String {
        if self.aside.is_empty() {
            return "it holds model inputs only".to_owned();
        }
        let names: Vec<String> = self.aside.iter().map(|e| format!("'{}'", e.name)).collect();
        format!("beside the inputs it holds {}", names.join(", "))
    }

    fn zip_entries(path: &Path, file: File) -> Result<Vec<Entry>, DataError> {
        let corrupt = |reason: String| DataError::Corrupt {
            name: path.display().to_string(),
            reason,
        };
        let mut archive = zip::ZipArchive::new(file)
            .map_err(|e| corrupt(format!("not a valid .npz (zip): {e}")))?;
        let mut entries = Vec::new();
        for i in 0..archive.len() {
            let entry = archive
                .by_index_raw(i)
                .map_err(|e| corrupt(e.to_string()))?;
            let Some(name) = entry.name().strip_suffix(".npy") else {
                continue;
            };
            let deflated = match entry.compression() {
                zip::CompressionMethod::Stored => false,
                zip::CompressionMethod::Deflated => true,
                other => {
                    return Err(corrupt(format!(
                        "array '{name}' uses unsupported compression {other}"
                    )));
                }
            };
            entries.push(Entry {
                name: name.to_owned(),
                data_start: entry.data_start(),
                compressed_size: entry.compressed_size(),
                uncompressed_size: entry.size(),
                deflated,
            });
        }
        Ok(entries)
    }
}

impl BatchSource for NpzSource {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        self.streams
            .iter()
            .map(|s| ArraySpec {
                name: s.name.clone(),
                dtype: s.header.dtype,
                shape: s.header.shape.clone(),
            })
            .collect()
    }

    fn samples(&self) -> usize {
        self.samples
    }

    fn notes(&self) -> Vec<String> {
        if self.aside.is_empty() {
            return Vec::new();
        }
        let names: Vec<String> = self.aside.iter().map(|e| format!("'{}'", e.name)).collect();
        let verb = if names.len() == 1 {
            "is not a model input"
        } else {
            "are not model inputs"
        };
        vec![format!("{} {verb}: left aside", names.join(", "))]
    }

    fn ground_truth(&self, key: Option<&str>) -> Result<Option<GroundTruth>, DataError> {
        let found = match key {
            Some(key) => self.aside.iter().find(|e| e.name == key),
            // `labels` before `texts`, whatever the order in the file.
            None => TRUTH_KEYS
                .iter()
                .find_map(|k| self.aside.iter().find(|e| e.name == *k)),
        };
        let Some(entry) = found else {
            return match key {
                None => Ok(None),
                Some(key) => Err(DataError::NoTruth {
                    key: key.to_owned(),
                    available: self.aside_in_words(),
                }),
            };
        };
        Ok(Some(read_truth(
            &mut open_reader(&self.path, entry)?,
            &entry.name,
        )?))
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.streams = self
            .entries
            .iter()
            .map(|e| open_stream(&self.path, e))
            .collect::<Result<_, _>>()?;
        let mut counts: Vec<(String, usize)> = self
            .streams
            .iter()
            .map(|s| (s.name.clone(), s.header.samples()))
            .collect();
        // Arrays left aside still describe the same samples (labels, texts): a count that
        // differs tells of a broken file. Those whose header cannot be read are not checked.
        counts.extend(self.aside.iter().filter_map(|e| {
            open_stream(&self.path, e)
                .ok()
                .map(|s| (s.name, s.header.samples()))
        }));
        self.samples = counts.first().map_or(0, |c| c.1);
        if counts.iter().any(|c| c.1 != self.samples) {
            return Err(DataError::SampleCounts {
                counts: counts
                    .iter()
                    .map(|(n, c)| format!("{n}: {c}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        self.cursor.reset();
        Ok(())
    }

    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError> {
        let Some((index, first_sample, count)) = self.cursor.claim(max_samples, self.samples)
        else {
            return Ok(None);
        };
        let inputs = self
            .streams
            .iter_mut()
            .map(|s| {
                Ok((
                    s.name.clone(),
                    read_samples(&mut s.reader, &s.header, count, &s.name)?,
                ))
            })
            .collect::<Result<Vec<_>, DataError>>()?;
        let batch = Batch {
            index,
            first_sample,
            samples: count,
            inputs,
        };
        Ok(Some(batch))
    }
}
