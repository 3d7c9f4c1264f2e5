//! What the studio remembers between runs (through eframe's storage): recent files, the data
//! each of them was last calibrated and evaluated on, and the theme. Window size and panel
//! widths are remembered by eframe and egui themselves.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::app::work::data::DataChoice;
use std::collections::BTreeMap;

/// How many recent files File ▸ Recent lists.
pub const MAX_RECENT: usize = 10;

/// The persisted settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Recently opened models, newest first.
    pub recent: Vec<PathBuf>,
    /// Light, dark or following the system.
    pub theme: egui::ThemePreference,
    /// The data each recent (or recently saved) model was last run on.
    pub data: BTreeMap<PathBuf, ModelData>,
    /// QDQ models saved from the studio, newest first: their data (the data they were made
    /// and measured with, and their float model) is kept until they are opened.
    pub saved: Vec<PathBuf>,
}

/// The data a model was last calibrated and evaluated on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelData {
    /// Calibration data.
    pub calibration: DataChoice,
    /// Evaluation data.
    pub evaluation: DataChoice,
    /// Evaluated on the calibration data.
    pub evaluate_on_calibration: bool,
    /// For a QDQ model saved from the studio: the float model it was made from (its
    /// comparisons measure against it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub float_model: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            recent: Vec::new(),
            theme: egui::ThemePreference::System,
            data: BTreeMap::new(),
            saved: Vec::new(),
        }
    }
}

impl Settings {
    /// Puts `path` first in the recent list (absolute, without duplicates).
    pub fn add_recent(&mut self, path: &Path) {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        self.recent.retain(|p| p != &path);
        self.recent.insert(0, path);
        self.recent.truncate(MAX_RECENT);
    }

    /// Removes `path` from the recent list (it no longer opens).
    pub fn forget_recent(&mut self, path: &Path) {
        self.recent.retain(|p| p != path);
        self.data.remove(path);
    }

    /// Remembers the data `model` was run on; only recent and recently saved models' data
    /// is kept.
    pub fn remember_data(&mut self, model: &Path, data: ModelData) {
        let model = std::path::absolute(model).unwrap_or_else(|_| model.to_path_buf());
        self.data.insert(model, data);
        let (recent, saved) = (&self.recent, &self.saved);
        self.data
            .retain(|path, _| recent.contains(path) || saved.contains(path));
    }

    /// Remembers what a QDQ model saved from the studio was made and measured with, so that
    /// opening it later compares it on the same data against the same float model.
    pub fn remember_saved(&mut self, model: &Path, data: ModelData) {
        let model = std::path::absolute(model).unwrap_or_else(|_| model.to_path_buf());
        self.saved.retain(|p| p != &model);
        self.saved.insert(0, model.clone());
        self.saved.truncate(MAX_RECENT);
        self.remember_data(&model, data);
    }

    /// The data `model` was last run on.
    pub fn data_for(&self, model: &Path) -> Option<&ModelData> {
        let model = std::path::absolute(model).unwrap_or_else(|_| model.to_path_buf());
        self.data.get(&model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_files_are_newest_first_unique_and_bounded() {
        let mut s = Settings::default();
        for i in 0..12 {
            s.add_recent(Path::new(&format!("/m/{i}.onnx")));
        }
        s.add_recent(Path::new("/m/5.onnx"));
        assert_eq!(s.recent.len(), MAX_RECENT);
        assert_eq!(s.recent[0], Path::new("/m/5.onnx"));
        assert_eq!(s.recent.iter().filter(|p| p.ends_with("5.onnx")).count(), 1);
        let data = ModelData {
            calibration: DataChoice::file(PathBuf::from("/d/calib.npz")),
            evaluation: DataChoice::file(PathBuf::from("/d/eval.npz")),
            evaluate_on_calibration: false,
            float_model: None,
        };
        s.remember_data(Path::new("/m/5.onnx"), data.clone());
        s.remember_data(Path::new("/m/0.onnx"), data.clone());
        assert_eq!(s.data_for(Path::new("/m/5.onnx")), Some(&data));
        assert_eq!(
            s.data_for(Path::new("/m/0.onnx")),
            None,
            "not recent: not kept"
        );
        // A saved QDQ model's data is kept though it was never opened, with its float model.
        let saved = ModelData {
            float_model: Some(PathBuf::from("/m/5.onnx")),
            ..data.clone()
        };
        s.remember_saved(Path::new("/m/5.qdq.onnx"), saved.clone());
        assert_eq!(s.data_for(Path::new("/m/5.qdq.onnx")), Some(&saved));
        assert_eq!(s.data_for(Path::new("/m/5.onnx")), Some(&data));
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Settings>(&text).unwrap(), s);
        assert_eq!(
            serde_json::from_str::<Settings>("{}").unwrap(),
            Settings::default(),
            "older settings without a field still load"
        );
    }
}
