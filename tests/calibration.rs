//! Calibration against real ONNX Runtime sessions: parity with onnxruntime's calibrators
//! (fixture from `tests/fixtures/make_ort_calib_fixture.py`), batch-size independence, bounded
//! memory, and clear errors for bad data.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, Dimension, IxDyn};
use qdq_studio::calib::data::{DataSpec, model_inputs};
use qdq_studio::calib::range::{RangeMethod, RangeTarget, compute};
use qdq_studio::calib::{
    CalibError, CalibrationConfig, CalibrationStats, DataError, ParityBins, calibrate,
};
use qdq_studio::jobs::{CancelToken, JobContext};
use qdq_studio::model::{DataType, Graph, Model, ModelBuilder, TensorArray, TensorKind};
use qdq_studio::runtime::EpSpec;
use serde_json::Value;

use common::{asset, runtime, wide_model, write_npz};

fn sample_model() -> Model {
    Model::load(asset("ppocr_cls.onnx").as_path()).unwrap()
}

fn sample_data() -> PathBuf {
    asset("calib.npz")
}

fn run(
    model: &Model,
    spec: &DataSpec,
    config: &CalibrationConfig,
) -> Result<CalibrationStats, CalibError> {
    let inputs = model_inputs(&Graph::build(model));
    let mut source = spec.open(&inputs)?;
    calibrate(
        model,
        source.as_mut(),
        &runtime(),
        config,
        &JobContext::silent(),
    )
}

fn calibrate_sample(batch_size: usize, parity: Option<ParityBins>) -> CalibrationStats {
    let config = CalibrationConfig {
        batch_size,
        ort_parity: parity,
        ..CalibrationConfig::default()
    };
    run(
        &sample_model(),
        &DataSpec::Npz {
            path: sample_data(),
        },
        &config,
    )
    .unwrap()
}

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/ort_calib_sample.json")).unwrap()
}

/// onnxruntime's ranges for the activations (it also calibrates Constant-node weights, which
/// qdq-studio quantizes from their own values instead).
fn ort_activation_ranges(method: &str) -> BTreeMap<String, (f32, f32)> {
    let graph = Graph::build(&sample_model());
    fixture()[method]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| {
            graph
                .tensor(name)
                .is_some_and(|t| t.kind != TensorKind::Constant)
        })
        .map(|(name, v)| {
            (
                name.clone(),
                (v[0].as_f64().unwrap() as f32, v[1].as_f64().unwrap() as f32),
            )
        })
        .collect()
}

#[test]
fn minmax_ranges_equal_onnxruntime_bit_for_bit() {
    let stats = calibrate_sample(4, None);
    let expected = ort_activation_ranges("minmax");
    assert!(expected.len() > 200, "{}", expected.len());
    for (name, (lo, hi)) in &expected {
        let s = stats
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("'{name}' was not calibrated"));
        let r = compute(
            s,
            &RangeMethod::MinMax {
                moving_average: false,
            },
            RangeTarget::default(),
            false,
        )
        .unwrap();
        assert_eq!(
            (r.lo.to_bits(), r.hi.to_bits()),
            (lo.to_bits(), hi.to_bits()),
            "{name}: {r:?} vs ({lo}, {hi})"
        );
    }
}

#[test]
fn minmax_statistics_do_not_depend_on_the_batch_size() {
    let one = calibrate_sample(1, None);
    let many = calibrate_sample(32, None);
    assert_eq!(one.info.batches, 32);
    assert_eq!(many.info.batches, 1);
    assert_eq!(one.tensors.len(), many.tensors.len());
    for (name, a) in &one.tensors {
        let b = &many.tensors[name];
        // Counts differ for tensors computed from constants alone (once per run).
        assert_eq!(
            (a.min.to_bits(), a.max.to_bits()),
            (b.min.to_bits(), b.max.to_bits()),
            "{name}"
        );
    }
}

