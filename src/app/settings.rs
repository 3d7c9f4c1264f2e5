//! What the studio remembers between runs (through eframe's storage): recent files and the
//! theme. Window size and panel widths are remembered by eframe and egui themselves.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            recent: Vec::new(),
            theme: egui::ThemePreference::System,
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
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Settings>(&text).unwrap(), s);
        assert_eq!(
            serde_json::from_str::<Settings>("{}").unwrap(),
            Settings::default(),
            "older settings without a field still load"
        );
    }
}
