//! Graph layout time on synthetic models shaped like real networks (a trunk of blocks with
//! residual branches and a side head every few blocks), at the sizes the studio must handle.
//! Run on demand: `cargo bench --bench layout` (release build). Prints one line per size.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use qdq_studio::app::layout::layout;
use qdq_studio::model::Graph;

#[path = "../common/mod.rs"]
mod common;

fn main() {
    for size in [330, 1000, 2000, 5000] {
        let graph = Graph::build(&common::synthetic(size));
        let started = Instant::now();
        let l = layout(&graph, &Default::default(), &[]).expect("lays out");
        println!(
            "layout of {} nodes ({} edges): {:.0} ms",
            l.positions.iter().flatten().count(),
            l.edges.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