/// Checks each range against onnxruntime's within `bins_of(name)` bin widths.
fn assert_within_one_bin(
    stats: &CalibrationStats,
    method: &RangeMethod,
    fixture_key: &str,
    min_exact_share: f64,
    bin_width: impl Fn(&str) -> f32,
) {
    let expected = ort_activation_ranges(fixture_key);
    let mut exact = 0;
    for (name, (lo, hi)) in &expected {
        let s = &stats.tensors[name];
        let r = compute(s, method, RangeTarget::default(), true).unwrap();
        let w = bin_width(name) * 1.001 + f32::EPSILON;
        assert!(
            (r.lo - lo).abs() <= w && (r.hi - hi).abs() <= w,
            "{fixture_key} {name}: {r:?} vs ({lo}, {hi}), bin {w}"
        );
        exact += usize::from(r.lo == *lo && r.hi == *hi);
    }
    // Many ranges are identical; the rest differ because numpy bins in float32 and we in f64.
    let share = exact as f64 / expected.len() as f64;
    assert!(
        share >= min_exact_share,
        "{fixture_key}: only {exact}/{} exact",
        expected.len()
    );
}

#[test]
fn entropy_and_percentile_in_parity_mode_are_within_one_bin_of_onnxruntime() {
    let stats = calibrate_sample(4, Some(ParityBins::default()));
    assert!(stats.info.ort_parity);
    let entropy = RangeMethod::Entropy {
        num_quantized_bins: 128,
    };
    assert_within_one_bin(&stats, &entropy, "entropy_128", 0.9, |n| {
        2.0 * stats.tensors[n].abs_max() / 128.0
    });
    let percentile = RangeMethod::Percentile {
        percentile: 99.999,
        symmetric: true,
    };
    assert_within_one_bin(&stats, &percentile, "percentile", 0.9, |n| {
        let s = &stats.tensors[n];
        (s.abs_max() - s.min_abs) / 2048.0
    });

    let stats = calibrate_sample(
        4,
        Some(ParityBins {
            entropy_bins: 512,
            percentile_bins: 2048,
        }),
    );
    assert_within_one_bin(&stats, &entropy, "entropy_512", 0.75, |n| {
        2.0 * stats.tensors[n].abs_max() / 512.0
    });
}

#[test]
fn default_entropy_does_not_collapse_to_minmax() {
    // onnxruntime's default Entropy equals MinMax; ours clips the tails of wide tensors.
    let stats = calibrate_sample(4, None);
    let entropy = RangeMethod::Entropy {
        num_quantized_bins: 128,
    };
    let clipped = stats
        .tensors
        .values()
        .filter(|s| s.has_data())
        .filter(|s| {
            let r = compute(s, &entropy, RangeTarget::default(), false).unwrap();
            r.hi < s.max * 0.99 || r.lo > s.min * 0.99
        })
        .count();
    assert!(
        clipped * 2 > stats.tensors.len(),
        "only {clipped}/{} ranges clipped",
        stats.tensors.len()
    );
}

fn floats(shape: &[usize]) -> TensorArray {
    TensorArray::Float32(ArrayD::from_shape_fn(IxDyn(shape), |i| {
        i.as_array_view().iter().sum::<usize>() as f32
    }))
}

fn data_error(model: &Model, path: &Path, batch_size: usize) -> String {
    let config = CalibrationConfig {
        batch_size,
        ..CalibrationConfig::default()
    };
    match run(
        model,
        &DataSpec::Npz {
            path: path.to_path_buf(),
        },
        &config,
    ) {
        Err(CalibError::Data(e)) => e.to_string(),
        Err(other) => panic!("expected a data error, got {other}"),
        Ok(_) => panic!("expected a data error"),
    }
}

#[test]
fn npz_files_that_do_not_fit_the_model_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let model = sample_model();
    let path = dir.path().join("d.npz");
    let cases: Vec<(Vec<(&str, TensorArray)>, &str)> = vec![
        (
            vec![("image", floats(&[2, 3, 48, 192]))],
            "input 'x' has no array",
        ),
        (
            vec![(
                "x",
                TensorArray::Int64(ArrayD::zeros(IxDyn(&[2, 3, 48, 192]))),
            )],
            "'x': expected float32, got int64",
        ),
        (vec![("x", floats(&[2, 48, 192]))], "expected rank 4"),
        (
            vec![("x", floats(&[2, 4, 48, 192]))],
            "axis 1 must be 3, got 4",
        ),
        (vec![("x", floats(&[0, 3, 48, 192]))], "holds no samples"),
    ];
    for (arrays, message) in cases {
        write_npz(&path, &arrays);
        let text = data_error(&model, &path, 1);
        assert!(text.contains(message), "expected '{message}' in: {text}");
    }
}

