//! The studio driven like a user drives it, without a display: egui_kittest runs the real
//! `Studio` frame by frame, finds widgets by their labels, clicks, types and presses keys, and
//! the recipe is checked after each step.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::{Event, Key, Modifiers, PointerButton, Pos2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use qdq_studio::app::command::RecipeCommand;
use qdq_studio::app::{Settings, Source, Studio, StudioOptions};
use qdq_studio::model::{DataType, ModelBuilder, NodeId};
use qdq_studio::recipe::{Recipe, Target};

fn studio() -> Studio {
    Studio::new(
        StudioOptions {
            native_dialogs: false,
            probe_runtime: false,
        },
        Settings::default(),
    )
}

fn harness(studio: Studio) -> Harness<'static, Studio> {
    Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui_state(|ui, studio: &mut Studio| studio.ui(ui), studio)
}

/// Steps frames until the open job is done (jobs run on their own threads).
fn settle(h: &mut Harness<'_, Studio>) {
    let started = Instant::now();
    while h.state().is_busy() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "opening took over a minute"
        );
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    h.run_steps(3);
}

fn open(h: &mut Harness<'_, Studio>, source: Source) {
    h.state_mut().open(source);
    settle(h);
}

fn recipe(h: &Harness<'_, Studio>) -> Recipe {
    h.state()
        .document()
        .expect("a model is open")
        .recipe()
        .clone()
}

/// Clicks the centre of `node`'s box in the graph view.
fn click_node(h: &mut Harness<'_, Studio>, node: NodeId, modifiers: Modifiers) {
    let rect = h
        .state()
        .document()
        .and_then(|d| d.view.canvas.screen_rect_of(node))
        .expect("the node is laid out");
    let pos = rect.center();
    h.event(Event::PointerMoved(pos));
    h.event_modifiers(
        Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed: true,
            modifiers,
        },
        modifiers,
    );
    h.event_modifiers(
        Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed: false,
            modifiers,
        },
        modifiers,
    );
    h.run_steps(2);
}

/// A Conv node whose box is on screen in the opening view (the top of the graph).
fn visible_conv(h: &Harness<'_, Studio>, skip: usize) -> NodeId {
    let doc = h.state().document().unwrap();
    doc.opened
        .graph
        .topological_order()
        .iter()
        .copied()
        .filter(|id| doc.opened.graph.node(*id).op_type == "Conv")
        .filter(|id| {
            doc.view.canvas.screen_rect_of(*id).is_some_and(|r| {
                r.min.x > 300.0 && r.max.x < 1000.0 && r.min.y > 60.0 && r.max.y < 800.0
            })
        })
        .nth(skip)
        .unwrap_or_else(|| {
            let rects: Vec<_> = doc
                .opened
                .graph
                .topological_order()
                .iter()
                .filter(|id| doc.opened.graph.node(**id).op_type != "Constant")
                .take(12)
                .map(|id| {
                    (
                        doc.opened.graph.node(*id).op_type.clone(),
                        doc.view.canvas.screen_rect_of(*id),
                    )
                })
                .collect();
            panic!(
                "no Conv on screen; view {:?} zoom {} first nodes {rects:?}",
                doc.view.canvas.view_rect(),
                doc.view.canvas.zoom()
            )
        })
}

fn excluded_names(r: &Recipe) -> Vec<String> {
    r.nodes_to_exclude.clone()
}

