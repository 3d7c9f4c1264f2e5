//! The measured weight-range choice: each weight's range (its extremes, or the clipped range
//! of least squared error) chosen by the model's outputs in real ONNX Runtime runs, and
//! written into the recipe so the recipe alone reproduces the model.

use crate::common;

use qdq_studio::calib::CalibrationConfig;
use qdq_studio::calib::data::DataSpec;
use qdq_studio::eval::search::weight_ranges::choose_weight_ranges;
use qdq_studio::jobs::JobContext;
use qdq_studio::model::TensorArray;
use qdq_studio::recipe::{Preprocessing, Recipe, WeightRange};

use common::{runtime, weight_outlier_data, weight_outlier_model, write_npz};

/// `model`'s statistics on `data` for `recipe` (what its techniques need gathered).
fn calibrated(
    model: &qdq_studio::model::Model,
    recipe: &Recipe,
    data: &DataSpec,
    rt: &qdq_studio::runtime::Runtime,
) -> qdq_studio::calib::CalibrationStats {
    qdq_studio::workflow::calibrate::calibrate_for_recipe(
        model,
        recipe,
        data,
        &CalibrationConfig::default(),
        rt,
        &JobContext::silent(),
        qdq_studio::workflow::calibrate::Observed::Every,
    )
    .unwrap()
}

/// Pre-processing that quantizes the outlier's row with the rest: computed in float, as by
/// default, it would leave nothing to clip.
fn whole_rows() -> Preprocessing {
    Preprocessing {
        outlier_rows: false,
        ..Preprocessing::default()
    }
}

#[test]
fn each_weight_gets_the_range_that_does_better_at_the_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (model_path, calib) = (dir.path().join("m.onnx"), dir.path().join("calib.npz"));
    let model = weight_outlier_model();
    model.save(&model_path, &Default::default()).unwrap();
    write_npz(&calib, &[("x", weight_outlier_data(64, 3))]);
    let rt = runtime();
    let spec = DataSpec::Npz {
        path: calib.clone(),
    };
    // 7-bit weights: ONNX Runtime's fused u8×s8 kernels cannot saturate on them, so the
    // figures are the ranges' own on every CPU.
    let recipe = Recipe {
        per_channel: false,
        reduce_range: true,
        preprocessing: whole_rows(),
        ..Recipe::default()
    };
    let stats = calibrated(&model, &recipe, &spec, &rt);
    let reference = common::cpu_reference(&model, &spec, &rt, 16);
    let eval = common::cpu_evaluator(&model, &stats, &reference, &rt);
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
            .args(["--per_tensor", "--no_outlier_rows", "-o"])
            .arg(dir.path().join("m.qdq.onnx"))
            .args(extra);
        common::run_text(&mut cmd)
    };
    let calib_arg = calib.to_str().unwrap();
    let (ok, text) = quantize(&["--calibration_data_path", calib_arg]);
    assert!(ok, "{text}");
    assert!(
        !text.contains("weight ranges measured"),
        "not asked: {text}"
    );
    let stats_path = dir.path().join("stats.json");
    qdq_studio::calib::file::save(&stats, &stats_path).unwrap();
    let (ok, text) = quantize(&[
        "--weight_range",
        "measured",
        "--calibration_cache_path",
        stats_path.to_str().unwrap(),
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains("--calibration_data_path"), "{text}");
    let saved = dir.path().join("measured.toml");
    let (ok, text) = quantize(&[
        "--weight_range",
        "measured",
        "--calibration_data_path",
        calib_arg,
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

/// With GPTQ in the recipe, the tries run without it (it re-solves every layer each time),
/// and the figures said are those of the recipe as it is: GPTQ included, before and after.
#[test]
fn with_gptq_the_figures_are_those_of_the_recipe_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let calib = dir.path().join("calib.npz");
    // Neighbouring inputs correlated, so GPTQ's rounding differs from rounding to nearest.
    let TensorArray::Float32(mut x) = weight_outlier_data(64, 3) else {
        unreachable!()
    };
    let width = x.shape()[1];
    for mut row in x.outer_iter_mut() {
        for i in 1..width - 1 {
            row[i] = 0.3 * row[i] + 0.7 * row[i - 1];
        }
    }
    write_npz(&calib, &[("x", TensorArray::Float32(x))]);
    let model = weight_outlier_model();
    let rt = runtime();
    let spec = DataSpec::Npz { path: calib };
    let recipe = Recipe {
        per_channel: false,
        gptq: true,
        preprocessing: whole_rows(),
        ..Recipe::default()
    };
    let stats = calibrated(&model, &recipe, &spec, &rt);
    let reference = common::cpu_reference(&model, &spec, &rt, 16);
    let eval = common::cpu_evaluator(&model, &stats, &reference, &rt);
    let chosen = choose_weight_ranges(&eval, &recipe, &JobContext::silent()).unwrap();
    assert!(chosen.recipe.gptq, "GPTQ stays in the recipe");
    assert_eq!(chosen.flipped, ["w1"], "{chosen:?}");
    assert_eq!(chosen.dropped_db, None);
    assert_eq!(eval.sqnr(&recipe).unwrap(), chosen.before_db);
    assert_eq!(eval.sqnr(&chosen.recipe).unwrap(), chosen.after_db);
    assert!(chosen.after_db > chosen.before_db, "{chosen:?}");
}

/// Two dense layers whose 8-bit weights hold large values (codes 64 to 127) and meet
/// non-negative inputs. With `same_sign_pairs`, neighbouring rows (what ONNX Runtime's u8×s8
/// kernels add in one saturating 16-bit lane on x86 without VNNI) share a sign, the first
/// layer's all positive so its outputs are too, the second's one sign per column: 255 × (64 +
/// 127) overflows the lane. Otherwise each pair has one value of each sign and no lane
/// overflows on any CPU.
fn dense_model(same_sign_pairs: bool) -> qdq_studio::model::Model {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::model::{DataType, ModelBuilder};
    let dense = |rows: usize, cols: usize, seed: u64, alternate: bool| {
        let values = common::seeded_values(rows * cols, seed, 1.0)
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let negative = match same_sign_pairs {
                    true => alternate && (i % cols) % 2 == 1,
                    false => (i / cols) % 2 == 1,
                };
                let magnitude = 0.75 + 0.25 * v;
                if negative { -magnitude } else { magnitude }
            })
            .collect();
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[rows, cols]), values).unwrap())
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 32]);
    b.initializer("w1", dense(32, 32, 21, false));
    b.initializer("w2", dense(32, 8, 22, true));
    b.node("MatMul", &["x", "w1"], &["h"]).name("first");
    b.node("Relu", &["h"], &["r"]).name("act");
    b.node("MatMul", &["r", "w2"], &["y"]).name("second");
    b.output("y", DataType::Float32, &[-1, 8]);
    b.build()
}

