//! Where the studio's calibration and evaluation data come from, as the user edits it in the
//! calibration panel, and the check that it fits the model before anything runs.

use std::path::PathBuf;

use crate::calib::data::images::Preprocess;
use crate::calib::data::random::suggested_shapes;
use crate::calib::data::text::TextSpec;
use crate::calib::data::{DataSpec, InputSpec, parse_shapes};
use crate::jobs::Job;
use crate::model::Dim;

/// The kinds of data source the panel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DataKind {
    /// A `.npz` (or `.npy`) file keyed by input name, samples on axis 0.
    File,
    /// A folder of png/jpg images, with preprocessing.
    Images,
    /// ONNX Runtime test-data folders (`test_data_set_*/input_*.pb`).
    TestData,
    /// A text file tokenized with the model's tokenizer (token models).
    Text,
    /// Random values from the input shapes.
    Random,
}

impl DataKind {
    /// Every kind, in the order the panel lists them.
    pub const ALL: [DataKind; 5] = [
        DataKind::File,
        DataKind::Images,
        DataKind::TestData,
        DataKind::Text,
        DataKind::Random,
    ];

    /// The label the panel shows.
    pub fn label(self) -> &'static str {
        match self {
            DataKind::File => ".npz / .npy file",
            DataKind::Images => "Image folder",
            DataKind::TestData => "ONNX Runtime test data",
            DataKind::Text => "Text file (tokenized)",
            DataKind::Random => "Random",
        }
    }
}

/// A data source as the user edits it: every field of every kind is kept, so switching kinds
/// back and forth loses nothing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DataChoice {
    /// The kind in use.
    pub kind: DataKind,
    /// File or folder (all kinds but random).
    pub path: String,
    /// Image preprocessing (image folders).
    pub preprocess: Preprocess,
    /// Samples of random data.
    pub random_samples: usize,
    /// Shapes of random data, `name:1x3x224x224,...` (batch axis included).
    pub shapes: String,
    /// Seed of random data.
    pub seed: u64,
    /// Text: the `tokenizer.json` (filled from the model's folder when it has one).
    #[serde(default)]
    pub tokenizer: String,
    /// Text: tokens per sequence (0: the model's length).
    #[serde(default)]
    pub sequence: usize,
    /// Text: sequences taken at most.
    #[serde(default = "default_text_samples")]
    pub text_samples: usize,
}

/// Sequences a text gives when the user sets no limit (the engine's default).
fn default_text_samples() -> usize {
    crate::calib::data::text::DEFAULT_TEXT_SAMPLES
}

impl DataChoice {
    /// A `.npz`/`.npy` file.
    pub fn file(path: PathBuf) -> Self {
        DataChoice {
            kind: DataKind::File,
            path: path.display().to_string(),
            ..DataChoice::random_for(&[])
        }
    }

    /// Random data for `inputs`, with every symbolic dimension given the engine's suggestion
    /// (see [`suggested_shapes`]) so that it runs as it stands; the shapes field shows these
    /// for the user to edit.
    pub fn random_for(inputs: &[InputSpec]) -> Self {
        let suggested = suggested_shapes(inputs);
        let shapes: Vec<String> = inputs
            .iter()
            .filter(|input| {
                input
                    .shape
                    .as_ref()
                    .is_some_and(|dims| !dims.iter().all(|d| matches!(d, Dim::Fixed(v) if *v > 0)))
            })
            .filter_map(|input| {
                let sizes: Vec<String> = suggested
                    .get(&input.name)?
                    .iter()
                    .map(usize::to_string)
                    .collect();
                Some(format!("{}:{}", input.name, sizes.join("x")))
            })
            .collect();
        let preprocess = image_preprocess_for(inputs);
        DataChoice {
            kind: DataKind::Random,
            path: String::new(),
            preprocess,
            random_samples: 16,
            shapes: shapes.join(","),
            seed: 0,
            tokenizer: String::new(),
            sequence: 0,
            text_samples: default_text_samples(),
        }
    }

    /// Sets the tokenizer to the one in `model`'s folder, when it has one and none is set.
    pub fn tokenizer_beside(&mut self, model: &std::path::Path) {
        if self.tokenizer.is_empty()
            && let Some(path) = crate::calib::data::text::tokenizer_beside(model)
        {
            self.tokenizer = path.display().to_string();
        }
    }

    /// The engine's description of this source, or what is wrong with the fields.
    pub fn spec(&self) -> Result<DataSpec, String> {
        let path = || -> Result<PathBuf, String> {
            let text = self.path.trim();
            if text.is_empty() && self.kind == DataKind::Text {
                Err("choose a text file".to_owned())
            } else if text.is_empty() {
                Err("choose a file or folder".to_owned())
            } else {
                Ok(PathBuf::from(text))
            }
        };
        Ok(match self.kind {
            DataKind::File => DataSpec::Npz { path: path()? },
            DataKind::Images => DataSpec::Images {
                path: path()?,
                preprocess: self.preprocess.clone(),
            },
            DataKind::TestData => DataSpec::PbFolder { path: path()? },
            DataKind::Text => DataSpec::Text(self.text_spec(path()?)?),
            DataKind::Random => {
                if self.random_samples == 0 {
                    return Err("random data needs at least one sample".to_owned());
                }
                DataSpec::Random {
                    samples: self.random_samples,
                    shapes: if self.shapes.trim().is_empty() {
                        Default::default()
                    } else {
                        parse_shapes(self.shapes.trim()).map_err(|e| e.to_string())?
                    },
                    seed: self.seed,
                }
            }
        })
    }