#[test]
fn a_user_edits_the_sample_recipe_with_clicks_shortcuts_search_and_files() {
    let mut h = harness(studio());
    open(&mut h, Source::Sample);
    {
        let doc = h.state().document().expect("the sample opened");
        assert_eq!(doc.opened.graph.nodes().len(), 566);
        assert!(
            doc.view.canvas.node_count() > 200,
            "{}",
            doc.view.canvas.node_count()
        );
        assert_eq!(recipe(&h), Recipe::for_target(Target::Cpu));
    }
    // An idle window settles: nothing asks for frames when nothing happens.
    h.try_run().expect("an idle studio stops repainting");

    // Uncheck Conv in the op-type panel (scrolled to first, as a user would: the recipe
    // summary above the list leaves it at the panel's edge; the list scrolls over a few
    // frames).
    h.get_by_label("Conv (53)").scroll_to_me();
    h.run_steps(30);
    h.get_by_label("Conv (53)").click();
    h.run_steps(2);
    assert_eq!(recipe(&h).op_types_to_exclude, ["Conv"]);
    h.get_by_label("Conv (53)").click();
    h.run_steps(2);
    assert!(recipe(&h).op_types_to_exclude.is_empty());

    // Select a node by clicking it, exclude it with the inspector's button.
    let first = visible_conv(&h, 0);
    let first_name = h
        .state()
        .document()
        .unwrap()
        .opened
        .graph
        .node(first)
        .name
        .clone();
    click_node(&mut h, first, Modifiers::NONE);
    assert_eq!(h.state().document().unwrap().view.selection, [first]);
    h.get_by_label("Exclude this node").click();
    h.run_steps(2);
    assert_eq!(
        excluded_names(&recipe(&h)),
        [format!("{}$", regex_escape(&first_name))]
    );
    assert!(
        h.query_by_label("Include this node").is_some(),
        "the button flips"
    );

    // Undo with Ctrl+Z.
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert!(recipe(&h).nodes_to_exclude.is_empty());
    // Redo with Ctrl+Shift+Z, undo again.
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::Z);
    h.run_steps(2);
    assert_eq!(recipe(&h).nodes_to_exclude.len(), 1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);

    // Two nodes with Shift+click, excluded with X, then undone.
    let second = visible_conv(&h, 1);
    click_node(&mut h, first, Modifiers::NONE);
    click_node(&mut h, second, Modifiers::SHIFT);
    assert_eq!(
        h.state().document().unwrap().view.selection,
        [first, second]
    );
    h.key_press(Key::X);
    h.run_steps(2);
    assert_eq!(recipe(&h).nodes_to_exclude.len(), 2);
    h.key_press(Key::X);
    h.run_steps(2);
    assert!(
        recipe(&h).nodes_to_exclude.is_empty(),
        "X again includes them"
    );
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert_eq!(
        recipe(&h).nodes_to_exclude.len(),
        2,
        "undo brings the exclusion back"
    );

    // Search with Ctrl+F for a node by name: the view centres on it.
    let (target, target_name) = {
        let graph = &h.state().document().unwrap().opened.graph;
        let id = graph
            .topological_order()
            .iter()
            .copied()
            .filter(|id| graph.node(*id).op_type != "Constant")
            .nth(150)
            .unwrap();
        (id, graph.node(id).name.clone())
    };
    h.key_press_modifiers(Modifiers::COMMAND, Key::F);
    h.run_steps(2);
    h.event(Event::Text(target_name.clone()));
    h.run_steps(3);
    {
        let doc = h.state().document().unwrap();
        assert!(doc.view.search.open);
        assert_eq!(doc.view.search.current(), Some(target), "{target_name}");
        let rect = doc.view.canvas.screen_rect_of(target).unwrap();
        let view = egui::Rect::from_min_max(Pos2::new(250.0, 0.0), Pos2::new(1070.0, 900.0));
        assert!(view.contains(rect.center()), "centred: {rect:?}");
    }
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert!(!h.state().document().unwrap().view.search.open);

    recipe_and_data_round_trip_through_a_file(&mut h);
    assert!(h.state().notices().is_empty(), "{:?}", h.state().notices());
}