/// 64 non-negative samples for [`dense_model`], written to `dir`/calib.npz.
fn dense_data(dir: &std::path::Path) -> (TensorArray, DataSpec) {
    let path = dir.join("calib.npz");
    let values = common::seeded_values(64 * 32, 5, 1.0);
    let x = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[64, 32]), values).unwrap();
    let x = TensorArray::Float32(x.mapv(f32::abs));
    write_npz(&path, &[("x", x.clone())]);
    (x, DataSpec::Npz { path })
}

/// SQNR (dB) of `quant`'s first output run with ONNX Runtime's fused integer kernels against
/// the same model run as its Q/DQ arithmetic (graph optimizations off), on `x`.
fn kernels_against_arithmetic(quant: &qdq_studio::model::Model, x: &TensorArray) -> f64 {
    use qdq_studio::runtime::{EpSpec, Optimization, SessionOptions};
    let TensorArray::Float32(x) = x else {
        unreachable!()
    };
    let bytes = quant.to_bytes().unwrap();
    let run = |optimization| {
        let options = SessionOptions {
            optimization,
            ..SessionOptions::default()
        };
        let mut session = runtime()
            .session_from_bytes(&bytes, &[EpSpec::Cpu], options)
            .unwrap();
        let value = ort::value::Tensor::from_array(x.clone()).unwrap();
        let out = session.run(ort::inputs!["x" => value]).unwrap();
        out[0].try_extract_array::<f32>().unwrap().to_owned()
    };
    let (fused, unfused) = (run(Optimization::All), run(Optimization::Disable));
    let noise: f32 = (&fused - &unfused).mapv(|d| d * d).sum();
    10.0 * f64::from(unfused.mapv(|v| v * v).sum() / noise.max(f32::MIN_POSITIVE)).log10()
}

