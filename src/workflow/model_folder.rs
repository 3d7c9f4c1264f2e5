//! LLM model folders as a unit: onnxruntime-genai's (`genai_config.json` beside the model) and
//! Hugging Face Optimum's or Olive's (`config.json`, `generation_config.json` and the
//! tokenizer). A folder is opened by its path (the model it names, or the one model in it), and
//! a quantized model written into another folder gets the folder's configuration, tokenizer and
//! processing files beside it, `genai_config.json` naming the new model file, so that
//! onnxruntime-genai loads the output folder as it is (ModelOpt-Windows' flow), with no file
//! copied by hand.

use std::path::{Path, PathBuf};

use super::WorkflowError;

/// The configuration onnxruntime-genai reads beside its model.
pub const GENAI_CONFIG: &str = "genai_config.json";

/// The files that travel with an LLM's model file: configurations, tokenizers, chat templates
/// and processors (onnxruntime-genai's, Hugging Face's and SentencePiece's names).
const COMPANIONS: [&str; 18] = [
    GENAI_CONFIG,
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "audio_processor_config.json",
];

/// The folder of an LLM's model file, with the companion files found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFolder {
    /// The folder.
    pub dir: PathBuf,
    /// Its companion files, in [`COMPANIONS`]' order.
    pub files: Vec<PathBuf>,
}

impl ModelFolder {
    /// The folder of `model` when it holds onnxruntime-genai's configuration or a Hugging Face
    /// `config.json` with a tokenizer beside it; `None` for a lone model file.
    pub fn of_model(model: &Path) -> Option<ModelFolder> {
        let dir = crate::util::folder_of(model).to_path_buf();
        let files: Vec<PathBuf> = COMPANIONS
            .iter()
            .map(|name| dir.join(name))
            .filter(|path| path.is_file())
            .collect();
        let has = |name: &str| files.iter().any(|f| f.ends_with(name));
        let llm = has(GENAI_CONFIG) || (has("config.json") && has("tokenizer_config.json"));
        llm.then_some(ModelFolder { dir, files })
    }

    /// Where [`Self::write_beside`] writes the companion files for `output`: none when
    /// `output` is in this folder.
    pub fn targets_beside(&self, output: &Path) -> Vec<PathBuf> {
        self.copies(output)
            .into_iter()
            .map(|(_, target)| target)
            .collect()
    }

    /// Writes the companion files beside `output` (a model written into another folder):
    /// `genai_config.json` with its decoder's file name set to `output`'s, the others copied
    /// as they are; each written atomically. Nothing when `output` is in this folder (its
    /// files are the input's, never written). Returns the files written.
    pub fn write_beside(&self, output: &Path) -> Result<Vec<PathBuf>, WorkflowError> {
        let file_name = output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut written = Vec::new();
        for (source, target) in self.copies(output) {
            let bytes = crate::util::read_regular(source).map_err(|e| copy_error(source, &e))?;
            let bytes = if source.ends_with(GENAI_CONFIG) {
                renamed_decoder(&bytes, &file_name).map_err(|reason| copy_error(source, &reason))?
            } else {
                bytes
            };
            crate::atomic::write(&target, &bytes).map_err(|e| copy_error(&target, &e))?;
            written.push(target);
        }
        Ok(written)
    }

    /// Each companion file and where it goes beside `output`; none when `output` is in this
    /// folder (its files are the input's).
    fn copies(&self, output: &Path) -> Vec<(&Path, PathBuf)> {
        let into = crate::util::folder_of(output);
        if same_folder(into, &self.dir) {
            return Vec::new();
        }
        self.files
            .iter()
            .filter_map(|source| Some((source.as_path(), into.join(source.file_name()?))))
            .collect()
    }
}

