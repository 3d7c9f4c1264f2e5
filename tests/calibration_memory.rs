//! Calibration memory stays bounded by one batch, whatever the number of batches. In its own
//! test binary so that no other test shares the process whose memory it measures.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use qdq_studio::calib::data::{DataSpec, model_inputs};
use qdq_studio::calib::{CalibrationConfig, calibrate};
use qdq_studio::jobs::{CancelToken, JobContext};
use qdq_studio::model::Graph;

use common::{runtime, wide_model};

#[test]
fn memory_does_not_grow_with_the_number_of_batches() {
    let model = wide_model();
    let spec = DataSpec::Random {
        samples: 400,
        shapes: BTreeMap::new(),
        seed: 1,
    };
    let config = CalibrationConfig {
        batch_size: 2,
        ..CalibrationConfig::default()
    };
    let memory: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sink = memory.clone();
    let ctx = JobContext::new(CancelToken::new(), move |p| {
        if let Some(m) = p.memory_bytes {
            sink.lock().unwrap().push(m);
        }
    });
    let inputs = model_inputs(&Graph::build(&model));
    let mut source = spec.open(&inputs).unwrap();
    let stats = calibrate(&model, source.as_mut(), &runtime(), &config, &ctx).unwrap();
    assert_eq!(stats.info.batches, 200);
    let memory = memory.lock().unwrap();
    // Each batch holds ~1.5 MB of activations; keeping them would add ~300 MB by the end.
    let after_warmup = memory[19];
    let last = *memory.last().unwrap();
    assert!(
        last < after_warmup + 48 * 1024 * 1024,
        "RSS grew from {after_warmup} after 20 batches to {last} after 200"
    );
}
