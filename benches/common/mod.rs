//! Models the benchmarks share.

use qdq_studio::model::{DataType, Model, ModelBuilder};

/// A model of about `nodes` nodes: blocks of Conv-like ops (Mul, Add, Relu, Sigmoid) with a
/// residual Add, and every fourth block a two-node side branch merged back.
pub fn synthetic(nodes: usize) -> Model {
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
    b.build()
}
