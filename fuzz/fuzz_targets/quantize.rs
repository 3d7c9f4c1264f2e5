//! The quantizer on small generated graphs (structure-aware). The fuzzer chooses a graph of
//! real op types over `[1, 4, 6, 6]` activations (every op keeps or restores that shape, so
//! the float model is always valid), the recipe's main switches, and the calibrated ranges
//! (degenerate, NaN, missing). The quantizer must either return a model ONNX Runtime loads,
//! or an error: a panic, or an output ORT refuses, is a finding.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ndarray::{ArrayD, IxDyn};
use qdq_studio::calib::{CalibrationStats, RangeMethod, TensorStats};
use qdq_studio::model::{DataType, Graph, Model, ModelBuilder, TensorArray};
use qdq_studio::quant::{quantize, verify_loads};
use qdq_studio::recipe::{Placement, QuantMode, QuantType, Recipe};
use qdq_studio::runtime::{LoadOptions, Runtime};

const C: usize = 4;
const HW: usize = 6;
const SHAPE: [i64; 4] = [1, C as i64, HW as i64, HW as i64];

/// One op, applied to an earlier tensor (`input` picks it; `other` a second one).
#[derive(Arbitrary, Debug)]
enum Op {
    Relu,
    Sigmoid,
    Tanh,
    LeakyRelu,
    Clip,
    Conv { k3: bool, bias: bool, depthwise: bool },
    ConvTranspose,
    Add { other: u8 },
    Mul { other: u8 },
    MaxPool,
    AveragePool,
    ConcatConv { other: u8 },
    MatMul,
    Transpose,
    Softmax,
    BatchNorm,
    Identity,
    Resize,
    GlobalPoolMul,
}

#[derive(Arbitrary, Debug)]
struct Spec {
    ops: Vec<(Op, u8)>,
    extra_output: Option<u8>,
    per_channel: bool,
    symmetric_activations: bool,
    tensorrt: bool,
    activation: u8,
    weight: u8,
    mode: u8,
    method: u8,
    exclude: Vec<u8>,
    poison_weight: Option<u8>,
    ranges: Vec<(f32, f32)>,
    skip_range: Option<u8>,
    seed: u16,
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let options = LoadOptions::new().expect("cache dir");
        Runtime::load(&options, &mut |_| {}).expect("ONNX Runtime (ORT_DYLIB_PATH or the cache)")
    })
}

