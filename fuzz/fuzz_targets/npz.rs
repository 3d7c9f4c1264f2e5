//! The `.npy`/`.npz` reader on arbitrary bytes: the header parser on the raw stream, then the
//! file as a calibration source (zip directory, streamed and inflated entries), read to the end
//! a few samples at a time. Errors are fine; panics, hangs and allocations the file's size does
//! not justify are not.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use qdq_studio::calib::data::npy::{read_header, read_samples};
use qdq_studio::calib::data::npz::NpzSource;
use qdq_studio::calib::BatchSource;

fuzz_target!(|data: &[u8]| {
    let mut reader = data;
    if let Ok(header) = read_header(&mut reader, "fuzz") {
        let _ = read_samples(&mut reader, &header, 2, "fuzz");
    }
    let Ok(mut file) = tempfile::NamedTempFile::new() else {
        return;
    };
    if file.write_all(data).and_then(|()| file.flush()).is_err() {
        return;
    }
    let Ok(mut source) = NpzSource::open(file.path(), "x", &["x"]) else {
        return;
    };
    let _ = source.arrays();
    for _ in 0..64 {
        match source.next_batch(3) {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
});