    /// The text source these fields describe at `path`.
    fn text_spec(&self, path: PathBuf) -> Result<TextSpec, String> {
        let tokenizer = self.tokenizer.trim();
        if tokenizer.is_empty() {
            return Err(format!(
                "choose the model's {} (none is beside the model)",
                crate::calib::data::text::TOKENIZER_FILE
            ));
        }
        if self.text_samples == 0 {
            return Err("text needs at least one sequence".to_owned());
        }
        Ok(TextSpec {
            path,
            tokenizer: PathBuf::from(tokenizer),
            sequence: (self.sequence > 0).then_some(self.sequence),
            max_samples: self.text_samples,
        })
    }
}

/// The kind of source a path is (the engine's own rule: a folder of images, a folder of test
/// data, a text file, else a `.npz`/`.npy` file).
pub fn kind_of(path: &std::path::Path) -> DataKind {
    let text = crate::calib::data::text::is_text_file(path);
    match DataSpec::from_path(path, Preprocess::default()) {
        DataSpec::Images { .. } => DataKind::Images,
        DataSpec::PbFolder { .. } => DataKind::TestData,
        DataSpec::Npz { .. } if text => DataKind::Text,
        DataSpec::Text(_) => DataKind::Text,
        DataSpec::Npz { .. } | DataSpec::Random { .. } => DataKind::File,
    }
}

/// Image preprocessing sized to the first input when its spatial size is fixed (NCHW).
fn image_preprocess_for(inputs: &[InputSpec]) -> Preprocess {
    let mut preprocess = Preprocess::default();
    let dims = inputs
        .first()
        .and_then(|i| i.shape.clone())
        .unwrap_or_default();
    let fixed = |axis: usize| match dims.get(axis) {
        Some(Dim::Fixed(v)) if *v > 0 => u32::try_from(*v).ok(),
        _ => None,
    };
    if let (Some(h), Some(w)) = (fixed(2), fixed(3)) {
        preprocess.width = w;
        preprocess.height = h;
        preprocess.resize_shorter = 0;
    }
    preprocess
}

/// The state of a data source's check.
#[derive(Default)]
pub enum DataCheck {
    /// Not checked yet.
    #[default]
    Unchecked,
    /// Being checked (opening a large file takes a moment).
    Checking(Job<Result<String, String>>),
    /// Fits the model: a summary line.
    Fits(String),
    /// Does not fit (or cannot be read): why.
    Problem(String),
}

impl DataCheck {
    /// Starts checking `choice` against `inputs` for batches of `batch_size`.
    pub fn start(choice: &DataChoice, inputs: Vec<InputSpec>, batch_size: usize) -> Self {
        let spec = match choice.spec() {
            Ok(spec) => spec,
            Err(problem) => return DataCheck::Problem(problem),
        };
        let check = move |_ctx| {
            crate::workflow::calibrate::check_data(&spec, &inputs, batch_size)
                .map_err(|e| e.chain())
        };
        match Job::spawn("data-check", check) {
            Ok(job) => DataCheck::Checking(job),
            Err(e) => DataCheck::Problem(e.to_string()),
        }
    }

    /// Takes a finished check's result; true while still checking.
    pub fn poll(&mut self) -> bool {
        let DataCheck::Checking(job) = self else {
            return false;
        };
        match job.try_take() {
            None => true,
            Some(Ok(Ok(summary))) => {
                *self = DataCheck::Fits(summary);
                false
            }
            Some(Ok(Err(problem)) | Err(problem)) => {
                *self = DataCheck::Problem(problem);
                false
            }
        }
    }

    /// True when the data is known to fit.
    pub fn fits(&self) -> bool {
        matches!(self, DataCheck::Fits(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DataType;

    fn check(spec: &DataSpec, inputs: &[InputSpec], batch: usize) -> Result<String, String> {
        crate::workflow::calibrate::check_data(spec, inputs, batch).map_err(|e| e.chain())
    }

    fn input(name: &str, dims: &[i64]) -> InputSpec {
        InputSpec {
            name: name.to_owned(),
            dtype: Some(DataType::Float32),
            shape: Some(
                dims.iter()
                    .map(|&d| {
                        if d < 0 {
                            Dim::Symbolic("n".into())
                        } else {
                            Dim::Fixed(d)
                        }
                    })
                    .collect(),
            ),
            role: Default::default(),
        }
    }

    #[test]
    fn random_data_fills_symbolic_dims_and_checks_against_the_model() {
        let inputs = [input("x", &[-1, 3, -1, -1]), input("len", &[-1, 4])];
        let choice = DataChoice::random_for(&inputs);
        assert_eq!(choice.shapes, "x:1x3x224x224,len:1x4");
        let summary = check(&choice.spec().unwrap(), &inputs, 1).unwrap();
        assert!(summary.starts_with("16 samples"), "{summary}");
        assert!(
            summary.contains("x: float32 [16, 3, 224, 224]"),
            "{summary}"
        );
    }

    #[test]
    fn a_file_that_does_not_fit_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.npz");
        let calib = crate::sample::sample_files(dir.path()).unwrap().calibration;
        std::fs::copy(calib, &path).unwrap();
        let wrong = [input("image", &[-1, 3, 48, 192])];
        let problem =
            check(&DataChoice::file(path.clone()).spec().unwrap(), &wrong, 1).unwrap_err();
        assert!(problem.contains("input 'image' has no array"), "{problem}");
        let right = [input("x", &[-1, 3, 48, 192])];
        let summary = check(&DataChoice::file(path).spec().unwrap(), &right, 1).unwrap();
        assert!(summary.starts_with("32 samples"), "{summary}");
        let empty = DataChoice {
            path: " ".into(),
            ..DataChoice::file(PathBuf::new())
        };
        assert_eq!(empty.spec().unwrap_err(), "choose a file or folder");
    }
}
