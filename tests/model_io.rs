//! Model I/O against real published models and real ONNX Runtime sessions.

use crate::common;

use std::path::Path;

use ndarray::{Array4, ArrayD};
use qdq_studio::model::visit::for_each_tensor_mut;
use qdq_studio::model::{Graph, Model, ModelError, SaveOptions, TensorArray, TensorKind};
use qdq_studio::runtime::{EpSpec, SessionOptions};

use common::{PPOCR_ALL, PPOCR_CLS, PPOCR_DET, PPOCR_REC, digest, ppocr, runtime};

/// Input shape that each PP-OCR model accepts.
fn input_shape(name: &str) -> [usize; 4] {
    match name {
        PPOCR_DET => [1, 3, 64, 96],
        PPOCR_REC => [1, 3, 48, 160],
        _ => [1, 3, 48, 192],
    }
}

/// Runs a model file on the CPU EP with a deterministic input; returns the first output.
fn run_file(path: &Path, name: &str) -> ArrayD<f32> {
    let rt = runtime();
    let mut session = rt
        .session_from_file(path, &[EpSpec::Cpu], SessionOptions::default())
        .expect("session");
    let shape = input_shape(name);
    let input = Array4::from_shape_fn(shape, |(_, c, y, x)| {
        ((c * 7 + y * 3 + x) % 17) as f32 / 17.0 - 0.5
    });
    let value = ort::value::Tensor::from_array(input).expect("tensor");
    let outputs = session.run(ort::inputs!["x" => value]).expect("run");
    outputs[0]
        .try_extract_array::<f32>()
        .expect("f32 output")
        .to_owned()
}

/// Every tensor of a model (initializers, Constant values, subgraphs), decoded.
fn all_tensors(model: &Model) -> Vec<(String, TensorArray)> {
    let mut proto = model.proto().clone();
    let mut found = Vec::new();
    for_each_tensor_mut(&mut proto, &mut |t| {
        found.push((t.name().to_owned(), model.tensor_array(t)?));
        Ok::<(), ModelError>(())
    })
    .unwrap();
    found
}

#[test]
fn real_models_reencode_byte_identically() {
    for name in PPOCR_ALL {
        let path = ppocr(name);
        let original = std::fs::read(&path).unwrap();
        let model = Model::load(&path).unwrap();
        assert_eq!(
            model.to_bytes().unwrap(),
            original,
            "{name} re-encodes differently"
        );

        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("copy.onnx");
        let report = model.save(&out, &SaveOptions::default()).unwrap();
        assert_eq!(report.data_path, None);
        assert_eq!(
            std::fs::read(&out).unwrap(),
            original,
            "{name} saves differently"
        );
    }
}

#[test]
fn real_models_run_in_onnx_runtime_inline_and_with_external_data() {
    for name in PPOCR_ALL {
        let path = ppocr(name);
        let before = digest(&path);
        let reference = run_file(&path, name);
        assert!(
            reference.iter().all(|v| v.is_finite()),
            "{name}: non-finite output"
        );

        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("external.onnx");
        let model = Model::load(&path).unwrap();
        let report = model
            .save(
                &out,
                &SaveOptions {
                    external_data: true,
                    threshold: 1024,
                },
            )
            .unwrap();
        let data = report.data_path.clone().expect("data file written");
        assert!(
            report.data_bytes > report.model_bytes,
            "{name}: weights should move out: {report:?}"
        );
        assert!(data.exists());

        // The external copy runs in ORT with identical outputs...
        assert_eq!(
            run_file(&out, name),
            reference,
            "{name}: outputs differ with external data"
        );
        // ...reloads through our loader with identical tensors...
        let reloaded = Model::load(&out).unwrap();
        assert_eq!(reloaded.external_files(), [data.canonicalize().unwrap()]);
        // ...and the same tensor values; models stored in raw_data inline back to the same bytes
        // (cls keeps its constants in typed fields, which external data stores raw).
        assert_eq!(
            all_tensors(&reloaded),
            all_tensors(&model),
            "{name}: tensors differ"
        );
        if name != PPOCR_CLS {
            assert_eq!(
                reloaded.to_bytes().unwrap(),
                std::fs::read(&path).unwrap(),
                "{name}: round trip"
            );
        }
        assert_eq!(digest(&path), before, "input touched");
    }
}

