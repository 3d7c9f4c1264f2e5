//! The bad-input corpus (`tests/bad_inputs/`): files that each break one thing, run through
//! the real CLI. For every file: a clear one-line error (or the documented handling), no
//! panic, nothing written outside the output folder, the input untouched, and the process's
//! peak memory under a bound.
//!
//! The files are committed; `cargo test --test bad_input_corpus -- --ignored regenerate`
//! rewrites them from the generators below (and the fuzz targets use them as seeds).

use crate::common;

use common::{npy, npz};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use ndarray::{ArrayD, IxDyn};
use prost::Message;
use qdq_studio::model::proto::{
    GraphProto, ModelProto, StringStringEntryProto, tensor_proto::DataLocation,
};
use qdq_studio::model::{DataType, ModelBuilder, TensorArray};

/// Peak resident memory any case may reach (ONNX Runtime itself takes ~100 MB).
const MEMORY_BOUND_BYTES: u64 = 1536 << 20;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_inputs")
}

/// How a case is run.
#[derive(Debug, Clone, Copy)]
enum Run {
    /// `inspect FILE`.
    Inspect,
    /// `quantize` FILE as the model, on random data.
    QuantizeModel,
    /// `calibrate` the good model on FILE as data (at most 8 samples).
    CalibrateData,
    /// `calibrate` `dynamic.onnx` (x: [N, M]) on FILE as data.
    CalibrateDynamic,
    /// `quantize` the good model on FILE as data.
    QuantizeData,
    /// `quantize` the good model with FILE as the recipe.
    Recipe,
}