/// Whether two folders are one (compared canonically when both exist).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (dunce::canonicalize(a), dunce::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The model file `path` names: itself, or for a folder the model its `genai_config.json`
/// names, else the one `.onnx` file in it. A folder with none, or with several and no
/// configuration naming one, is an error that lists what it holds.
pub fn resolve_model_path(path: &Path) -> Result<PathBuf, WorkflowError> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let config = path.join(GENAI_CONFIG);
    if config.exists() {
        let text = crate::util::read_regular_text(&config).map_err(|e| {
            WorkflowError::Settings(format!("cannot read {}: {e}", config.display()))
        })?;
        let named = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v["model"]["decoder"]["filename"]
                    .as_str()
                    .map(str::to_owned)
            });
        return match named {
            Some(name) if path.join(&name).is_file() => Ok(path.join(name)),
            Some(name) => Err(WorkflowError::Settings(format!(
                "{} names the model {name}, which is not in {}",
                config.display(),
                path.display()
            ))),
            None => Err(WorkflowError::Settings(format!(
                "{} names no model (model.decoder.filename)",
                config.display()
            ))),
        };
    }
    let mut models: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| WorkflowError::Settings(format!("cannot read {}: {e}", path.display())))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    models.sort();
    match models.len() {
        1 => Ok(models.remove(0)),
        0 => Err(WorkflowError::Settings(format!(
            "{} holds no .onnx model",
            path.display()
        ))),
        _ => Err(WorkflowError::Settings(format!(
            "{} holds {} models ({}): give the model file",
            path.display(),
            models.len(),
            models
                .iter()
                .filter_map(|m| m.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// `genai_config.json`'s text with `model.decoder.filename` set to `file_name`.
fn renamed_decoder(bytes: &[u8], file_name: &str) -> Result<Vec<u8>, String> {
    let mut config: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let decoder = config
        .get_mut("model")
        .and_then(|m| m.get_mut("decoder"))
        .and_then(serde_json::Value::as_object_mut)
        .ok_or("no model.decoder section")?;
    decoder.insert("filename".to_owned(), file_name.into());
    let mut text = serde_json::to_vec_pretty(&config).map_err(|e| e.to_string())?;
    text.push(b'\n');
    Ok(text)
}

/// A companion file that could not be read or written.
fn copy_error(path: &Path, reason: &dyn std::fmt::Display) -> WorkflowError {
    WorkflowError::Settings(format!(
        "the model folder's {} cannot be copied: {reason}",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_genai_folder_opens_by_its_config_and_travels_with_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir(&input).unwrap();
        std::fs::write(input.join("model.onnx"), b"m").unwrap();
        std::fs::write(input.join("other.onnx"), b"o").unwrap();
        let config = r#"{"model": {"decoder": {"filename": "model.onnx", "head_size": 64}}}"#;
        std::fs::write(input.join(GENAI_CONFIG), config).unwrap();
        std::fs::write(input.join("tokenizer.json"), b"{}").unwrap();
        assert_eq!(
            resolve_model_path(&input).unwrap(),
            input.join("model.onnx")
        );
        let folder = ModelFolder::of_model(&input.join("model.onnx")).unwrap();
        assert_eq!(folder.files.len(), 2);
        // Into the same folder: nothing written over the input's files.
        assert!(
            folder
                .write_beside(&input.join("q.onnx"))
                .unwrap()
                .is_empty()
        );
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let written = folder.write_beside(&out.join("model-int4.onnx")).unwrap();
        assert_eq!(written.len(), 2);
        let copied: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(GENAI_CONFIG)).unwrap()).unwrap();
        assert_eq!(copied["model"]["decoder"]["filename"], "model-int4.onnx");
        assert_eq!(copied["model"]["decoder"]["head_size"], 64);
        assert_eq!(std::fs::read(out.join("tokenizer.json")).unwrap(), b"{}");
        assert_eq!(
            std::fs::read_to_string(input.join(GENAI_CONFIG)).unwrap(),
            config
        );
    }

    #[test]
    fn folders_without_one_model_say_what_they_hold() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_model_path(dir.path()).unwrap_err().to_string();
        assert!(err.ends_with("holds no .onnx model"), "{err}");
        std::fs::write(dir.path().join("a.onnx"), b"a").unwrap();
        assert_eq!(
            resolve_model_path(dir.path()).unwrap(),
            dir.path().join("a.onnx")
        );
        std::fs::write(dir.path().join("b.onnx"), b"b").unwrap();
        let err = resolve_model_path(dir.path()).unwrap_err().to_string();
        assert!(err.contains("holds 2 models (a.onnx, b.onnx)"), "{err}");
        // A lone model file is no folder to carry.
        assert!(ModelFolder::of_model(&dir.path().join("a.onnx")).is_none());
        std::fs::write(dir.path().join(GENAI_CONFIG), r#"{"model": {}}"#).unwrap();
        let err = resolve_model_path(dir.path()).unwrap_err().to_string();
        assert!(err.contains("names no model"), "{err}");
    }
}