/// Saves the recipe through File ▸ Save recipe (the path field: no native dialog here),
/// changes the recipe and its data, and loads the file back: both come back.
fn recipe_and_data_round_trip_through_a_file(h: &mut Harness<'_, Studio>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chosen.recipe.toml");
    let saved = recipe(h);
    h.key_press_modifiers(Modifiers::COMMAND, Key::S);
    h.run_steps(2);
    type_path(h, &path);
    h.get_by_label("Save").click();
    h.run_steps(2);
    assert_eq!(
        Recipe::load(&path).unwrap(),
        saved,
        "the file holds the recipe"
    );
    // And the data it runs on, beside it (the sample's bundled files).
    let calibration = h
        .state()
        .document()
        .unwrap()
        .work
        .settings
        .calibration
        .clone();
    assert!(calibration.path.ends_with("calib.npz"), "{calibration:?}");
    let (_, data) = Recipe::load_with_data(&path).unwrap();
    let data = data.expect("a data table");
    assert_eq!(
        data["calibration"]["path"].as_str(),
        Some(calibration.path.as_str()),
        "{data:?}"
    );
    // As the engine reads it too, for `quantize --recipe` without data flags.
    assert_eq!(
        qdq_studio::recipe::calibration_spec(&data).unwrap(),
        Some(calibration.spec().unwrap()),
        "{data:?}"
    );

    // Change it and its data, then load the file back through File ▸ Load recipe.
    h.get_by_label("Conv (53)").click();
    h.run_steps(2);
    assert_ne!(recipe(h), saved);
    h.state_mut()
        .document_mut()
        .unwrap()
        .work
        .settings
        .calibration
        .path = String::new();
    h.key_press_modifiers(Modifiers::COMMAND, Key::L);
    h.run_steps(2);
    type_path(h, &path);
    h.get_by_label("Load").click();
    h.run_steps(2);
    assert_eq!(recipe(h), saved, "loading restores it");
    assert_eq!(
        h.state().document().unwrap().work.settings.calibration,
        calibration,
        "and the data it was saved with"
    );
}

fn regex_escape(name: &str) -> String {
    qdq_studio::app::edit::exact_pattern(name)
        .trim_end_matches('$')
        .to_owned()
}

/// Replaces the path field's text with `path`.
fn type_path(h: &mut Harness<'_, Studio>, path: &Path) {
    let field = h.get_by_label("Path");
    field.focus();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.event(Event::Text(path.display().to_string()));
    h.run_steps(2);
}

#[derive(Debug)]
struct Dropped(std::path::PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }
    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

#[test]
fn bad_files_show_an_error_and_the_open_model_stays() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(studio());
    open(&mut h, Source::Sample);
    let nodes = h.state().document().unwrap().opened.graph.nodes().len();

    // A truncated model.
    let truncated = dir.path().join("truncated.onnx");
    let bytes = qdq_studio::sample::SAMPLE_MODEL;
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    open(&mut h, Source::File(truncated.clone()));
    assert_eq!(h.state().notices().len(), 1);
    assert!(
        h.state().notices()[0].title.contains("truncated.onnx"),
        "{:?}",
        h.state().notices()
    );
    assert_eq!(
        h.state().document().unwrap().opened.graph.nodes().len(),
        nodes,
        "the sample is still open"
    );
    h.get_by_label("Dismiss").click();
    h.run_steps(2);
    assert!(h.state().notices().is_empty());

    // A file that does not exist.
    open(&mut h, Source::File(dir.path().join("missing.onnx")));
    assert!(
        h.state().notices()[0].detail.contains("missing.onnx"),
        "{:?}",
        h.state().notices()
    );
    h.state_mut().dismiss(0);

    // A text file dropped on the window.
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    h.input_mut().dropped_files.push(Arc::new(Dropped(text)));
    h.run_steps(2);
    assert!(
        h.state().notices()[0]
            .title
            .contains("is not an ONNX model"),
        "{:?}",
        h.state().notices()
    );
    assert_eq!(
        h.state().document().unwrap().opened.graph.nodes().len(),
        nodes
    );
}

#[test]
fn a_broken_graph_opens_with_its_problems_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4]);
    b.node("Relu", &["x"], &["a"]);
    b.node("Add", &["a", "ghost"], &["y"]).name("reads_a_ghost");
    b.output("y", DataType::Float32, &[1, 4]);
    let path = dir.path().join("broken.onnx");
    std::fs::write(&path, b.build().to_bytes().unwrap()).unwrap();
    let mut h = harness(studio());
    open(&mut h, Source::File(path.clone()));
    assert!(h.state().notices().is_empty(), "{:?}", h.state().notices());
    let doc = h.state().document().unwrap();
    let add = doc.opened.graph.node_by_name("reads_a_ghost").unwrap().id;
    assert!(doc.opened.flagged.contains(&add));
    let relu = doc
        .opened
        .graph
        .nodes()
        .iter()
        .find(|n| n.op_type == "Relu")
        .unwrap();
    assert!(
        relu.auto_named,
        "the unnamed node got a name: {}",
        relu.name
    );
    assert!(
        h.state().status().contains("structural problem"),
        "{}",
        h.state().status()
    );
    assert_eq!(
        h.state().settings().recent,
        [std::path::absolute(&path).unwrap()]
    );
    // The inspector lists the problem; its link selects the node.
    h.get_by_label_contains("which nothing produces").click();
    h.run_steps(2);
    assert_eq!(h.state().document().unwrap().view.selection, [add]);
}