/// What must come out.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Exit 1 with one `error:` line containing this.
    Error(&'static str),
    /// Exit 0 and this in the output (the documented handling).
    Handled(&'static str),
}

/// One corpus file: its name, what it breaks, how it is run and what must come out.
struct Case {
    file: &'static str,
    breaks: &'static str,
    run: Run,
    expect: Expect,
}

const fn case(file: &'static str, breaks: &'static str, run: Run, expect: Expect) -> Case {
    Case {
        file,
        breaks,
        run,
        expect,
    }
}

use Expect::{Error, Handled};
use Run::{CalibrateData, CalibrateDynamic, Inspect, QuantizeData, QuantizeModel, Recipe};

const CASES: &[Case] = &[
    // Models.
    case(
        "model_truncated.onnx",
        "cut in half",
        Inspect,
        Error("is not a valid ONNX model"),
    ),
    case(
        "model_bitflip_tag.onnx",
        "a flipped bit in a field tag",
        Inspect,
        Error("is not a valid ONNX model"),
    ),
    case(
        "model_bitflip_payload.onnx",
        "flipped bits inside a weight's float payload (undetectable: the model is still valid)",
        Inspect,
        Handled("parameters 112"),
    ),
    case(
        "model_empty.onnx",
        "zero bytes",
        Inspect,
        Error("has no graph"),
    ),
    case(
        "model_text.onnx",
        "a text file",
        Inspect,
        Error("is not a valid ONNX model"),
    ),
    case(
        "model_no_graph.onnx",
        "a ModelProto without a graph",
        Inspect,
        Error("has no graph"),
    ),
    case(
        "model_deep_nesting.onnx",
        "subgraphs nested 200 deep (protobuf recursion limit)",
        Inspect,
        Error("recursion limit"),
    ),
    case(
        "model_huge_dims.onnx",
        "a weight claiming 2^40 elements over 16 bytes",
        Inspect,
        Error("needs 4398046511104 bytes, but the tensor holds 16"),
    ),
    case(
        "model_huge_input.onnx",
        "an input declared [1, 2^40]",
        QuantizeModel,
        Error("needs about"),
    ),
    case(
        "model_negative_dims.onnx",
        "a weight with dims [-1, 4]",
        Inspect,
        Error("invalid dimensions [-1, 4]"),
    ),
    case(
        "model_raw_data_length.onnx",
        "raw_data 3 bytes short",
        Inspect,
        Error("needs 432 bytes, but the tensor holds 429"),
    ),
    case(
        "model_unknown_dtype.onnx",
        "an element type 99",
        Inspect,
        Error("element type 99 is not an ONNX element type"),
    ),
    case(
        "model_external_dotdot.onnx",
        "external data at ../outside.bin",
        Inspect,
        Error("points outside the model's folder"),
    ),
    case(
        "model_external_absolute.onnx",
        "external data at /etc/passwd",
        Inspect,
        Error("is absolute"),
    ),
    case(
        "model_external_symlink.onnx",
        "external data through a symlink leaving the folder",
        Inspect,
        Error("points outside the model's folder"),
    ),
    case(
        "model_external_missing.onnx",
        "external data file that does not exist",
        Inspect,
        Error("is missing"),
    ),
    case(
        "model_external_short.onnx",
        "external data file shorter than the tensor",
        Inspect,
        Error("but the tensor needs"),
    ),
    case(
        "model_external_offset_overflow.onnx",
        "external offset 2^63",
        Inspect,
        Error("offset"),
    ),
    case(
        "model_nan_weights.onnx",
        "a NaN in a Conv weight",
        QuantizeModel,
        Error("NaN/Inf"),
    ),
    case(
        "model_inf_weights.onnx",
        "+Inf in a Conv weight",
        QuantizeModel,
        Error("NaN/Inf"),
    ),
    case(
        "model_cycle.onnx",
        "a cycle of three nodes",
        Inspect,
        Error("cycle"),
    ),
    case(
        "model_dangling_input.onnx",
        "a node input nothing produces",
        Inspect,
        Error("'ghost'"),
    ),
    case(
        "model_duplicate_outputs.onnx",
        "two nodes writing the same tensor",
        Inspect,
        Error("writes tensor 'y', which is already defined"),
    ),
    case(
        "model_duplicate_node_names.onnx",
        "two nodes with the same name (ONNX allows it; names are made unique in the output)",
        QuantizeModel,
        Handled("Conv 2"),
    ),
    case(
        "model_duplicate_initializers.onnx",
        "two initializers with the same name",
        Inspect,
        Error("two initializers are named 'w'"),
    ),
    case(
        "model_custom_domain.onnx",
        "a custom op in domain com.acme",
        QuantizeModel,
        Error("com.acme"),
    ),
    case(
        "model_unknown_op.onnx",
        "an unknown op in the default domain",
        QuantizeModel,
        Error("FancyConv"),
    ),
    case(
        "model_no_outputs.onnx",
        "a graph with no outputs",
        QuantizeModel,
        Error("declares no outputs"),
    ),
    // Calibration data (the good model's input is x: float32 [N, 3, 8, 8]).
    case(
        "data_truncated.npy",
        "an .npy cut short",
        CalibrateData,
        Error("truncated"),
    ),
    case(
        "data_bad_magic.npy",
        "not the .npy magic",
        CalibrateData,
        Error("not a valid .npz"),
    ),
    case(
        "data_pickle.npy",
        "an object array (pickle)",
        CalibrateData,
        Error("never unpickles"),
    ),
    case(
        "data_pickle.npz",
        "an object array (pickle) inside an .npz",
        CalibrateData,
        Error("never unpickles"),
    ),
    case(
        "data_fortran.npy",
        "Fortran order",
        CalibrateData,
        Error("Fortran"),
    ),
    case(
        "data_big_endian.npy",
        "big-endian floats",
        CalibrateData,
        Error("big-endian"),
    ),
    case(
        "data_not_zip.npz",
        "random bytes named .npz",
        CalibrateData,
        Error("not a valid .npz"),
    ),
    case(
        "data_zip_bomb.npz",
        "a zip bomb: 512 MiB of zeros deflated to half a megabyte",
        CalibrateData,
        Handled("calibrated"),
    ),
    case(
        "data_lying_header.npz",
        "a header and zip sizes claiming 100 million samples over 1 KiB of data",
        QuantizeData,
        Error("ends early"),
    ),
    case(
        "data_huge_sample.npz",
        "one sample of 2^38 floats, sizes consistent, for a model with a free dimension",
        CalibrateDynamic,
        Error("needs about 1.1 TB"),
    ),
    case(
        "data_count_mismatch.npz",
        "two arrays with different sample counts",
        CalibrateData,
        Error("x: 4"),
    ),
    case(
        "data_wrong_name.npz",
        "the array named y, not x",
        CalibrateData,
        Error("'x'"),
    ),
    case(
        "data_wrong_shape.npz",
        "samples of [3, 9, 9]",
        CalibrateData,
        Error("axis 2 must be 8, got 9"),
    ),
    case(
        "data_wrong_dtype.npz",
        "int32 samples",
        CalibrateData,
        Error("int32"),
    ),
    case(
        "data_nan.npz",
        "NaN and Inf among the activations (counted, never folded into ranges)",
        CalibrateData,
        Handled("calibrated"),
    ),
    // Recipes.
    case(
        "recipe_not_toml.toml",
        "not TOML",
        Recipe,
        Error("line 1, column 8"),
    ),
    case(
        "recipe_unknown_key.toml",
        "a misspelt key",
        Recipe,
        Error("per_chanel"),
    ),
    case(
        "recipe_bad_method.toml",
        "an unknown calibration method",
        Recipe,
        Error("magic"),
    ),
    case(
        "recipe_percentile_150.toml",
        "a percentile above 100",
        Recipe,
        Error("percentile must be above 0 and at most 100, got 150"),
    ),
    case(
        "recipe_unknown_node.toml",
        "excluding a node the model does not have",
        Recipe,
        Error("convv"),
    ),
    case(
        "recipe_bad_regex.toml",
        "a node pattern that is not a valid regex",
        Recipe,
        Error("no node matches '(unclosed' (not a valid regular expression"),
    ),
];

// ---------------------------------------------------------------------------------------------
// Generators.

fn floats(shape: &[usize], f: impl Fn(usize) -> f32) -> TensorArray {
    let n = shape.iter().product();
    TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(f).collect()).unwrap())
}

