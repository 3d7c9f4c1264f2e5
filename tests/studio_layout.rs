//! The studio's graph layout and recipe editing on real models.

use crate::common;

use qdq_studio::app::layout::layout;
use qdq_studio::app::states::{NodeState, node_states};
use qdq_studio::model::{DataType, Graph, Model, ModelBuilder};
use qdq_studio::recipe::Recipe;

use common::{PPOCR_DET, ppocr};

#[test]
fn pp_ocr_det_lays_out_top_down_with_constants_folded() {
    let model = Model::load(&ppocr(PPOCR_DET)).unwrap();
    let graph = Graph::build(&model);
    let started = std::time::Instant::now();
    let l = layout(&graph, &Default::default(), &[]).unwrap();
    eprintln!(
        "PP-OCR det: {} nodes laid out in {:.0} ms",
        l.positions.iter().flatten().count(),
        started.elapsed().as_secs_f64() * 1e3
    );
    for (node, pos) in graph.nodes().iter().zip(&l.positions) {
        assert_eq!(
            pos.is_none(),
            node.op_type == "Constant",
            "{} ({})",
            node.name,
            node.op_type
        );
    }
    assert!(l.cycle_edges.is_empty());
    for e in &l.edges {
        let (a, b) = (l.positions[e.from.0].unwrap(), l.positions[e.to.0].unwrap());
        assert!(a.1 < b.1, "{} flows downwards", e.tensor);
    }
    // No two boxes of one layer overlap.
    let mut placed: Vec<(f32, f32, f32)> = graph
        .nodes()
        .iter()
        .zip(&l.positions)
        .filter_map(|(n, p)| p.map(|(x, y)| (x, y, l.widths[n.id.0])))
        .collect();
    placed.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
    for w in placed.windows(2) {
        if w[0].1 == w[1].1 {
            assert!(w[1].0 - w[0].0 >= (w[0].2 + w[1].2) / 2.0, "{w:?}");
        }
    }

    // The plan's states cover every node; the default policy quantizes the Convs.
    let plan = qdq_studio::quant::explain(&model, &Recipe::default(), None).unwrap();
    let states = node_states(&graph, &plan);
    assert_eq!(states.len(), graph.nodes().len());
    for (node, state) in graph.nodes().iter().zip(&states) {
        if node.op_type == "Conv" {
            assert_eq!(*state, NodeState::Quantized, "{}", node.name);
        }
    }
}

#[test]
fn a_graph_with_a_cycle_is_laid_out_with_the_cycle_flagged() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4]);
    b.node("Add", &["x", "b"], &["a"]).name("first");
    b.node("Relu", &["a"], &["b"]).name("second");
    b.output("b", DataType::Float32, &[1, 4]);
    let graph = Graph::build(&b.build());
    assert!(graph.check().is_err(), "the index reports the cycle");
    let l = layout(&graph, &Default::default(), &[]).unwrap();
    assert_eq!(l.positions.iter().flatten().count(), 2);
    assert_eq!(l.edges.len() + l.cycle_edges.len(), 2);
    assert!(!l.cycle_edges.is_empty());
}
