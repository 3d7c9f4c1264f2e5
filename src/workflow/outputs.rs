//! One rule for every file a run writes: never one of the run's inputs (the model and its
//! external data, calibration and evaluation data, a recipe or statistics read), and never
//! another of its outputs. Files are compared by identity (device and inode, where the
//! platform has them) and by path, so a hard link or another spelling of a path is caught too.
//! Faces check all their outputs once, before the long work starts.

use std::path::{Path, PathBuf};

use super::WorkflowError;
use crate::calib::data::DataSpec;
use crate::model::{Model, ModelError};

/// A file's identity: its device and inode (Unix), or its canonical path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    Path(PathBuf),
}

/// The identities `path` has now: its inode when it exists (Unix), and its canonical path
/// (the canonical folder joined with the name when it does not exist yet).
fn identities(path: &Path) -> Vec<FileId> {
    let mut ids = Vec::new();
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::MetadataExt;
        ids.push(FileId::Inode(meta.dev(), meta.ino()));
    }
    let canonical = dunce::canonicalize(path).ok().or_else(|| {
        let folder = dunce::canonicalize(crate::util::folder_of(path)).ok()?;
        Some(folder.join(path.file_name()?))
    });
    ids.push(FileId::Path(
        canonical.unwrap_or_else(|| path.to_path_buf()),
    ));
    ids
}

/// Why `folder` cannot be made, when one of its ancestors is a file: "PATH is a file".
fn file_in_the_way(folder: &Path) -> Option<String> {
    folder
        .ancestors()
        .find(|a| a.exists())
        .filter(|a| !a.is_dir())
        .map(|a| format!("{} is a file", a.display()))
}

/// A file of the run, with what it is for messages ("the input model").
#[derive(Debug, Clone)]
struct RunFile {
    role: String,
    path: PathBuf,
    ids: Vec<FileId>,
}

impl RunFile {
    fn new(role: &str, path: &Path) -> Self {
        RunFile {
            role: role.to_owned(),
            path: path.to_path_buf(),
            ids: identities(path),
        }
    }

    fn same_as(&self, other: &RunFile) -> bool {
        self.ids.iter().any(|id| other.ids.contains(id))
    }
}

/// The files a run reads and writes, checked against each other.
#[derive(Debug, Clone, Default)]
pub struct RunFiles {
    inputs: Vec<RunFile>,
    outputs: Vec<RunFile>,
}

impl RunFiles {
    /// No files yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A file the run reads; `role` names it in messages ("the calibration data").
    pub fn input(mut self, role: &str, path: &Path) -> Self {
        self.inputs.push(RunFile::new(role, path));
        self
    }

    /// An input that may be absent.
    pub fn input_if(self, role: &str, path: Option<&Path>) -> Self {
        match path {
            Some(path) => self.input(role, path),
            None => self,
        }
    }

    /// A model's files: the model and each external data file.
    pub fn model(mut self, role: &str, model: &Model) -> Self {
        for path in model.source_files() {
            self.inputs.push(RunFile::new(role, &path));
        }
        self
    }

    /// A model that may be absent.
    pub fn model_if(self, role: &str, model: Option<&Model>) -> Self {
        match model {
            Some(model) => self.model(role, model),
            None => self,
        }
    }

    /// The file or folder data is read from (none for random data; a text and its tokenizer).
    pub fn data(self, role: &str, data: &DataSpec) -> Self {
        match data {
            DataSpec::Npz { path }
            | DataSpec::Images { path, .. }
            | DataSpec::PbFolder { path } => self.input(role, path),
            DataSpec::Text(text) => self
                .input(role, &text.path)
                .input("the tokenizer", &text.tokenizer),
            DataSpec::Random { .. } => self,
        }
    }

    /// A file the run writes; `role` names it in messages ("the statistics").
    pub fn output(mut self, role: &str, path: &Path) -> Self {
        self.outputs.push(RunFile::new(role, path));
        self
    }

    /// An output that may be absent.
    pub fn output_if(self, role: &str, path: Option<&Path>) -> Self {
        match path {
            Some(path) => self.output(role, path),
            None => self,
        }
    }

    /// A model written with external data: the model and its `<name>.data`.
    pub fn model_output(self, role: &str, path: &Path) -> Self {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let data = path.with_file_name(format!("{name}.data"));
        self.output(role, path)
            .output(&format!("{role}'s external data"), &data)
    }

    /// The files of `model`'s folder (an LLM's configuration and tokenizer, see
    /// [`super::model_folder`]) that saving it as `output` writes beside it: outputs too,
    /// so that neither another output nor an input can be one of them.
    pub fn folder_outputs(self, model: &Model, output: &Path) -> Self {
        let Some(folder) = model
            .path()
            .and_then(super::model_folder::ModelFolder::of_model)
        else {
            return self;
        };
        folder
            .targets_beside(output)
            .iter()
            .fold(self, |files, target| {
                files.output("a file of the model's folder", target)
            })
    }