/// The model every data and recipe case runs on: y = Relu(Conv(x)), x: [N, 3, 8, 8].
fn good_model() -> ModelProto {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 3, 8, 8]);
    b.initializer("w", floats(&[4, 3, 3, 3], |i| (i % 7) as f32 / 7.0 - 0.5));
    b.initializer("b", floats(&[4], |i| i as f32 / 10.0));
    b.node("Conv", &["x", "w", "b"], &["c"])
        .name("conv")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("Relu", &["c"], &["y"]).name("relu");
    b.output("y", DataType::Float32, &[-1, 4, 8, 8]);
    b.build().proto().clone()
}

fn graph_mut(model: &mut ModelProto) -> &mut GraphProto {
    model.graph.as_mut().unwrap()
}

fn init_mut<'a>(
    model: &'a mut ModelProto,
    name: &str,
) -> &'a mut qdq_studio::model::proto::TensorProto {
    graph_mut(model)
        .initializer
        .iter_mut()
        .find(|t| t.name() == name)
        .unwrap()
}

fn set_external(model: &mut ModelProto, location: &str, offset: u64) {
    let w = init_mut(model, "w");
    w.raw_data = None;
    w.data_location = Some(DataLocation::External as i32);
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    w.external_data = vec![
        entry("location", location.into()),
        entry("offset", offset.to_string()),
    ];
}

fn with_weight_value(index: usize, value: f32) -> ModelProto {
    let mut model = good_model();
    let w = init_mut(&mut model, "w");
    let mut raw = w.raw_data.clone().unwrap().to_vec();
    raw[index * 4..index * 4 + 4].copy_from_slice(&value.to_le_bytes());
    w.raw_data = Some(Bytes::from(raw));
    model
}