fn weight(shape: &[usize], seed: &mut u32) -> TensorArray {
    let n: usize = shape.iter().product();
    let values = (0..n)
        .map(|_| {
            *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((*seed >> 8) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values).expect("shape"))
}

/// Builds the float model; returns it and the names of its weights.
fn build(spec: &Spec) -> (Model, Vec<String>) {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &SHAPE);
    let mut tensors = vec!["x".to_owned()];
    let mut weights = Vec::new();
    let mut seed = u32::from(spec.seed);
    let mut add_weight = |b: &mut ModelBuilder, name: String, shape: &[usize], seed: &mut u32| {
        b.initializer(&name, weight(shape, seed));
        weights.push(name.clone());
        name
    };
    for (i, (op, pick)) in spec.ops.iter().take(24).enumerate() {
        let input = tensors[usize::from(*pick) % tensors.len()].clone();
        let other = |o: u8| tensors[usize::from(o) % tensors.len()].clone();
        let out = format!("t{i}");
        let name = format!("n{i}");
        match op {
            Op::Relu | Op::Sigmoid | Op::Tanh | Op::LeakyRelu | Op::Identity | Op::Softmax => {
                let op_type = match op {
                    Op::Relu => "Relu",
                    Op::Sigmoid => "Sigmoid",
                    Op::Tanh => "Tanh",
                    Op::LeakyRelu => "LeakyRelu",
                    Op::Identity => "Identity",
                    _ => "Softmax",
                };
                b.node(op_type, &[&input], &[&out]).name(&name);
            }
            Op::Clip => {
                // Bounds drawn like the weights: sometimes min > max, which Clip allows.
                let lo = add_weight(&mut b, format!("{name}_min"), &[], &mut seed);
                let hi = add_weight(&mut b, format!("{name}_max"), &[], &mut seed);
                b.node("Clip", &[&input, &lo, &hi], &[&out]).name(&name);
            }
            Op::Conv { k3, bias, depthwise } => {
                let k = if *k3 { 3 } else { 1 };
                let group = if *depthwise { C } else { 1 };
                let w = add_weight(&mut b, format!("{name}_w"), &[C, C / group, k, k], &mut seed);
                let mut inputs = vec![input.clone(), w];
                if *bias {
                    inputs.push(add_weight(&mut b, format!("{name}_b"), &[C], &mut seed));
                }
                let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
                let pad = (k / 2) as i64;
                b.node("Conv", &refs, &[&out])
                    .name(&name)
                    .attr_ints("pads", &[pad, pad, pad, pad])
                    .attr_int("group", group as i64);
            }
            Op::ConvTranspose => {
                let w = add_weight(&mut b, format!("{name}_w"), &[C, C, 3, 3], &mut seed);
                b.node("ConvTranspose", &[&input, &w], &[&out])
                    .name(&name)
                    .attr_ints("pads", &[1, 1, 1, 1]);
            }
            Op::Add { other: o } | Op::Mul { other: o } => {
                let op_type = if matches!(op, Op::Add { .. }) { "Add" } else { "Mul" };
                let second = other(*o);
                b.node(op_type, &[&input, &second], &[&out]).name(&name);
            }
            Op::MaxPool | Op::AveragePool => {
                let op_type = if matches!(op, Op::MaxPool) { "MaxPool" } else { "AveragePool" };
                b.node(op_type, &[&input], &[&out])
                    .name(&name)
                    .attr_ints("kernel_shape", &[3, 3])
                    .attr_ints("pads", &[1, 1, 1, 1]);
            }
            Op::ConcatConv { other: o } => {
                let second = other(*o);
                let cat = format!("{out}_cat");
                b.node("Concat", &[&input, &second], &[&cat])
                    .name(&format!("{name}_concat"))
                    .attr_int("axis", 1);
                let w = add_weight(&mut b, format!("{name}_w"), &[C, 2 * C, 1, 1], &mut seed);
                b.node("Conv", &[&cat, &w], &[&out]).name(&name);
            }
            Op::MatMul => {
                let w = add_weight(&mut b, format!("{name}_w"), &[HW, HW], &mut seed);
                b.node("MatMul", &[&input, &w], &[&out]).name(&name);
            }
            Op::Transpose => {
                b.node("Transpose", &[&input], &[&out])
                    .name(&name)
                    .attr_ints("perm", &[0, 1, 3, 2]);
            }
            Op::BatchNorm => {
                let scale = add_weight(&mut b, format!("{name}_s"), &[C], &mut seed);
                let shift = add_weight(&mut b, format!("{name}_b"), &[C], &mut seed);
                let mean = add_weight(&mut b, format!("{name}_m"), &[C], &mut seed);
                let var = format!("{name}_v");
                b.initializer(
                    &var,
                    TensorArray::Float32(ArrayD::from_elem(IxDyn(&[C]), 0.5)),
                );
                b.node("BatchNormalization", &[&input, &scale, &shift, &mean, &var], &[&out])
                    .name(&name);
            }
            Op::Resize => {
                let half = format!("{out}_half");
                b.node("MaxPool", &[&input], &[&half])
                    .name(&format!("{name}_pool"))
                    .attr_ints("kernel_shape", &[2, 2])
                    .attr_ints("strides", &[2, 2]);
                let scales = format!("{name}_scales");
                b.initializer(
                    &scales,
                    TensorArray::Float32(
                        ArrayD::from_shape_vec(IxDyn(&[4]), vec![1.0, 1.0, 2.0, 2.0])
                            .expect("shape"),
                    ),
                );
                b.node("Resize", &[&half, "", &scales], &[&out]).name(&name);
            }
            Op::GlobalPoolMul => {
                let pooled = format!("{out}_pooled");
                b.node("GlobalAveragePool", &[&input], &[&pooled])
                    .name(&format!("{name}_gap"));
                b.node("Mul", &[&input, &pooled], &[&out]).name(&name);
            }
        }
        tensors.push(out);
    }
    let last = tensors.last().cloned().unwrap_or_default();
    b.output(&last, DataType::Float32, &SHAPE);
    if let Some(pick) = spec.extra_output {
        let extra = &tensors[usize::from(pick) % tensors.len()];
        if extra != &last && extra != "x" {
            b.output(extra, DataType::Float32, &SHAPE);
        }
    }
    (b.build(), weights)
}

