//! Small helpers every layer of the engine may use. This module depends on nothing else in
//! the crate, so no lower layer has to reach up for them: byte counts for people, the app's
//! cache folder, the memory available, reading input files only when they are regular
//! files, and the SQNR formula ([`sqnr`]).

pub mod sqnr;

pub use sqnr::{capped_sqnr_db, sqnr_db};

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

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

/// Hands memory the process has freed back to the system.
///
/// ONNX Runtime's sessions allocate through the C allocator; glibc keeps much of what a
/// closed session freed (below its mmap threshold) in the heap, so after a 1.1B model's
/// session closed the process still held 0.8 GB more than it used (measured). Called after
/// each large session closes, so that the next step starts from what is really in use.
/// Other platforms' allocators return memory themselves: there it does nothing.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes of memory this process can still take: the system's available memory, or the
/// cgroup's free memory when lower, or `QDQ_STUDIO_MEMORY_LIMIT` (bytes, or with a `K`, `M`
/// or `G` suffix, powers of 1024) when lower still, for users sharing a machine. `None` when
/// neither the platform nor the variable says.
pub fn available_memory() -> Option<u64> {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    let mut available = Some(system.available_memory()).filter(|&a| a > 0);
    if let Some(limits) = system.cgroup_limits() {
        available = available.map(|a| a.min(limits.free_memory));
    }
    let limit = std::env::var("QDQ_STUDIO_MEMORY_LIMIT")
        .ok()
        .and_then(|v| parse_bytes(&v));
    match (available, limit) {
        (Some(a), Some(l)) => Some(a.min(l)),
        (a, l) => a.or(l),
    }
}

/// `1234`, `64K`, `512M` or `2G` (powers of 1024) as bytes; `None` when it is none of those.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&text[..i], 1 << 20),
        (i, 'G' | 'g') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    number.trim().parse::<u64>().ok()?.checked_mul(scale)
}

/// The folder a file path names: its parent, or `.` for a bare file name.
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
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

/// An error and its causes on one line ("a: b: c"), as the CLI prints it and the studio's
/// notices show it. A cause whose text the line already holds (an error that quotes its
/// source) is not repeated.
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// What a path that is not a regular file is, for messages ("a named pipe").
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a named pipe";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Opens `path` for reading when it is a regular file (symbolic links followed). A folder, a
/// named pipe (whose open would block until a writer comes), a device such as `/dev/zero`
/// (endless) or a socket is an `InvalidInput` error saying what it is, before it is opened.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let not_regular = |meta: &std::fs::Metadata| {
        let kind = kind_of(meta);
        let text = if kind == "not a regular file" {
            kind.to_owned()
        } else {
            format!("it is {kind}, not a regular file")
        };
        std::io::Error::new(std::io::ErrorKind::InvalidInput, text)
    };
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let file = File::open(path)?;
    // The path may have been swapped between the check and the open.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    Ok(file)
}

/// Reads a regular file whole, never more than the size it declared when opened (a file that
/// grows while read is cut there).
pub fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads a regular file whole as UTF-8 text (see [`read_regular`]).
pub fn read_regular_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_regular(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"abc");
        let err = read_regular(dir.path()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), "it is a folder, not a regular file");
        #[cfg(unix)]
        {
            let fifo = dir.path().join("pipe");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status();
            assert!(made.unwrap().success());
            // Would block forever if it were opened.
            let err = read_regular(&fifo).unwrap_err();
            assert_eq!(err.to_string(), "it is a named pipe, not a regular file");
            let err = read_regular(Path::new("/dev/zero")).unwrap_err();
            assert_eq!(err.to_string(), "it is a device, not a regular file");
        }
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(format_bytes(999), "999 B");
        assert_eq!(format_bytes(1_200_000), "1.2 MB");
        assert_eq!(format_bytes(4_400_811_806), "4.4 GB");
    }
}