/// The id of node `name` of the open document.
fn doc_node(h: &Harness<'_, Studio>, name: &str) -> qdq_studio::model::NodeId {
    let doc = h.state().document().unwrap();
    doc.opened.graph.node_by_name(name).unwrap().id
}

/// A post-norm residual block: LayerNormalization → MatMul → bias Add → residual Add →
/// LayerNormalization → MatMul.
fn residual_block(path: &Path) {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::model::TensorArray;
    let floats = |shape: &[usize], v: f32| TensorArray::Float32(ArrayD::from_elem(IxDyn(shape), v));
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4, 8]);
    b.initializer("w", floats(&[8, 8], 0.1));
    b.initializer("gamma", floats(&[8], 1.0));
    b.initializer("bias", floats(&[8], 0.5));
    b.node("LayerNormalization", &["x", "gamma"], &["n0"])
        .name("ln0");
    b.node("MatMul", &["n0", "w"], &["proj"]).name("dense");
    b.node("Add", &["proj", "bias"], &["biased"])
        .name("bias_add");
    b.node("Add", &["biased", "n0"], &["residual"])
        .name("residual_add");
    b.node("LayerNormalization", &["residual", "gamma"], &["normed"])
        .name("ln");
    b.node("MatMul", &["normed", "w"], &["y"]).name("next");
    b.output("y", DataType::Float32, &[1, 4, 8]);
    std::fs::write(path, b.build().to_bytes().unwrap()).unwrap();
}

#[test]
fn automatic_precision_is_shown_with_its_reason_and_can_be_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("block.onnx");
    residual_block(&path);
    let mut h = harness(studio());
    open(&mut h, Source::File(path));
    let kept =
        |h: &Harness<'_, Studio>| h.state().document().unwrap().planned.plan.kept_float.len();
    // A transformer under its target: the MatMuls' inputs alone are quantized, nothing needs
    // keeping, and the Adds show unselected. Selecting Add lists the op types: onnxruntime's
    // placement, which automatic precision then guards.
    assert_eq!(kept(&h), 0);
    let add_type = |h: &Harness<'_, Studio>| {
        h.state().document().unwrap().planned.plan.op_types["Add"].selected
    };
    assert!(!add_type(&h));
    h.state_mut()
        .push(qdq_studio::app::command::Command::Recipe(
            RecipeCommand::SetOpType {
                op_type: "Add".into(),
                quantize: true,
            },
        ));
    h.run_steps(2);
    assert!(add_type(&h));
    // x feeds the first LayerNorm, proj, biased and residual the second: kept float; the bias
    // Add has nothing left to quantize and shows as kept in float.
    assert_eq!(kept(&h), 4);
    let doc = h.state().document().unwrap();
    let add = doc.opened.graph.node_by_name("bias_add").unwrap().id;
    assert_eq!(
        qdq_studio::app::states::NodeState::of(doc.planned.plan.node("bias_add"), None),
        qdq_studio::app::states::NodeState::KeptFloat
    );
    // With the bias Add, the residual Add and both LayerNorms: each reads a kept tensor, so no
    // runtime fuses it and it stays float whole.
    h.get_by_label_contains("Kept in float: 4");
    // The inspector tells why.
    h.state_mut().document_mut().unwrap().view.selection = vec![add];
    h.run_steps(2);
    // Its input and output, each with the reason.
    assert_eq!(
        h.query_all_by_label_contains("float (kept: normalized stream)")
            .count(),
        2
    );
    // The studio's first target is the CPU provider's, `cpu`: 8-bit weights. The saturation
    // guard's switch moves the recipe to `cpu-avx2`, whose 7 bits the MatMuls' shared weight
    // then gets (shown in the inspector), as one undoable recipe change.
    assert_eq!(recipe(&h).target, Some(Target::Cpu));
    assert!(!recipe(&h).saturation_guard);
    let dense = doc_node(&h, "dense");
    h.state_mut().document_mut().unwrap().view.selection = vec![dense];
    h.run_steps(2);
    assert_eq!(
        h.query_all_by_label_contains("int8 (7-bit) symmetric")
            .count(),
        0
    );
    h.get_by_label_contains("7-bit weights against saturation")
        .click();
    h.run_steps(3);
    assert!(recipe(&h).saturation_guard);
    assert_eq!(recipe(&h).target, Some(Target::CpuAvx2));
    assert_eq!(
        h.state()
            .document()
            .unwrap()
            .planned
            .plan
            .seven_bit_weights
            .len(),
        1
    );
    h.get_by_label_contains("int8 (7-bit) symmetric");
    h.get_by_label_contains("7-bit weights against saturation (1)");
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(3);
    assert!(!recipe(&h).saturation_guard);
    assert_eq!(recipe(&h).target, Some(Target::Cpu));
    // The switch turns it off as one undoable recipe change.
    h.get_by_label_contains("Automatic precision (4 tensor(s) kept float)")
        .click();
    h.run_steps(3);
    assert!(!recipe(&h).auto_precision);
    assert_eq!(kept(&h), 0);
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(3);
    assert!(recipe(&h).auto_precision);
}