#[test]
fn graph_index_of_a_real_model() {
    let model = Model::load(&ppocr(PPOCR_CLS)).unwrap();
    let graph = Graph::build(&model);
    graph.check().unwrap();
    assert_eq!(graph.nodes().len(), 566);
    assert_eq!(graph.inputs(), ["x"]);
    // Every node is ordered once, producers before consumers.
    let order = graph.topological_order();
    assert_eq!(order.len(), graph.nodes().len());
    let mut position = vec![0; order.len()];
    for (at, id) in order.iter().enumerate() {
        position[id.0] = at;
    }
    for tensor in graph.tensors() {
        if let Some(p) = tensor.producer {
            for c in &tensor.consumers {
                assert!(
                    position[p.0] < position[c.0],
                    "{} used before produced",
                    tensor.name
                );
            }
        }
    }
    // Constant-node weights are weights; unnamed nodes got OpType_N names and were reported.
    let conv = graph.nodes().iter().find(|n| n.op_type == "Conv").unwrap();
    let weight = graph.tensor(&conv.inputs[1]).unwrap();
    assert_eq!(weight.kind, TensorKind::Constant);
    assert_eq!(graph.renamed().len(), 308);
    for renamed in graph.renamed() {
        let node = graph.node(renamed.id);
        assert_eq!(node.name, format!("{}_{}", node.op_type, renamed.id.0));
        assert!(graph.node_by_name(&node.name).is_some());
    }
}

#[test]
fn saving_over_the_input_or_into_a_missing_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.onnx");
    std::fs::copy(ppocr(PPOCR_CLS), &input).unwrap();
    let before = digest(&input);
    let model = Model::load(&input).unwrap();
    let err = model.save(&input, &SaveOptions::default()).unwrap_err();
    assert!(
        matches!(err, ModelError::WouldOverwriteInput { .. }),
        "{err}"
    );
    // Through another spelling of the same path, too.
    let sneaky = dir.path().join(".").join("m.onnx");
    assert!(matches!(
        model.save(&sneaky, &SaveOptions::default()),
        Err(ModelError::WouldOverwriteInput { .. })
    ));
    let err = model
        .save(
            &dir.path().join("nope").join("out.onnx"),
            &SaveOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(err, ModelError::NoOutputFolder { .. }), "{err}");
    assert_eq!(digest(&input), before);
    // No temp files are left behind by refused or successful saves.
    model
        .save(&dir.path().join("out.onnx"), &SaveOptions::default())
        .unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn saving_external_data_over_the_inputs_data_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("a.onnx");
    let model = Model::load(&ppocr(PPOCR_CLS)).unwrap();
    model
        .save(
            &first,
            &SaveOptions {
                external_data: true,
                threshold: 1024,
            },
        )
        .unwrap();
    let external = Model::load(&first).unwrap();
    // The output model's name is the input's data file: that would destroy the input.
    let err = external
        .save(&dir.path().join("a.onnx.data"), &SaveOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, ModelError::WouldOverwriteInput { .. }),
        "{err}"
    );
}

#[test]
fn constant_node_weights_read_like_initializers() {
    let model = Model::load(&ppocr(PPOCR_CLS)).unwrap();
    let graph = Graph::build(&model);
    let conv = graph.nodes().iter().find(|n| n.op_type == "Conv").unwrap();
    let weight = model
        .weight(&conv.inputs[1])
        .unwrap()
        .expect("conv weight is a Constant");
    assert_eq!(weight.shape().len(), 4, "{:?}", weight.shape());
    assert!(weight.to_f32().iter().any(|&v| v != 0.0));
    assert!(
        model.weight(&conv.outputs[0]).unwrap().is_none(),
        "activations are not weights"
    );
}
