//! Small helpers every layer of the engine may use. This module depends on nothing else in
//! the crate, so no lower layer has to reach up for them: byte counts for people, and the
//! app's cache folder.

use std::path::PathBuf;

/// Human-readable byte count (`1.2 MB`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The app's cache folder: `QDQ_STUDIO_CACHE_DIR`, else the platform's user cache folder
/// (`~/.cache/qdq-studio` on Linux, `%LOCALAPPDATA%\qdq-studio\cache` on Windows). An error
/// only when there is no home folder to hold it.
pub fn cache_dir() -> std::io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("QDQ_STUDIO_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("", "", "qdq-studio")
        .map(|dirs| dirs.cache_dir().to_path_buf())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no home folder to hold the cache",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(format_bytes(999), "999 B");
        assert_eq!(format_bytes(1_200_000), "1.2 MB");
        assert_eq!(format_bytes(4_400_811_806), "4.4 GB");
    }
}