/// x → MatMul by a `[256, 8]` weight whose row 3 is 20 times the others → y.
fn outlier_row_matmul(path: &std::path::Path) {
    let mut w = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[256, 8]), |i| {
        ((i[0] * 7 + i[1] * 3) % 11) as f32 / 10.0 - 0.5
    });
    w.index_axis_mut(ndarray::Axis(0), 3)
        .mapv_inplace(|v| v * 20.0);
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4, 256]);
    b.initializer("w", qdq_studio::model::TensorArray::Float32(w));
    b.node("MatMul", &["x", "w"], &["y"]).name("dense");
    b.output("y", DataType::Float32, &[1, 4, 8]);
    std::fs::write(path, b.build().to_bytes().unwrap()).unwrap();
}

#[test]
fn outlier_rows_in_float_are_counted_and_switched_off_as_one_recipe_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outlier.onnx");
    outlier_row_matmul(&path);
    let mut h = harness(studio());
    open(&mut h, Source::File(path));
    let split = |h: &Harness<'_, Studio>| {
        h.state()
            .document()
            .unwrap()
            .planned
            .plan
            .outlier_rows
            .len()
    };
    assert_eq!(split(&h), 1);
    // The float path is the quantizer's own: the graph shows the model as opened.
    let doc = h.state().document().unwrap();
    assert!(
        doc.opened
            .graph
            .node_by_name("dense/outlier_rows/MatMul")
            .is_none()
    );
    // The inspector says which rows of the selected layer's weight stay float.
    let dense = doc_node(&h, "dense");
    h.state_mut().document_mut().unwrap().view.selection = vec![dense];
    h.run_steps(2);
    h.get_by_label_contains("Outlier rows in float: 1 of 256 (rows 3)");
    h.get_by_label_contains("Outlier rows in float (1 row(s), 1 weight(s))")
        .click();
    h.run_steps(3);
    assert!(!recipe(&h).preprocessing.outlier_rows);
    assert_eq!(split(&h), 0);
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(3);
    assert!(recipe(&h).preprocessing.outlier_rows);
    assert_eq!(split(&h), 1);
}

