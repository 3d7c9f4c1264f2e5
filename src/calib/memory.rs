//! Memory budgets for calibration batches.
//!
//! A calibration batch holds every observed tensor at once (the augmented model returns them
//! all as outputs), so its memory grows with the batch size times the model's whole
//! activation footprint. Before the first batch the batch size is fitted to the memory this
//! machine has available, from the tensors' declared shapes; after the first batch it is fitted
//! again from what the batch really took. A batch size that does not fit is lowered (and the
//! run says so); a single sample that does not fit is refused with the numbers.

use crate::calib::data::ArraySpec;
use crate::model::{DataType, Dim, Graph};

/// The share of available memory a batch may take: the rest is left for ONNX Runtime's own
/// arena, the statistics and the rest of the app.
const BUDGET_SHARE: f64 = 0.5;

/// Bytes a calibration batch may take on this machine now: half the memory available to this
/// process ([`crate::util::available_memory`]). `None` when the platform does not say.
pub fn batch_budget() -> Option<u64> {
    crate::util::available_memory().map(|a| (a as f64 * BUDGET_SHARE) as u64)
}

/// Bytes per element, rounded up (4-bit types count a byte: an over-estimate). Not
/// `DataType::storage_bytes`: the counts here come from file-declared shapes and must saturate,
/// never overflow.
fn element_bytes(elem_type: Option<i32>) -> u64 {
    elem_type
        .and_then(|t| DataType::from_onnx(t).ok())
        .map_or(4, |t| (t.bits() as u64).div_ceil(8).max(1))
}

/// What one sample needs, from declared shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleEstimate {
    /// Bytes of the input arrays and of every observed tensor whose shape is known.
    pub bytes: u64,
    /// True when every observed tensor's shape was known (else `bytes` is a lower bound and
    /// the first batch is measured).
    pub complete: bool,
}

/// Bytes one sample needs, from declared shapes: the model's input arrays (`arrays`, samples on
/// axis 0) and every observed tensor (its leading dimension taken as the batch).
pub fn declared_bytes_per_sample(
    graph: &Graph,
    tensors: &[String],
    arrays: &[ArraySpec],
) -> SampleEstimate {
    let mut bytes: u64 = 0;
    for array in arrays {
        let elements = array
            .shape
            .iter()
            .skip(1)
            .map(|&d| d as u64)
            .product::<u64>();
        bytes = bytes.saturating_add(elements.saturating_mul(array.dtype.bits() as u64 / 8));
    }
    let mut complete = true;
    for name in tensors {
        let shape = graph
            .tensor(name)
            .and_then(|info| Some((info, info.shape.as_ref()?)));
        let Some((info, shape)) = shape else {
            complete = false;
            continue;
        };
        let elements = shape.iter().skip(1).try_fold(1u64, |acc, dim| match dim {
            Dim::Fixed(d) if *d >= 0 => Some(acc.saturating_mul(*d as u64)),
            _ => None,
        });
        match elements {
            Some(n) => {
                bytes = bytes.saturating_add(n.saturating_mul(element_bytes(info.elem_type)))
            }
            None => complete = false,
        }
    }
    SampleEstimate { bytes, complete }
}

/// A batch size that does not fit even at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoesNotFit {
    /// Bytes one sample needs.
    pub needed: u64,
    /// Bytes available to a batch.
    pub budget: u64,
}

/// The largest batch size not above `requested` whose `per_sample` bytes fit in `budget`.
pub fn fit_batch(requested: usize, per_sample: u64, budget: u64) -> Result<usize, DoesNotFit> {
    if per_sample > budget {
        return Err(DoesNotFit {
            needed: per_sample,
            budget,
        });
    }
    let fits = budget.checked_div(per_sample).unwrap_or(u64::MAX);
    Ok(requested
        .min(usize::try_from(fits).unwrap_or(usize::MAX))
        .max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelBuilder;

    #[test]
    fn declared_shapes_count_one_sample_and_unknown_dims_give_a_lower_bound() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[-1, 3, 8, 8]);
        b.node("Relu", &["x"], &["y"]).name("relu");
        b.output("y", DataType::Float32, &[-1, 3, 8, 8]);
        b.node("Relu", &["x"], &["z"]).name("relu2");
        b.output("z", DataType::Float32, &[-1, -1]);
        let graph = Graph::build(&b.build());
        let arrays = [ArraySpec {
            name: "x".to_owned(),
            dtype: DataType::Float32,
            shape: vec![10, 3, 8, 8],
        }];
        let y = ["y".to_owned()];
        assert_eq!(
            declared_bytes_per_sample(&graph, &y, &arrays),
            SampleEstimate {
                bytes: 2 * 3 * 8 * 8 * 4,
                complete: true
            }
        );
        let both = ["y".to_owned(), "z".to_owned()];
        assert_eq!(
            declared_bytes_per_sample(&graph, &both, &arrays),
            SampleEstimate {
                bytes: 2 * 3 * 8 * 8 * 4,
                complete: false
            }
        );
    }

    #[test]
    fn the_batch_is_lowered_to_fit_and_a_sample_too_big_is_refused() {
        assert_eq!(fit_batch(32, 100, 1000), Ok(10));
        assert_eq!(fit_batch(4, 100, 1000), Ok(4));
        assert_eq!(
            fit_batch(4, 2000, 1000),
            Err(DoesNotFit {
                needed: 2000,
                budget: 1000
            })
        );
        assert_eq!(fit_batch(8, 0, 1000), Ok(8));
    }

    #[test]
    fn this_machine_reports_a_budget() {
        let budget = batch_budget().expect("Linux reports available memory");
        assert!(budget > 1 << 20, "{budget}");
    }
}