fn recipe(spec: &Spec, graph: &Graph) -> Recipe {
    let types = [QuantType::Uint8, QuantType::Int8, QuantType::Uint16, QuantType::Int16];
    let mut recipe = Recipe {
        per_channel: spec.per_channel,
        symmetric_activations: spec.symmetric_activations,
        placement: if spec.tensorrt { Placement::Tensorrt } else { Placement::Ort },
        activation_type: types[usize::from(spec.activation) % types.len()],
        weight_type: types[usize::from(spec.weight) % 2],
        calibration_method: RangeMethod::MinMax {
            moving_average: spec.method % 2 == 1,
        },
        ..Recipe::default()
    };
    match spec.mode % 4 {
        1 => {
            recipe.mode = QuantMode::Fp8;
            recipe.activation_type = QuantType::Float8e4m3fn;
            recipe.weight_type = QuantType::Float8e4m3fn;
        }
        2 => {
            recipe.mode = QuantMode::Int4;
            recipe.weight_type = QuantType::Int4;
        }
        _ => {}
    }
    let nodes = graph.nodes();
    if !nodes.is_empty() {
        recipe.nodes_to_exclude = spec
            .exclude
            .iter()
            .take(4)
            .map(|&i| nodes[usize::from(i) % nodes.len()].name.clone())
            .filter(|name| !name.is_empty())
            .collect();
    }
    recipe
}

fn stats(spec: &Spec, graph: &Graph) -> CalibrationStats {
    let mut stats = CalibrationStats::default();
    for (i, tensor) in graph.tensors().iter().enumerate() {
        if spec.skip_range.is_some_and(|s| usize::from(s) == i) {
            continue;
        }
        let (a, b) = spec.ranges.get(i).copied().unwrap_or((-1.0, 1.0));
        let mut s = TensorStats::default();
        s.add_batch(&[a, b], &[1, 2], Some(128));
        stats.tensors.insert(tensor.name.clone(), s);
    }
    stats
}

fuzz_target!(|spec: Spec| {
    let (mut model, weights) = build(&spec);
    if let Some(pick) = spec.poison_weight
        && !weights.is_empty()
    {
        let name = &weights[usize::from(pick) % weights.len()];
        if let Some(init) = model
            .proto_mut()
            .graph
            .as_mut()
            .and_then(|g| g.initializer.iter_mut().find(|t| t.name() == name))
        {
            if let Some(raw) = init.raw_data.as_mut() {
                let mut bytes = raw.to_vec();
                if bytes.len() >= 4 {
                    bytes[..4].copy_from_slice(&f32::NAN.to_le_bytes());
                }
                *raw = bytes.into();
            }
        }
    }
    let runtime = runtime();
    verify_loads(&model, runtime).expect("the generated float model is valid");
    let graph = Graph::build(&model);
    let recipe = recipe(&spec, &graph);
    let stats = stats(&spec, &graph);
    if let Ok(quantized) = quantize(&model, Some(&stats), &recipe) {
        if let Err(e) = verify_loads(&quantized.model, runtime) {
            panic!("quantized model does not load: {e}\n{spec:#?}");
        }
    }
});