#[test]
fn the_mode_choice_offers_the_int4_methods_and_output_forms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("block.onnx");
    residual_block(&path);
    let mut h = harness(studio());
    open(&mut h, Source::File(path));
    h.get_by_value("INT8 (activations and weights)").click();
    h.run_steps(2);
    h.get_by_label("INT4 weight-only").click();
    h.run_steps(3);
    let r = recipe(&h);
    assert_eq!(r.mode, qdq_studio::recipe::QuantMode::Int4);
    assert_eq!(r.weight_type, qdq_studio::recipe::QuantType::Int4);
    // The plan is the int4 one: both MatMul weights, nothing else.
    assert_eq!(
        h.state().document().unwrap().planned.plan.quantized_count(),
        2
    );
    h.get_by_value("awq_full").click();
    h.run_steps(2);
    h.get_by_label("awq_clip").click();
    h.run_steps(3);
    assert_eq!(
        recipe(&h).int4_method,
        qdq_studio::recipe::Int4Method::AwqClip
    );
    // The CPU target's int4 form is MatMulNBits (ONNX Runtime's int4 kernels).
    let nbits = qdq_studio::recipe::Int4Output::Matmulnbits;
    assert_eq!(recipe(&h).int4_output, nbits);
    h.get_by_value("MatMulNBits (ONNX Runtime)").click();
    h.run_steps(2);
    h.get_by_label("DequantizeLinear (any runtime)").click();
    h.run_steps(3);
    assert_eq!(recipe(&h).int4_output, qdq_studio::recipe::Int4Output::Dq);
    // Each choice is one undoable step; back to int8 drops the int4-only output form.
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(3);
    assert_eq!(recipe(&h).int4_output, nbits);
    h.get_by_value("INT4 weight-only").click();
    h.run_steps(2);
    h.get_by_label("INT8 (activations and weights)").click();
    h.run_steps(3);
    let r = recipe(&h);
    assert_eq!(
        (r.mode, r.weight_type, r.int4_output),
        (
            qdq_studio::recipe::QuantMode::Int8,
            qdq_studio::recipe::QuantType::Int8,
            qdq_studio::recipe::Int4Output::Dq
        )
    );
}

#[test]
fn a_small_window_keeps_the_graph_visible_and_every_panel_within_the_window() {
    let mut h = Harness::builder()
        .with_size(egui::vec2(1024.0, 700.0))
        .build_ui_state(|ui, studio: &mut Studio| studio.ui(ui), studio());
    open(&mut h, Source::Sample);
    // The legend starts folded to its title: it would cover a third of a small graph view.
    assert!(h.query_by_label("will be quantized").is_none());
    h.get_by_label("Legend").click();
    h.run_steps(2);
    assert!(h.query_by_label("will be quantized").is_some(), "unfolded");
    h.run_steps(4);
    h.get_by_label("Hide legend").click();
    h.run_steps(2);
    assert!(
        h.query_by_label("will be quantized").is_none(),
        "folded again: {:?} {:?}",
        h.query_by_label("Legend").is_some(),
        h.state().document().unwrap().view.panel.legend_open
    );
    // The op types are reached by scrolling the left panel, not pushed off it.
    h.get_by_label("Conv (53)").scroll_to_me();
    h.run_steps(30);
    let conv = h.get_by_label("Conv (53)").rect();
    assert!(conv.max.y < 700.0 && conv.min.y > 0.0, "{conv:?}");
    // A node with a very long tensor name selected: the inspector does not widen over the
    // graph (its rows scroll sideways).
    let dir = tempfile::tempdir().unwrap();
    let long =
        "encoder.layer.11.attention.output.dense.weight_quantized_DequantizeLinear_Output_long";
    let path = dir.path().join("long_names.onnx");
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4]);
    b.node("Relu", &["x"], &[long]).name("relu");
    b.node("Neg", &[long], &["y"]).name("neg");
    b.output("y", DataType::Float32, &[1, 4]);
    b.build().save(&path, &Default::default()).unwrap();
    open(&mut h, Source::File(path));
    h.run_steps(4);
    let graph_view = |h: &Harness<'_, Studio>| {
        h.state()
            .document()
            .unwrap()
            .view
            .canvas
            .view_rect()
            .unwrap()
    };
    let view_before = graph_view(&h);
    let node = h
        .state()
        .document()
        .unwrap()
        .opened
        .graph
        .node_by_name("relu")
        .unwrap()
        .id;
    h.state_mut().document_mut().unwrap().view.selection = vec![node];
    h.state_mut().document_mut().unwrap().refresh();
    h.run_steps(4);
    assert!(h.query_by_label(long).is_some(), "the inspector lists it");
    let view_after = graph_view(&h);
    assert!(
        (view_after.width() - view_before.width()).abs() < 1.0 && view_after.width() > 250.0,
        "graph view {view_before:?} -> {view_after:?}"
    );
}