/// Where the CPU's u8×s8 kernels saturate on a per-tensor weight's 8 bits, the measured search
/// gives it 7 (the outputs gain); where they do not, 7 bits only lose precision and are not
/// taken. A recipe whose saturation guard is off is not given 7 bits either way.
#[test]
fn weights_the_kernels_saturate_on_get_seven_bits_where_that_does_better() {
    let dir = tempfile::tempdir().unwrap();
    let (x, spec) = dense_data(dir.path());
    let model = dense_model(true);
    let rt = runtime();
    let recipe = Recipe {
        per_channel: false,
        ..Recipe::default()
    };
    let stats = calibrated(&model, &recipe, &spec, &rt);
    let reference = common::cpu_reference(&model, &spec, &rt, 16);
    let eval = common::cpu_evaluator(&model, &stats, &reference, &rt);
    let chosen = choose_weight_ranges(&eval, &recipe, &JobContext::silent()).unwrap();
    let eight = qdq_studio::quant::quantize(&model, Some(&stats), &recipe).unwrap();
    let saturates = kernels_against_arithmetic(&eight.model, &x) < 30.0;
    if saturates {
        assert_eq!(chosen.seven_bit, ["w1", "w2"], "{chosen:?}");
        assert!(chosen.after_db > chosen.before_db + 6.0, "{chosen:?}");
        assert!(chosen.summary().contains("2 given 7 bits"), "{chosen:?}");
        for weight in ["w1", "w2"] {
            assert!(chosen.recipe.tensor_overrides[weight].reduce_range);
        }
        // With the 7 bits, the kernels follow the Q/DQ arithmetic.
        let seven = qdq_studio::quant::quantize(&model, Some(&stats), &chosen.recipe).unwrap();
        assert!(kernels_against_arithmetic(&seven.model, &x) > 30.0);
    } else {
        assert!(chosen.seven_bit.is_empty(), "{chosen:?}");
    }
    assert_eq!(eval.sqnr(&chosen.recipe).unwrap(), chosen.after_db);
    let text = chosen.recipe.to_toml();
    assert_eq!(Recipe::from_toml(&text, "saved").unwrap(), chosen.recipe);

    let unguarded = Recipe {
        saturation_guard: false,
        ..recipe
    };
    let kept = choose_weight_ranges(&eval, &unguarded, &JobContext::silent()).unwrap();
    assert!(kept.seven_bit.is_empty(), "{kept:?}");
    assert_eq!(kept.tried, 2);
}

/// Where the pairs cannot saturate, the saturation guard's 7 bits on per-channel weights only
/// cost precision: the search gives them 8 back, on every CPU, and the recipe keeps that.
#[test]
fn weights_whose_pairs_cannot_saturate_get_their_eight_bits_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spec) = dense_data(dir.path());
    let model = dense_model(false);
    let rt = runtime();
    let recipe = Recipe::default();
    assert!(recipe.per_channel && recipe.saturation_guard);
    let stats = calibrated(&model, &recipe, &spec, &rt);
    let guarded = qdq_studio::quant::quantize(&model, Some(&stats), &recipe).unwrap();
    assert_eq!(guarded.seven_bit_weights.len(), 2);
    let reference = common::cpu_reference(&model, &spec, &rt, 16);
    let eval = common::cpu_evaluator(&model, &stats, &reference, &rt);
    let chosen = choose_weight_ranges(&eval, &recipe, &JobContext::silent()).unwrap();
    assert_eq!(chosen.eight_bit, ["w1", "w2"], "{chosen:?}");
    assert!(chosen.seven_bit.is_empty(), "{chosen:?}");
    assert!(chosen.after_db > chosen.before_db + 3.0, "{chosen:?}");
    assert!(
        chosen.summary().contains("2 given back 8 bits"),
        "{chosen:?}"
    );
    let eight = qdq_studio::quant::quantize(&model, Some(&stats), &chosen.recipe).unwrap();
    assert!(eight.seven_bit_weights.is_empty());
    assert_eq!(eval.sqnr(&chosen.recipe).unwrap(), chosen.after_db);
    let text = chosen.recipe.to_toml();
    assert!(text.contains("full_range = true"), "{text}");
    assert_eq!(Recipe::from_toml(&text, "saved").unwrap(), chosen.recipe);
}
