//! The measured weight-range choice: each weight's range (its extremes, or the clipped range
//! of least squared error) chosen by the model's outputs in real ONNX Runtime runs, and
//! written into the recipe so the recipe alone reproduces the model.

mod common;

use ndarray::{ArrayD, IxDyn};
use qdq_studio::calib::CalibrationConfig;
use qdq_studio::calib::data::{DataSpec, model_inputs};
use qdq_studio::eval::reference::Reference;
use qdq_studio::eval::sensitivity::Evaluator;
use qdq_studio::eval::weight_ranges::choose_weight_ranges;
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{DataType, Graph, Model, ModelBuilder, TensorArray};
use qdq_studio::recipe::{Recipe, WeightRange};
use qdq_studio::runtime::EpSpec;

use common::{runtime, seeded_values, write_npz};

/// Inputs of the model below.
const WIDTH: usize = 512;

/// x → MatMul w1 → MatMul w2. `w1` holds values within ±0.03 and one of 7.5, on the input
/// the data keeps near zero: its extremes give every other value a step of 7.5/127, while
/// clipping it costs the outputs almost nothing. `w2` holds only ±0.05 and 0: its extremes
/// are its least-error range too, so the choice changes nothing there.
fn outlier_model() -> Model {
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
fn data(samples: usize, seed: u64) -> TensorArray {
    let mut x = ArrayD::from_shape_vec(
        IxDyn(&[samples, WIDTH]),
        seeded_values(samples * WIDTH, seed, 1.0),
    )
    .unwrap();
    x.index_axis_mut(ndarray::Axis(1), WIDTH - 1)
        .mapv_inplace(|v| v * 1e-3);
    TensorArray::Float32(x)
}

#[test]
fn each_weight_gets_the_range_that_does_better_at_the_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (model_path, calib) = (dir.path().join("m.onnx"), dir.path().join("calib.npz"));
    let model = outlier_model();
    model.save(&model_path, &Default::default()).unwrap();
    write_npz(&calib, &[("x", data(64, 3))]);
    let rt = runtime();
    let spec = DataSpec::Npz {
        path: calib.clone(),
    };
    let stats = qdq_studio::workflow::calibrate::calibrate(
        &model,
        &Default::default(),
        &spec,
        &CalibrationConfig::default(),
        &rt,
        &JobContext::silent(),
    )
    .unwrap();
    let mut source = spec.open(&model_inputs(&Graph::build(&model))).unwrap();
    let reference = Reference::capture(
        &model,
        source.as_mut(),
        &rt,
        &[EpSpec::Cpu],
        16,
        &Default::default(),
        &JobContext::silent(),
    )
    .unwrap();
    let eval = Evaluator {
        float: &model,
        stats: &stats,
        reference: &reference,
        runtime: &rt,
        eps: &[EpSpec::Cpu],
    };
    let recipe = Recipe {
        per_channel: false,
        ..Recipe::default()
    };
    let chosen = choose_weight_ranges(&eval, &recipe, &JobContext::silent()).unwrap();
    assert_eq!(chosen.tried, 2, "{chosen:?}");
    assert_eq!(chosen.flipped, ["w1"], "{chosen:?}");
    assert_eq!(chosen.flipped_to, WeightRange::Mse);
    assert!(chosen.after_db > chosen.before_db + 3.0, "{chosen:?}");
    // The recipe holds the choice: it reproduces the figure, and survives its TOML.
    let over = &chosen.recipe.tensor_overrides["w1"];
    assert_eq!(over.weight_range, Some(WeightRange::Mse));
    assert!(!chosen.recipe.tensor_overrides.contains_key("w2"));
    assert_eq!(eval.sqnr(&chosen.recipe).unwrap(), chosen.after_db);
    let text = chosen.recipe.to_toml();
    assert_eq!(Recipe::from_toml(&text, "saved").unwrap(), chosen.recipe);
    // Starting from clipped ranges, the search keeps them: w1's extremes do worse.
    let clipped = Recipe {
        weight_range: WeightRange::Mse,
        ..recipe.clone()
    };
    let kept = choose_weight_ranges(&eval, &clipped, &JobContext::silent()).unwrap();
    assert_eq!(kept.flipped_to, WeightRange::Minmax);
    assert!(kept.flipped.is_empty(), "{kept:?}");
    assert_eq!(kept.after_db, chosen.after_db);

    // The CLI: measured needs the samples, and writes the choice into the saved recipe.
    let quantize = |extra: &[&str]| {
        let mut cmd = common::cli();
        cmd.args(["quantize", "--onnx_path"])
            .arg(&model_path)
            .args(["--per_tensor", "--weight_range", "measured", "-o"])
            .arg(dir.path().join("m.qdq.onnx"))
            .args(extra);
        common::run_text(&mut cmd)
    };
    let stats_path = dir.path().join("stats.json");
    qdq_studio::calib::file::save(&stats, &stats_path).unwrap();
    let (ok, text) = quantize(&["--calibration_cache_path", stats_path.to_str().unwrap()]);
    assert!(!ok, "{text}");
    assert!(text.contains("--calibration_data_path"), "{text}");
    let saved = dir.path().join("measured.toml");
    let (ok, text) = quantize(&[
        "--calibration_data_path",
        calib.to_str().unwrap(),
        "--save-recipe",
        saved.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("weight ranges measured: 1 of 2"), "{text}");
    let written = Recipe::load(&saved).unwrap();
    assert_eq!(
        written.tensor_overrides["w1"].weight_range,
        Some(WeightRange::Mse)
    );
}