#[test]
fn a_user_paints_nodes_by_precision_in_the_inspector() {
    use qdq_studio::app::states::NodeState;
    use qdq_studio::recipe::NodePrecision;
    let mut h = harness(studio());
    open(&mut h, Source::Sample);
    let first = visible_conv(&h, 0);
    let second = visible_conv(&h, 1);
    let name = |h: &Harness<'_, Studio>, id: NodeId| {
        h.state()
            .document()
            .unwrap()
            .opened
            .graph
            .node(id)
            .name
            .clone()
    };
    let state = |h: &Harness<'_, Studio>, id: NodeId| h.state().document().unwrap().state(id);
    let (first_name, second_name) = (name(&h, first), name(&h, second));

    // One node: 16-bit activations, painted as such, still counted as quantized.
    let quantized_before = h.state().document().unwrap().planned.counts.quantized;
    click_node(&mut h, first, Modifiers::NONE);
    h.get_by_label("w8a16").click();
    h.run_steps(3);
    assert_eq!(
        recipe(&h).node_precision.get(&first_name),
        Some(&NodePrecision::W8a16)
    );
    assert_eq!(state(&h, first), NodeState::Quantized16);
    assert_eq!(
        h.state().document().unwrap().planned.counts.quantized,
        quantized_before
    );
    assert!(
        h.query_all_by_label("16-bit activations (w8a16)").count() >= 1,
        "legend"
    );
    assert!(
        h.query_by_label("1 node(s) at w8a16").is_some(),
        "the recipe panel counts it"
    );

    // A region of two: 4-bit weights for both, in one undoable step.
    click_node(&mut h, first, Modifiers::NONE);
    click_node(&mut h, second, Modifiers::SHIFT);
    h.get_by_label("w4a8").click();
    h.run_steps(3);
    let precision = recipe(&h).node_precision;
    assert_eq!(precision.get(&first_name), Some(&NodePrecision::W4a8));
    assert_eq!(precision.get(&second_name), Some(&NodePrecision::W4a8));
    assert_eq!(state(&h, second), NodeState::QuantizedW4);
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(3);
    let precision = recipe(&h).node_precision;
    assert_eq!(precision.get(&first_name), Some(&NodePrecision::W8a16));
    assert!(!precision.contains_key(&second_name));
    // Back to the recipe's 8 bits.
    click_node(&mut h, first, Modifiers::NONE);
    h.get_by_label("w8a8").click();
    h.run_steps(3);
    assert!(recipe(&h).node_precision.is_empty());
    assert_eq!(state(&h, first), NodeState::Quantized);
}

/// A model folder opens the model it holds (its one `.onnx`, or the one `genai_config.json`
/// names); a folder with none says what it holds, and the open model stays.
#[test]
fn a_model_folder_opens_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("exported");
    std::fs::create_dir(&folder).unwrap();
    let model = folder.join("model.onnx");
    std::fs::write(&model, qdq_studio::sample::SAMPLE_MODEL).unwrap();
    std::fs::write(folder.join("tokenizer.json"), "{}").unwrap();
    let mut h = harness(studio());
    open(&mut h, Source::File(folder.clone()));
    assert!(h.state().notices().is_empty(), "{:?}", h.state().notices());
    assert_eq!(
        h.state()
            .document()
            .expect("the folder's model")
            .opened
            .source,
        Source::File(model)
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    open(&mut h, Source::File(empty));
    assert_eq!(h.state().notices().len(), 1, "{:?}", h.state().notices());
    assert!(
        h.state().notices()[0].detail.contains("no .onnx"),
        "{:?}",
        h.state().notices()
    );
    assert!(
        h.state().document().is_some(),
        "the model open before stays"
    );
}
