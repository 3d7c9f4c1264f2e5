//! Graph layout time on synthetic models shaped like real networks (a trunk of blocks with
//! residual branches and a side head every few blocks), at the sizes the studio must handle.
//! Run on demand: `cargo bench --bench layout` (release build). Prints one line per size.

use std::time::Instant;

use qdq_studio::app::layout::layout;
use qdq_studio::model::{DataType, Graph, ModelBuilder};

/// A model of about `nodes` nodes: blocks of Conv-like ops (Mul, Add, Relu, Sigmoid) with a
/// residual Add, and every fourth block a two-node side branch merged back.
fn synthetic(nodes: usize) -> Graph {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 8]);
    let mut current = "x".to_owned();
    let mut count = 0;
    let mut block = 0;
    while count < nodes {
        let p = |s: &str| format!("b{block}_{s}");
        b.node("Mul", &[&current, &current], &[&p("mul")]);
        b.node("Add", &[&p("mul"), &current], &[&p("add")]);
        b.node("Relu", &[&p("add")], &[&p("relu")]);
        b.node("Sigmoid", &[&p("relu")], &[&p("gate")]);
        b.node("Mul", &[&p("relu"), &p("gate")], &[&p("out")]);
        count += 5;
        if block % 4 == 3 {
            b.node("Neg", &[&p("out")], &[&p("side")]);
            b.node("Add", &[&p("out"), &p("side")], &[&p("merged")]);
            count += 2;
            current = p("merged");
        } else {
            current = p("out");
        }
        block += 1;
    }
    b.output(&current, DataType::Float32, &[1, 8]);
    Graph::build(&b.build())
}

fn main() {
    for size in [330, 1000, 2000, 5000] {
        let graph = synthetic(size);
        let started = Instant::now();
        let l = layout(&graph).expect("lays out");
        println!(
            "layout of {} nodes ({} edges): {:.0} ms",
            l.positions.iter().flatten().count(),
            l.edges.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