#[test]
fn mismatched_sample_counts_and_corrupt_archives_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.npz");
    let mut b = ModelBuilder::new(17);
    b.input("a", DataType::Float32, &[-1, 2]);
    b.input("b", DataType::Float32, &[-1, 2]);
    b.node("Add", &["a", "b"], &["y"]);
    b.output("y", DataType::Float32, &[-1, 2]);
    let model = b.build();
    write_npz(&path, &[("a", floats(&[3, 2])), ("b", floats(&[4, 2]))]);
    assert!(data_error(&model, &path, 1).contains("different numbers of samples"));

    let good = std::fs::read(sample_data()).unwrap();
    std::fs::write(&path, &good[..good.len() / 3]).unwrap();
    let text = data_error(&sample_model(), &path, 1);
    assert!(text.contains("corrupt"), "{text}");
    let mut flipped = good.clone();
    for byte in flipped.iter_mut().skip(200).take(64) {
        *byte ^= 0x5A;
    }
    std::fs::write(&path, &flipped).unwrap();
    let config = CalibrationConfig::default();
    assert!(
        run(
            &sample_model(),
            &DataSpec::Npz { path: path.clone() },
            &config
        )
        .is_err()
    );
}

#[test]
fn a_pickled_npz_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.npz");
    let file = std::fs::File::create(&path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    zip.start_file("x.npy", zip::write::SimpleFileOptions::default())
        .unwrap();
    let dict = "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend((dict.len() as u16).to_le_bytes());
    npy.extend(dict.as_bytes());
    npy.extend(b"cos\nsystem\n(S'echo pwned'\ntR.");
    std::io::Write::write_all(&mut zip, &npy).unwrap();
    zip.finish().unwrap();
    let Err(err) = DataSpec::Npz { path }.open(&[]) else {
        panic!("a pickle was accepted");
    };
    assert!(
        matches!(err, DataError::UnsupportedNpy { .. }) && err.to_string().contains("pickle"),
        "{err}"
    );
}

#[test]
fn a_provider_missing_from_the_library_is_an_error_not_a_cpu_run() {
    let rt = runtime();
    let lacking = EpSpec::known()
        .into_iter()
        .find(|ep| !rt.has_ep(ep))
        .expect("no library has every provider");
    let config = CalibrationConfig {
        execution_providers: vec![lacking.clone()],
        ..CalibrationConfig::default()
    };
    let err = run(
        &sample_model(),
        &DataSpec::Npz {
            path: sample_data(),
        },
        &config,
    )
    .unwrap_err();
    assert!(err.to_string().contains(&lacking.to_string()), "{err}");
}