fn simple(build: impl FnOnce(&mut ModelBuilder)) -> ModelProto {
    let mut b = ModelBuilder::new(17);
    build(&mut b);
    b.build().proto().clone()
}

fn f32_bytes(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values.flat_map(f32::to_le_bytes).collect()
}

fn samples(count: u64) -> Vec<u8> {
    f32_bytes((0..count * 192).map(|i| (i % 17) as f32 / 17.0))
}

/// Writes the whole corpus into `dir`.
#[allow(clippy::too_many_lines, reason = "the corpus, one entry after another")]
fn generate(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    let model = |name: &str, proto: &ModelProto| write(name, &proto.encode_to_vec());

    let good = good_model();
    model("good.onnx", &good);
    let good_bytes = good.encode_to_vec();
    write("model_truncated.onnx", &good_bytes[..good_bytes.len() / 2]);
    let mut flipped = good_bytes.clone();
    flipped[0] ^= 0x07; // field 1's tag 0x08 (varint) becomes wire type 7, which does not exist
    write("model_bitflip_tag.onnx", &flipped);
    let mut payload = good_bytes.clone();
    let w_raw = good
        .graph
        .as_ref()
        .unwrap()
        .initializer
        .iter()
        .find(|t| t.name() == "w")
        .unwrap()
        .raw_data
        .clone()
        .unwrap();
    let at = good_bytes
        .windows(w_raw.len())
        .position(|s| s == &w_raw[..])
        .unwrap();
    for k in [5, 77, 200] {
        payload[at + k] ^= 0x10;
    }
    write("model_bitflip_payload.onnx", &payload);
    write("model_empty.onnx", b"");
    write(
        "model_text.onnx",
        b"This is a README, not a model.\nIt has two lines.\n",
    );
    model(
        "model_no_graph.onnx",
        &ModelProto {
            ir_version: Some(8),
            ..Default::default()
        },
    );

    // Subgraphs nested 200 deep: If nodes whose then-branch holds the next If.
    let mut inner = GraphProto {
        name: Some("leaf".into()),
        ..Default::default()
    };
    for depth in 0..200 {
        let mut b = ModelBuilder::new(17);
        b.node("If", &["cond"], &[&format!("o{depth}")])
            .attr_graph("then_branch", inner)
            .attr_graph("else_branch", GraphProto::default());
        inner = b.into_graph();
    }
    let mut deep = good_model();
    graph_mut(&mut deep).node[0]
        .attribute
        .push(qdq_studio::model::proto::AttributeProto {
            name: Some("body".into()),
            r#type: Some(5),
            g: Some(inner),
            ..Default::default()
        });
    model("model_deep_nesting.onnx", &deep);

    let mut huge = good_model();
    let w = init_mut(&mut huge, "w");
    w.dims = vec![1 << 20, 1 << 20];
    w.raw_data = Some(Bytes::from(vec![0u8; 16]));
    model("model_huge_dims.onnx", &huge);
    model(
        "dynamic.onnx",
        &simple(|b| {
            b.input("x", DataType::Float32, &[-1, -1]);
            b.initializer("s", floats(&[1], |_| 2.0));
            b.node("Mul", &["x", "s"], &["y"]).name("mul");
            b.output("y", DataType::Float32, &[-1, -1]);
        }),
    );
    model(
        "model_huge_input.onnx",
        &simple(|b| {
            b.input("x", DataType::Float32, &[1, 1 << 40]);
            b.initializer("s", floats(&[1], |_| 2.0));
            b.node("Mul", &["x", "s"], &["y"]).name("mul");
            b.output("y", DataType::Float32, &[1, 1 << 40]);
        }),
    );
    let mut negative = good_model();
    init_mut(&mut negative, "w").dims = vec![-1, 4];
    model("model_negative_dims.onnx", &negative);
    let mut short = good_model();
    let w = init_mut(&mut short, "w");
    let raw = w.raw_data.clone().unwrap();
    w.raw_data = Some(raw.slice(..raw.len() - 3));
    model("model_raw_data_length.onnx", &short);
    let mut dtype = good_model();
    init_mut(&mut dtype, "w").data_type = Some(99);
    model("model_unknown_dtype.onnx", &dtype);

    for (name, location, offset) in [
        ("model_external_dotdot.onnx", "../outside.bin", 0),
        ("model_external_absolute.onnx", "/etc/passwd", 0),
        (
            "model_external_symlink.onnx",
            "model_external_symlink.bin",
            0,
        ),
        (
            "model_external_missing.onnx",
            "model_external_missing.bin",
            0,
        ),
        ("model_external_short.onnx", "model_external_short.bin", 0),
        (
            "model_external_offset_overflow.onnx",
            "model_external_short.bin",
            1 << 63,
        ),
    ] {
        let mut m = good_model();
        set_external(&mut m, location, offset);
        model(name, &m);
    }
    write("model_external_short.bin", &[0u8; 100]);
    let link = dir.join("model_external_symlink.bin");
    let _ = std::fs::remove_file(&link);
    #[cfg(unix)]
    std::os::unix::fs::symlink("../../Cargo.toml", &link).unwrap();

    model("model_nan_weights.onnx", &with_weight_value(3, f32::NAN));
    model(
        "model_inf_weights.onnx",
        &with_weight_value(3, f32::INFINITY),
    );
    model(
        "model_cycle.onnx",
        &simple(|b| {
            b.input("x", DataType::Float32, &[1]);
            b.node("Add", &["x", "c"], &["a"]).name("first");
            b.node("Relu", &["a"], &["b"]).name("second");
            b.node("Relu", &["b"], &["c"]).name("third");
            b.output("b", DataType::Float32, &[1]);
        }),
    );
    model(
        "model_dangling_input.onnx",
        &simple(|b| {
            b.input("x", DataType::Float32, &[1]);
            b.node("Add", &["x", "ghost"], &["y"]).name("add");
            b.output("y", DataType::Float32, &[1]);
        }),
    );
    model(
        "model_duplicate_outputs.onnx",
        &simple(|b| {
            b.input("x", DataType::Float32, &[1]);
            b.node("Relu", &["x"], &["y"]).name("one");
            b.node("Sigmoid", &["x"], &["y"]).name("two");
            b.output("y", DataType::Float32, &[1]);
        }),
    );
    let mut twins = good_model();
    {
        let g = graph_mut(&mut twins);
        let mut second = g.node[0].clone();
        second.input[0] = "y".into();
        second.output[0] = "c2".into();
        g.node.push(second);
        g.initializer
            .push(floats(&[4, 4, 3, 3], |i| (i % 5) as f32 / 5.0).to_proto("w"));
        g.node[2].input[1] = "w2".into();
        g.initializer.last_mut().unwrap().name = Some("w2".into());
        g.node[2].input.truncate(2);
        g.output[0].name = Some("c2".into());
        for n in &mut g.node {
            if n.op_type() == "Conv" {
                n.name = Some("conv".into());
            }
        }
    }
    model("model_duplicate_node_names.onnx", &twins);
    let mut doubled = good_model();
    {
        let g = graph_mut(&mut doubled);
        let mut again = g.initializer[0].clone();
        again.float_data = vec![0.0; again.float_data.len()];
        g.initializer.push(again);
    }
    model("model_duplicate_initializers.onnx", &doubled);
    let mut custom = good_model();
    {
        let g = graph_mut(&mut custom);
        g.node[1].op_type = Some("MyOp".into());
        g.node[1].domain = Some("com.acme".into());
    }
    model("model_custom_domain.onnx", &custom);
    let mut unknown = good_model();
    graph_mut(&mut unknown).node[1].op_type = Some("FancyConv".into());
    model("model_unknown_op.onnx", &unknown);
    let mut no_outputs = good_model();
    graph_mut(&mut no_outputs).output.clear();
    model("model_no_outputs.onnx", &no_outputs);

    // Data.
    let four = npy("<f4", false, &[4, 3, 8, 8], &samples(4));
    write("data_truncated.npy", &four[..four.len() - 100]);
    write(
        "data_bad_magic.npy",
        &[b"\x93NUMPX".as_slice(), &four[6..]].concat(),
    );
    write(
        "data_pickle.npy",
        &npy("|O", false, &[4], &[0x80, 0x04, 0x4e, 0x2e]),
    );
    write(
        "data_pickle.npz",
        &npz(
            &[("x", npy("|O", false, &[4], &[0x80, 0x04, 0x4e, 0x2e]))],
            false,
        ),
    );
    write(
        "data_fortran.npy",
        &npy("<f4", true, &[4, 3, 8, 8], &samples(4)),
    );
    write(
        "data_big_endian.npy",
        &npy(">f4", false, &[4, 3, 8, 8], &samples(4)),
    );
    write(
        "data_not_zip.npz",
        &(0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect::<Vec<u8>>(),
    );
    let bomb_samples = (512u64 << 20) / (192 * 4);
    let bomb = npy(
        "<f4",
        false,
        &[bomb_samples, 3, 8, 8],
        &vec![0u8; (bomb_samples * 192 * 4) as usize],
    );
    write("data_zip_bomb.npz", &npz(&[("x", bomb)], true));
    // 100 million samples claimed; the zip's own sizes are rewritten to agree with the header.
    let claimed = 100_000_000u64;
    let lie = npy("<f4", false, &[claimed, 3, 8, 8], &samples(1));
    let header_len = lie.len() as u64 - 192 * 4;
    let mut lying = npz(&[("x", lie)], false);
    patch_zip_sizes(&mut lying, header_len + claimed * 192 * 4);
    write("data_lying_header.npz", &lying);
    let big = npy("<f4", false, &[1, 1 << 38], &[]);
    let mut huge_sample = npz(&[("x", big.clone())], false);
    patch_zip_sizes(&mut huge_sample, big.len() as u64 + (4u64 << 38));
    write("data_huge_sample.npz", &huge_sample);
    write(
        "data_count_mismatch.npz",
        &npz(
            &[
                ("x", npy("<f4", false, &[4, 3, 8, 8], &samples(4))),
                ("y", npy("<f4", false, &[5, 3, 8, 8], &samples(5))),
            ],
            false,
        ),
    );
    write(
        "data_wrong_name.npz",
        &npz(
            &[("y", npy("<f4", false, &[4, 3, 8, 8], &samples(4)))],
            false,
        ),
    );
    write(
        "data_wrong_shape.npz",
        &npz(
            &[(
                "x",
                npy(
                    "<f4",
                    false,
                    &[4, 3, 9, 9],
                    &f32_bytes((0..4 * 243).map(|i| i as f32)),
                ),
            )],
            false,
        ),
    );
    write(
        "data_wrong_dtype.npz",
        &npz(
            &[(
                "x",
                npy(
                    "<i4",
                    false,
                    &[4, 3, 8, 8],
                    &(0..4 * 192i32)
                        .flat_map(i32::to_le_bytes)
                        .collect::<Vec<u8>>(),
                ),
            )],
            false,
        ),
    );
    let poisoned = f32_bytes((0..4 * 192).map(|i| match i % 50 {
        0 => f32::NAN,
        1 => f32::INFINITY,
        2 => f32::NEG_INFINITY,
        _ => (i % 13) as f32 / 13.0,
    }));
    write(
        "data_nan.npz",
        &npz(&[("x", npy("<f4", false, &[4, 3, 8, 8], &poisoned))], false),
    );

    // Recipes.
    let recipe = |extra: &str| {
        let mut text = qdq_studio::recipe::Recipe::default().to_toml();
        text.push_str(extra);
        text
    };
    write("recipe_not_toml.toml", b"[recipe\nmode = int8 ]]\n\x00\x01");
    write(
        "recipe_unknown_key.toml",
        format!("per_chanel = true\n{}", recipe("")).as_bytes(),
    );
    write(
        "recipe_bad_method.toml",
        recipe("")
            .replace("method = \"min_max\"", "method = \"magic\"")
            .as_bytes(),
    );
    use qdq_studio::recipe::Recipe;
    let recipes = [
        (
            "recipe_percentile_150.toml",
            Recipe {
                calibration_method: qdq_studio::calib::RangeMethod::Percentile {
                    percentile: 150.0,
                    symmetric: true,
                },
                ..Recipe::default()
            },
        ),
        (
            "recipe_unknown_node.toml",
            Recipe {
                nodes_to_exclude: vec!["convv".into()],
                ..Recipe::default()
            },
        ),
        (
            "recipe_bad_regex.toml",
            Recipe {
                nodes_to_exclude: vec!["(unclosed".into()],
                ..Recipe::default()
            },
        ),
    ];
    for (name, recipe) in recipes {
        write(name, recipe.to_toml().as_bytes());
    }
}

/// Rewrites the uncompressed and compressed sizes of a one-entry stored zip (local header,
/// central directory and their zip64 extras) to `size`: a file whose sizes all agree and lie.
fn patch_zip_sizes(zip: &mut [u8], size: u64) {
    // The zip64 extra field (id 0x0001) holds the 64-bit sizes in both headers.
    let mut i = 0;
    while i + 20 <= zip.len() {
        if zip[i..i + 2] == [0x01, 0x00]
            && (zip[i + 2..i + 4] == [16, 0]
                || zip[i + 2..i + 4] == [24, 0]
                || zip[i + 2..i + 4] == [28, 0])
        {
            zip[i + 4..i + 12].copy_from_slice(&size.to_le_bytes());
            zip[i + 12..i + 20].copy_from_slice(&size.to_le_bytes());
            i += 20;
        } else {
            i += 1;
        }
    }
}

#[test]
#[ignore = "rewrites the committed corpus"]
fn regenerate() {
    generate(&corpus());
}

// ---------------------------------------------------------------------------------------------
// The check.

/// Names, sizes and modification times of every file under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files.insert(entry.path(), (meta.len(), meta.modified().unwrap()));
            }
        }
    }
    files
}

