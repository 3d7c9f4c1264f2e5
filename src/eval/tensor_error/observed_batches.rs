//! How many samples each run of a per-tensor pass takes.
//!
//! A per-tensor pass exposes every activation of the model as an output, so one batch holds
//! the model's whole activation footprint times its samples: PP-OCR rec's is about 200 MB a
//! text line for the float model and twice that for the QDQ one. Run at the batch size the
//! comparison asked for (16), `compare --per_tensor` held 11.9 GB and spent 44 of its 52 s in
//! the kernel clearing fresh pages; one line a run took 0.7 GB and 17 s. So the first run
//! takes one sample and measures what it exposed, and the later ones take as many samples as
//! fit in [`OBSERVED_BATCH_BYTES`] (never more than asked for). The budget is a constant, not
//! a share of this machine's memory: the batches, and the sums they add up, are the same on
//! every machine. A model whose batch dimension is fixed runs that batch every time.

use crate::calib::data::{choose_batch, model_inputs};
use crate::calib::memory::fit_batch;
use crate::model::{Graph, Model};

/// Bytes of exposed tensors one batch of a per-tensor pass may hold (both models together
/// where both run on it).
pub const OBSERVED_BATCH_BYTES: u64 = 256 << 20;

/// The batch sizes of one per-tensor pass: fitted from the first run, or replayed from an
/// earlier pass over the same data (whose batches a captured float pass must match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedBatches {
    sizes: Sizes,
    /// The samples each run took so far.
    taken: Vec<usize>,
}

/// Where the sizes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sizes {
    /// The model fixes the batch size: every run takes it (never lowered, no probe).
    Fixed(usize),
    /// One sample first; then as many as fit the budget, at most `requested`.
    Fitted {
        requested: usize,
        /// Once the first run was measured.
        fitted: Option<usize>,
    },
    /// The samples of an earlier pass's runs, in order (then the last again).
    Replayed(Vec<usize>),
}

impl ObservedBatches {
    /// Batches for `model` when `requested` samples per batch were asked for.
    pub fn new(model: &Model, requested: usize) -> Self {
        let choice = choose_batch(&model_inputs(&Graph::build(model)), requested.max(1));
        let sizes = if choice.fixed {
            Sizes::Fixed(choice.size)
        } else {
            Sizes::Fitted {
                requested: choice.size,
                fitted: None,
            }
        };
        ObservedBatches {
            sizes,
            taken: Vec::new(),
        }
    }

    /// Batches that take the samples `sizes` gives, in order (then the last size again).
    pub fn replaying(sizes: &[usize]) -> Self {
        ObservedBatches {
            sizes: Sizes::Replayed(sizes.to_vec()),
            taken: Vec::new(),
        }
    }

    /// The samples the next run takes.
    pub fn next_size(&self) -> usize {
        match &self.sizes {
            Sizes::Fixed(size) => *size,
            Sizes::Fitted { fitted, .. } => fitted.unwrap_or(1),
            Sizes::Replayed(sizes) => sizes
                .get(self.taken.len())
                .or(sizes.last())
                .copied()
                .unwrap_or(1),
        }
    }

    /// Records a run of `samples` samples that exposed `bytes`: the first one fits the rest.
    pub fn ran(&mut self, samples: usize, bytes: u64) {
        self.taken.push(samples);
        if let Sizes::Fitted {
            requested,
            fitted: fitted @ None,
        } = &mut self.sizes
            && samples > 0
        {
            let per_sample = bytes.div_ceil(samples as u64).max(1);
            // A sample over the budget runs alone.
            *fitted = Some(fit_batch(*requested, per_sample, OBSERVED_BATCH_BYTES).unwrap_or(1));
        }
    }

    /// The samples each run took, in order.
    pub fn taken(&self) -> &[usize] {
        &self.taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder};

    fn relu(batch: i64) -> Model {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[batch, 4]);
        b.node("Relu", &["x"], &["y"]).name("relu");
        b.output("y", DataType::Float32, &[batch, 4]);
        b.build()
    }

    #[test]
    fn the_first_run_takes_one_sample_and_fits_the_rest_to_the_budget() {
        let mut batches = ObservedBatches::new(&relu(-1), 16);
        assert_eq!(batches.next_size(), 1);
        // 100 MiB a sample: two fit in the budget.
        batches.ran(1, 100 << 20);
        assert_eq!(batches.next_size(), 2);
        batches.ran(2, 200 << 20);
        assert_eq!(batches.next_size(), 2);
        assert_eq!(batches.taken(), [1, 2]);
        // Small tensors: what was asked for, never more.
        let mut small = ObservedBatches::new(&relu(-1), 16);
        small.ran(1, 4096);
        assert_eq!(small.next_size(), 16);
        // A sample past the budget runs alone.
        let mut huge = ObservedBatches::new(&relu(-1), 16);
        huge.ran(1, OBSERVED_BATCH_BYTES * 3);
        assert_eq!(huge.next_size(), 1);
    }

    #[test]
    fn a_fixed_batch_is_kept_and_replayed_sizes_are_followed() {
        let mut fixed = ObservedBatches::new(&relu(4), 16);
        assert_eq!(fixed.next_size(), 4);
        fixed.ran(4, OBSERVED_BATCH_BYTES * 8);
        assert_eq!(fixed.next_size(), 4);
        let mut replayed = ObservedBatches::replaying(&[1, 3, 3, 2]);
        for expected in [1, 3, 3, 2] {
            assert_eq!(replayed.next_size(), expected);
            replayed.ran(expected, 1 << 40);
        }
        assert_eq!(replayed.next_size(), 2);
    }
}
