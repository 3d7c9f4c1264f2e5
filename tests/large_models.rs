//! Models whose weights pass the 2 GB protobuf limit: every session the engine creates reads
//! the weights from the model's own external-data file instead of a protobuf copy. The
//! weights live in a sparse file, so the test costs little disk.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use prost::Message;
use qdq_studio::model::proto::StringStringEntryProto;
use qdq_studio::model::proto::TensorProto;
use qdq_studio::model::proto::tensor_proto::{DataLocation, DataType as ProtoType};
use qdq_studio::model::{DataType, Model, ModelBuilder, TensorArray};
use qdq_studio::runtime::{EpSpec, SessionOptions};

use common::{cli, digest, run_ok, run_text, write_npz};

/// Rows × columns of the weight: 8192 × 65600 float32 = 2 149 580 800 bytes, over 2^31.
const ROWS: usize = 8192;
const COLUMNS: usize = 65_600;

/// `y = x · w` with `w` external in `w.bin`: sparse, with its first rows filled so the
/// product is not all zeros.
fn large_model(dir: &Path) -> PathBuf {
    let bytes = (ROWS * COLUMNS * 4) as u64;
    assert!(bytes > 1 << 31);
    let mut file = std::fs::File::create(dir.join("w.bin")).unwrap();
    file.set_len(bytes).unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    let filled: Vec<u8> = (0..4 * COLUMNS)
        .flat_map(|i| (((i % 97) as f32 - 48.0) / 48.0).to_le_bytes())
        .collect();
    file.write_all(&filled).unwrap();
    drop(file);

    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, ROWS as i64]);
    b.node("MatMul", &["x", "w"], &["y"]).name("mm");
    b.output("y", DataType::Float32, &[1, COLUMNS as i64]);
    let mut model = b.build();
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    model
        .proto_mut()
        .graph
        .as_mut()
        .unwrap()
        .initializer
        .push(TensorProto {
            name: Some("w".into()),
            dims: vec![ROWS as i64, COLUMNS as i64],
            data_type: Some(ProtoType::Float as i32),
            data_location: Some(DataLocation::External as i32),
            external_data: vec![
                entry("location", "w.bin".into()),
                entry("offset", "0".into()),
                entry("length", bytes.to_string()),
            ],
            ..Default::default()
        });
    let path = dir.join("large.onnx");
    std::fs::write(&path, model.proto().encode_to_vec()).unwrap();
    path
}

fn run(args: &[&std::ffi::OsStr]) -> String {
    run_ok(cli().args(args))
}

/// Calibrate, quantize (int8 and int4) and compare a model with 2.1 GB of external weights;
/// each quantized model is checked in ONNX Runtime before it is saved and loads again after.
/// The input model and its data file are untouched, and nothing is written beside them.
#[test]
fn a_model_past_2_gb_calibrates_quantizes_and_compares() {
    // The quantizer's own estimate for this model is about 5.4 GB: a machine whose memory
    // other programs hold skips it, saying so, rather than fail the README's command.
    if !common::memory_free_for(
        "a_model_past_2_gb_calibrates_quantizes_and_compares",
        6_000_000_000,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = large_model(dir.path());
    let before = digest(&model);
    let out = tempfile::tempdir().unwrap();
    let stats = out.path().join("stats.json");
    let int8 = out.path().join("int8.onnx");
    let int4 = out.path().join("int4.onnx");
    let o = |p: &Path| p.as_os_str().to_owned();
    let s = |t: &str| std::ffi::OsString::from(t);

    let data = out.path().join("x.npz");
    let x: Vec<f32> = (0..2 * ROWS)
        .map(|i| ((i % 13) as f32 - 6.0) / 6.0)
        .collect();
    let x = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2, ROWS]), x).unwrap();
    write_npz(&data, &[("x", TensorArray::Float32(x))]);
    run(&[
        &s("calibrate"),
        &s("--onnx_path"),
        &o(&model),
        &s("--calibration_data_path"),
        &o(&data),
        &s("-o"),
        &o(&stats),
    ]);
    run(&[
        &s("quantize"),
        &s("--onnx_path"),
        &o(&model),
        &s("--calibration_cache_path"),
        &o(&stats),
        &s("-o"),
        &o(&int8),
    ]);
    run(&[
        &s("quantize"),
        &s("--onnx_path"),
        &o(&model),
        &s("--quantize_mode"),
        &s("int4"),
        &s("--calibration_method"),
        &s("rtn_dq"),
        &s("-o"),
        &o(&int4),
    ]);
    let report = run(&[
        &s("compare"),
        &s("--float"),
        &o(&model),
        &s("--quant"),
        &o(&int8),
        &s("--data"),
        &o(&data),
        &s("--json"),
    ]);
    let report: serde_json::Value =
        serde_json::from_str(report.trim()).unwrap_or_else(|e| panic!("{e}: {report}"));
    let cosine = report["outputs"][0]["cosine"].as_f64().unwrap();
    assert!(cosine > 0.99, "int8 output far from float: {report}");
    // int8 as Q/DQ; int4 in the CPU target's form, MatMulNBits.
    for (q, op) in [(&int8, "DequantizeLinear"), (&int4, "MatMulNBits")] {
        let loaded = Model::load(q).unwrap();
        assert!(
            loaded.graph().node.iter().any(|n| n.op_type() == op),
            "{op}"
        );
    }
    assert_eq!(digest(&model), before, "input touched");
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside.len(), 2, "written beside the input: {beside:?}");
}