/// What one run left: exit code, output, peak memory.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    peak_bytes: u64,
}

/// Runs the CLI with `args` in `work` (its current folder) and measures its peak memory.
fn run_cli(args: &[String], work: &Path, logs: &Path) -> Outcome {
    let (out_path, err_path) = (logs.join("stdout"), logs.join("stderr"));
    let child = common::cli()
        .args(args)
        .current_dir(work)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let (code, peak_bytes) = wait_with_peak_memory(child);
    Outcome {
        code,
        stdout: std::fs::read_to_string(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
        peak_bytes,
    }
}

#[cfg(unix)]
fn wait_with_peak_memory(child: std::process::Child) -> (Option<i32>, u64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain FFI out-parameters; the child is ours and not yet reaped.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid);
    std::mem::forget(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, usage.ru_maxrss as u64 * 1024)
}

#[cfg(not(unix))]
fn wait_with_peak_memory(mut child: std::process::Child) -> (Option<i32>, u64) {
    (child.wait().unwrap().code(), 0)
}

fn arguments(case: &Case, file: &Path, out: &Path) -> Vec<String> {
    let good = corpus().join("good.onnx").display().to_string();
    let dynamic = corpus().join("dynamic.onnx").display().to_string();
    let file = file.display().to_string();
    let q = out.join("q.onnx").display().to_string();
    let stats = out.join("calib.json").display().to_string();
    let list: Vec<&str> = match case.run {
        Inspect => vec!["inspect", &file],
        QuantizeModel => vec![
            "quantize",
            "--onnx_path",
            &file,
            "-o",
            &q,
            "--random_samples",
            "2",
        ],
        CalibrateData | CalibrateDynamic => vec![
            "calibrate",
            "--onnx_path",
            if matches!(case.run, CalibrateData) {
                &good
            } else {
                &dynamic
            },
            "--calibration_data_path",
            &file,
            "--max_samples",
            "8",
            "-o",
            &stats,
        ],
        QuantizeData => vec![
            "quantize",
            "--onnx_path",
            &good,
            "-o",
            &q,
            "--calibration_data_path",
            &file,
        ],
        Recipe => vec![
            "quantize",
            "--onnx_path",
            &good,
            "-o",
            &q,
            "--random_samples",
            "2",
            "--recipe",
            &file,
        ],
    };
    list.into_iter().map(str::to_owned).collect()
}