#[test]
fn a_run_that_fails_mid_way_names_the_batch() {
    // y = Gather(table, idx): index 9 is out of range, in sample 5 → batch 2 with batches of 2.
    let mut b = ModelBuilder::new(17);
    b.input("idx", DataType::Int64, &[-1]);
    b.initializer("table", floats(&[4]));
    b.node("Gather", &["table", "idx"], &["y"]).name("gather");
    b.output("y", DataType::Float32, &[-1]);
    let model = b.build();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idx.npz");
    let idx = TensorArray::Int64(
        ArrayD::from_shape_vec(IxDyn(&[8]), vec![0, 1, 2, 3, 0, 9, 1, 2]).unwrap(),
    );
    write_npz(&path, &[("idx", idx)]);
    let config = CalibrationConfig {
        batch_size: 2,
        ..CalibrationConfig::default()
    };
    let err = run(&model, &DataSpec::Npz { path }, &config).unwrap_err();
    assert!(
        matches!(
            err,
            CalibError::Run {
                batch: 2,
                first_sample: 4,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn cancelling_returns_promptly_and_yields_no_statistics() {
    let model = wide_model();
    let inputs = model_inputs(&Graph::build(&model));
    let mut source = DataSpec::Random {
        samples: 10_000,
        shapes: BTreeMap::new(),
        seed: 2,
    }
    .open(&inputs)
    .unwrap();
    let cancel = CancelToken::new();
    let trigger = cancel.clone();
    let ctx = JobContext::new(cancel, move |p| {
        if p.done >= 4 {
            trigger.cancel();
        }
    });
    let started = std::time::Instant::now();
    let err = calibrate(
        &model,
        source.as_mut(),
        &runtime(),
        &CalibrationConfig::default(),
        &ctx,
    )
    .unwrap_err();
    assert!(matches!(err, CalibError::Cancelled), "{err}");
    assert!(started.elapsed().as_secs() < 5);
}

#[test]
fn statistics_files_round_trip_and_the_cli_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let stats_path = dir.path().join("stats.json");
    let cache_path = dir.path().join("ort.json");
    let out = common::cli()
        .args(["calibrate", "--onnx_path"])
        .arg(asset("ppocr_cls.onnx"))
        .arg("--calibration_data_path")
        .arg(sample_data())
        .args(["--batch_size", "8", "-o"])
        .arg(&stats_path)
        .arg("--export_ort_cache")
        .arg(&cache_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded = qdq_studio::calib::file::load(&stats_path).unwrap();
    assert_eq!(loaded.info.samples, 32);
    assert_eq!(loaded.info.batches, 4);
    // The CLI calibrates the model as the quantizer sees it (named, pre-processed), like
    // `quantize` and the studio: the same statistics as the workflow step, read back exactly.
    let direct = qdq_studio::workflow::calibrate::calibrate(
        &sample_model(),
        &Default::default(),
        &DataSpec::Npz {
            path: sample_data(),
        },
        &CalibrationConfig {
            batch_size: 8,
            ..CalibrationConfig::default()
        },
        &runtime(),
        &JobContext::silent(),
    )
    .unwrap();
    let names = |s: &CalibrationStats| s.tensors.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&loaded), names(&direct));
    assert!(
        direct.tensors.len() < calibrate_sample(8, None).tensors.len(),
        "pre-processing folds tensors away (Identity outputs, folded BatchNormalization inputs)"
    );
    for (name, s) in &direct.tensors {
        let back = &loaded.tensors[name];
        assert_eq!(
            (back.min, back.max, back.count),
            (s.min, s.max, s.count),
            "{name}"
        );
        assert_eq!(
            back.histogram, s.histogram,
            "{name}: the histogram reads back"
        );
        assert_eq!(back.shapes, s.shapes, "{name}");
    }
    let ranges = qdq_studio::calib::file::read_ort_cache(&cache_path).unwrap();
    assert_eq!(ranges.len(), direct.tensors.len());
    for (name, r) in ranges {
        let s = &direct.tensors[&name];
        assert_eq!((r.lo, r.hi), (s.min, s.max), "{name}");
    }
    // A bad EP name is one line on stderr and a failure.
    let out = common::cli()
        .args(["calibrate", "--onnx_path"])
        .arg(asset("ppocr_cls.onnx"))
        .args(["--calibration_eps", "tpu", "-o"])
        .arg(dir.path().join("never.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown execution provider 'tpu'"));
    assert!(!dir.path().join("never.json").exists());
}

#[test]
fn image_folders_and_onnx_runtime_test_data_feed_the_model() {
    let dir = tempfile::tempdir().unwrap();
    // Images: white text lines on grey, through the CLI with PP-OCR's normalisation.
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    for i in 0..3u8 {
        let mut img = image::RgbImage::from_pixel(192, 48, image::Rgb([200, 200, 200]));
        for x in (10 + u32::from(i) * 5)..150 {
            img.put_pixel(x, 24, image::Rgb([20, 20, 20]));
        }
        img.save(images.join(format!("line{i}.png"))).unwrap();
    }
    let stats = dir.path().join("stats.json");
    let out = common::cli()
        .args(["calibrate", "--onnx_path"])
        .arg(asset("ppocr_cls.onnx"))
        .arg("--calibration_data_path")
        .arg(&images)
        .args([
            "--image_size",
            "192x48",
            "--mean",
            "0.5,0.5,0.5",
            "--std",
            "0.5,0.5,0.5",
            "-o",
        ])
        .arg(&stats)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded = qdq_studio::calib::file::load(&stats).unwrap();
    assert_eq!(loaded.info.samples, 3);
    let x = &loaded.tensors["x"];
    assert!(x.min >= -1.0 && x.max <= 1.0 && x.min < -0.8, "{x:?}");

    // ONNX Runtime test-data folders: two sets of one sample each.
    let sets = dir.path().join("pb");
    let data = ndarray_npy_free_sample();
    for (i, sample) in data.iter().enumerate() {
        let set = sets.join(format!("test_data_set_{i}"));
        std::fs::create_dir_all(&set).unwrap();
        let proto = sample.to_proto("x");
        std::fs::write(
            set.join("input_0.pb"),
            prost::Message::encode_to_vec(&proto),
        )
        .unwrap();
    }
    let stats = run(
        &sample_model(),
        &DataSpec::PbFolder { path: sets },
        &CalibrationConfig::default(),
    )
    .unwrap();
    assert_eq!((stats.info.samples, stats.info.batches), (2, 2));
}

/// Two samples of the bundled calibration data, read through our own npz reader.
fn ndarray_npy_free_sample() -> Vec<TensorArray> {
    let inputs = model_inputs(&Graph::build(&sample_model()));
    let mut source = DataSpec::Npz {
        path: sample_data(),
    }
    .open(&inputs)
    .unwrap();
    (0..2)
        .map(|_| source.next_batch(1).unwrap().unwrap().inputs.remove(0).1)
        .collect()
}

/// Calibrates the wide model on 12 random samples in batches of 8 within `budget` bytes.
fn calibrate_within(budget: u64) -> Result<qdq_studio::calib::CalibrationStats, String> {
    let model = wide_model();
    let spec = DataSpec::Random {
        samples: 12,
        shapes: BTreeMap::new(),
        seed: 3,
    };
    let config = CalibrationConfig {
        batch_size: 8,
        memory_budget: Some(budget),
        ..CalibrationConfig::default()
    };
    let inputs = model_inputs(&Graph::build(&model));
    let mut source = spec.open(&inputs).unwrap();
    let ctx = JobContext::new(CancelToken::new(), |_| {});
    calibrate(&model, source.as_mut(), &runtime(), &config, &ctx).map_err(|e| e.to_string())
}

#[test]
fn a_batch_too_big_for_memory_is_lowered_with_a_note_and_one_sample_too_big_is_refused() {
    // A sample of the wide model holds its input and the observed x, r and y: 4 × 256 × 256
    // floats = 1 MiB. Their shapes are not all declared, so the first batch (one sample) is
    // measured before the batch size is fitted.
    let sample = 4 * 256 * 256 * 4;
    let roomy = calibrate_within(64 * sample).unwrap();
    assert_eq!(roomy.info.batch_size, 8);
    assert!(roomy.info.notes.is_empty(), "{:?}", roomy.info.notes);

    let tight = calibrate_within(3 * sample).unwrap();
    assert_eq!(tight.info.batch_size, 3);
    assert_eq!(tight.info.samples, 12);
    assert_eq!(
        tight.info.batches, 5,
        "1 measured sample, then 3 + 3 + 3 + 2"
    );
    assert!(
        tight.info.notes[0].starts_with("batch size lowered from 8 to 3"),
        "{:?}",
        tight.info.notes
    );
    // Lowering the batch changes nothing in what was learned.
    for (name, s) in &roomy.tensors {
        let t = &tight.tensors[name];
        assert_eq!((s.count, s.min, s.max), (t.count, t.min, t.max), "{name}");
    }

    let err = calibrate_within(sample / 2).unwrap_err();
    assert!(
        err.contains("one calibration sample needs about 786.4 KB") && err.contains("524.3 KB"),
        "{err}"
    );
}

/// Labels and texts kept beside the inputs (the usual layout of an evaluation set) are left
/// aside with one note, unread: a unicode array no longer refuses the whole file.
#[test]
fn arrays_that_are_not_inputs_are_left_aside_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let model = sample_model();
    let x: Vec<u8> = (0..2 * 3 * 48 * 192)
        .flat_map(|i| ((i % 7) as f32 / 7.0).to_le_bytes())
        .collect();
    // Two 4-character unicode strings, numpy's '<U4' (UTF-32 little-endian).
    let texts: Vec<u8> = "ab  cdef"
        .chars()
        .flat_map(|c| (c as u32).to_le_bytes())
        .collect();
    let labels: Vec<u8> = [3i64, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
    let path = dir.path().join("eval.npz");
    std::fs::write(
        &path,
        common::npz(
            &[
                ("x", common::npy("<f4", false, &[2, 3, 48, 192], &x)),
                ("labels", common::npy("<i8", false, &[2], &labels)),
                ("texts", common::npy("<U4", false, &[2], &texts)),
            ],
            false,
        ),
    )
    .unwrap();
    let stats = run(
        &model,
        &DataSpec::Npz { path },
        &CalibrationConfig::default(),
    )
    .unwrap();
    assert_eq!(stats.info.samples, 2);
    assert!(
        stats
            .info
            .notes
            .iter()
            .any(|n| n == "'labels', 'texts' are not model inputs: left aside"),
        "{:?}",
        stats.info.notes
    );
}