/// A model whose tensors made in memory pass 2 GB together (as the quantized weights of a
/// model of more than 8 GB do) still opens in ONNX Runtime: the tensors go to a memory file
/// instead of the protobuf, the check before saving accepts it, and the session computes
/// `x · w1 + x · w2`. (ONNX Runtime takes no single in-memory tensor over 2 GiB.)
#[test]
fn tensors_made_in_memory_past_2_gb_reach_onnx_runtime() {
    const HALF: usize = COLUMNS / 2;
    let value = |i: usize| ((i % 97) as f32 - 48.0) / 48.0;
    let weight = |name: &str, shift: usize| {
        let mut raw = vec![0u8; ROWS * HALF * 4];
        for (i, chunk) in raw[..16 * HALF].chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&value(i + shift).to_le_bytes());
        }
        TensorProto {
            name: Some(name.into()),
            dims: vec![ROWS as i64, HALF as i64],
            data_type: Some(ProtoType::Float as i32),
            raw_data: Some(raw.into()),
            ..Default::default()
        }
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, ROWS as i64]);
    b.node("MatMul", &["x", "w1"], &["y1"]).name("mm1");
    b.node("MatMul", &["x", "w2"], &["y2"]).name("mm2");
    b.node("Add", &["y1", "y2"], &["y"]).name("add");
    b.output("y", DataType::Float32, &[1, HALF as i64]);
    let mut model = b.build();
    let graph = model.proto_mut().graph.as_mut().unwrap();
    graph.initializer.push(weight("w1", 0));
    graph.initializer.push(weight("w2", 5));
    let runtime = common::runtime();
    qdq_studio::quant::verify_loads(&model, &runtime).expect("the check before saving");

    let encoded = model.to_session_model().unwrap();
    assert!(encoded.memory_file.is_some());
    let mut session = runtime
        .session_from_model(&encoded, &[EpSpec::Cpu], SessionOptions::default())
        .unwrap();
    let mut x = ndarray::Array2::<f32>::zeros((1, ROWS));
    x.slice_mut(ndarray::s![0, ..4]).fill(1.0);
    let outputs = session
        .run(ort::inputs!["x" => ort::value::Tensor::from_array(x).unwrap()])
        .unwrap();
    let y = outputs[0].try_extract_array::<f32>().unwrap();
    for c in [0, 1, 777, HALF - 1] {
        let expected: f32 = (0..4)
            .map(|r| value(r * HALF + c) + value(r * HALF + c + 5))
            .sum();
        assert!(
            (y[[0, c]] - expected).abs() < 1e-4,
            "column {c}: {}",
            y[[0, c]]
        );
    }
}

/// A quantization whose quantized weights (and ONNX Runtime's copy for the load check) cannot
/// fit in the memory available is refused before any weight is read, with the estimate and
/// what was available; nothing is written. `QDQ_STUDIO_MEMORY_LIMIT` stands for a small machine.
#[test]
fn a_quantization_that_cannot_fit_in_memory_is_refused_with_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 256]);
    b.initializer(
        "w",
        TensorArray::Float32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[256, 512]), 0.5)),
    );
    b.node("MatMul", &["x", "w"], &["y"]).name("mm");
    b.output("y", DataType::Float32, &[1, 512]);
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, b.build().to_bytes().unwrap()).unwrap();
    let out = dir.path().join("m.int4.onnx");
    let quantize = |limit: &str| {
        run_text(
            cli()
                .env("QDQ_STUDIO_MEMORY_LIMIT", limit)
                .args(["quantize", "--quantize_mode", "int4"])
                .args(["--calibration_method", "rtn_dq", "--onnx_path"])
                .arg(&model)
                .arg("-o")
                .arg(&out),
        )
    };
    let (ok, text) = quantize("64K");
    assert!(!ok, "{text}");
    let line = text.lines().last().unwrap();
    // 256 x 512 int4 weights: 64 KiB, twice, plus the float32 weight being read.
    assert!(
        line.starts_with("error: quantizing needs about ")
            && line.contains("and 65.5 KB is available"),
        "{text}"
    );
    assert!(!out.exists());
    let (ok, text) = quantize("1G");
    assert!(ok, "{text}");
}