/// Checks one case; returns what was wrong with it, if anything.
fn check(case: &Case) -> Result<(), String> {
    let file = corpus().join(case.file);
    let scratch = tempfile::tempdir().unwrap();
    let (work, out, logs) = (
        scratch.path().join("work"),
        scratch.path().join("work/out"),
        scratch.path().join("logs"),
    );
    for d in [&out, &logs] {
        std::fs::create_dir_all(d).unwrap();
    }
    let before = snapshot(&corpus());
    let outcome = run_cli(&arguments(case, &file, &out), &work, &logs);
    let all = format!("{}{}", outcome.stdout, outcome.stderr);
    let fail = |why: String| {
        Err(format!(
            "{} ({}): {why}\n--- output:\n{all}",
            case.file, case.breaks
        ))
    };
    if all.contains("panicked") || outcome.code == Some(101) {
        return fail("panicked".into());
    }
    match case.expect {
        Error(fragment) => {
            if outcome.code != Some(1) {
                return fail(format!("exit code {:?}, expected 1", outcome.code));
            }
            let errors: Vec<&str> = outcome
                .stderr
                .lines()
                .filter(|l| l.starts_with("error:"))
                .collect();
            let last = outcome.stderr.trim_end().lines().last().map(str::trim_end);
            if errors.len() != 1 || last != errors.first().map(|e| e.trim_end()) {
                return fail("expected exactly one final `error:` line".into());
            }
            if !errors[0].contains(fragment) {
                return fail(format!("the error does not mention '{fragment}'"));
            }
        }
        Handled(fragment) => {
            if outcome.code != Some(0) {
                return fail(format!("exit code {:?}, expected success", outcome.code));
            }
            if !all.contains(fragment) {
                return fail(format!("the output does not mention '{fragment}'"));
            }
        }
    }
    if snapshot(&corpus()) != before {
        return fail(
            "the corpus folder changed (an input was touched or a file written beside it)".into(),
        );
    }
    let written: Vec<PathBuf> = snapshot(&work)
        .into_keys()
        .filter(|p| !p.starts_with(&out))
        .collect();
    if !written.is_empty() {
        return fail(format!(
            "files written outside the output folder: {written:?}"
        ));
    }
    if matches!(case.expect, Error(_)) && !snapshot(&out).is_empty() {
        return fail(format!(
            "a failed run left output files: {:?}",
            snapshot(&out).keys()
        ));
    }
    eprintln!(
        "{}: exit {:?}, peak {} MB",
        case.file,
        outcome.code,
        outcome.peak_bytes >> 20
    );
    if outcome.peak_bytes > MEMORY_BOUND_BYTES {
        return fail(format!(
            "peak memory {} MB over the bound",
            outcome.peak_bytes >> 20
        ));
    }
    Ok(())
}

#[test]
fn every_corpus_file_gets_a_clear_answer_and_harms_nothing() {
    let dir = corpus();
    let listed: Vec<&str> = CASES.iter().map(|c| c.file).collect();
    assert!(
        listed.len() >= 30,
        "the corpus must break at least 30 things"
    );
    for file in &listed {
        assert!(
            dir.join(file).exists(),
            "{file} is missing: run the ignored `regenerate` test"
        );
    }
    // Two at a time: each case is a process loading ONNX Runtime.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = CASES.get(i) else { break };
                    if let Err(why) = check(case) {
                        failures.lock().unwrap().push(why);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