    /// An error when an output is one of the inputs, two outputs are one file, or an
    /// output's folder cannot be made: all found before any work starts. Missing output
    /// folders are created (as ModelOpt does), once nothing clashes: a file in a folder that
    /// did not exist cannot be one of the inputs.
    pub fn check(&self) -> Result<(), WorkflowError> {
        self.check_clashes()?;
        for output in &self.outputs {
            let folder = crate::util::folder_of(&output.path);
            if !folder.is_dir() {
                std::fs::create_dir_all(folder).map_err(|e| ModelError::NoOutputFolder {
                    path: folder.to_path_buf(),
                    reason: file_in_the_way(folder).unwrap_or_else(|| e.to_string()),
                })?;
            }
        }
        Ok(())
    }

    /// An error when an output is one of the inputs or two outputs are one file.
    fn check_clashes(&self) -> Result<(), WorkflowError> {
        for (i, output) in self.outputs.iter().enumerate() {
            let clash = self
                .inputs
                .iter()
                .chain(&self.outputs[..i])
                .find(|other| output.same_as(other));
            if let Some(other) = clash {
                return Err(WorkflowError::WouldOverwrite {
                    output: output.role.clone(),
                    path: output.path.clone(),
                    other: other.role.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_over_inputs_or_each_other_are_refused_by_identity() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.onnx");
        std::fs::write(&model, b"model").unwrap();
        let link = dir.path().join("link.onnx");
        std::fs::hard_link(&model, &link).unwrap();
        let other = dir.path().join("sub/../m.onnx");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let fresh = dir.path().join("out.json");
        let nowhere = dir.path().join("missing/out.json");

        let files = || RunFiles::new().input("the input model", &model);
        files().output("the statistics", &fresh).check().unwrap();
        // A missing folder is made; one that cannot be (a file in the way) is a clear error.
        files().output("the statistics", &nowhere).check().unwrap();
        assert!(dir.path().join("missing").is_dir());
        let blocked = fresh.join("sub/out.json");
        std::fs::write(&fresh, b"a file").unwrap();
        let err = files()
            .output("the statistics", &blocked)
            .check()
            .unwrap_err();
        assert!(
            err.to_string().starts_with("cannot create output folder"),
            "{err}"
        );
        std::fs::remove_file(&fresh).unwrap();
        for path in [&model, &link, &other] {
            let err = files().output("the statistics", path).check().unwrap_err();
            assert!(
                err.to_string().contains("the input model"),
                "{}: {err}",
                path.display()
            );
        }
        let err = files()
            .model_output("the quantized model", &dir.path().join("q.onnx"))
            .output("the recipe", &dir.path().join("q.onnx.data"))
            .check()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the quantized model's external data"),
            "{err}"
        );
    }

    /// The files a model folder's save writes beside the output are checked like every
    /// output: another output over one of them is refused before any work.
    #[test]
    fn a_model_folders_files_written_beside_the_output_are_outputs_too() {
        use crate::model::{DataType, ModelBuilder, SaveOptions};
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir(&input).unwrap();
        let path = input.join("model.onnx");
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1]);
        b.node("Relu", &["x"], &["y"]);
        b.output("y", DataType::Float32, &[1]);
        b.build().save(&path, &SaveOptions::default()).unwrap();
        std::fs::write(input.join("genai_config.json"), b"{}").unwrap();
        std::fs::write(input.join("tokenizer.json"), b"{}").unwrap();
        let model = Model::load(&path).unwrap();
        let out = dir.path().join("out");
        let output = out.join("model.onnx");
        let files = || RunFiles::new().model("the input model", &model);
        files()
            .model_output("the quantized model", &output)
            .folder_outputs(&model, &output)
            .check()
            .unwrap();
        let err = files()
            .model_output("the quantized model", &output)
            .output("the recipe written", &out.join("tokenizer.json"))
            .folder_outputs(&model, &output)
            .check()
            .unwrap_err();
        assert!(
            err.to_string().contains("a file of the model's folder")
                && err.to_string().contains("the recipe written"),
            "{err}"
        );
        // Saved into its own folder, the folder's files are the input's and are not written.
        files()
            .model_output("the quantized model", &input.join("model.qdq.onnx"))
            .output("the recipe written", &input.join("model.recipe.toml"))
            .folder_outputs(&model, &input.join("model.qdq.onnx"))
            .check()
            .unwrap();
    }
}
