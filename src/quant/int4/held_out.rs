//! The calibration rows an int4 search fits on, and the rows it is checked on.
//!
//! Why: a search that picks, per layer, the scales or clipping ratios that best reproduce
//! the layer's output on its calibration rows also fits their noise, and on a trained model
//! that can do worse on new text than plain rounding (measured on a trained decoder: AWQ-lite
//! +0.051 perplexity against rounding's +0.031). So every fourth sampled row is held out:
//! the search fits on the others, and a layer keeps its searched form only where that beats
//! plain rounding on the held-out rows too. The rows are a reservoir sample (random order),
//! so every fourth one is a fair draw.

use ndarray::{Array2, ArrayView2, Axis};

/// One row in this many is held out.
const HELD_OUT_EVERY: usize = 4;

/// Below this many sampled rows nothing is held out: the search fits on all of them.
const MIN_ROWS: usize = 16;

/// A layer input's sampled rows, split.
#[derive(Debug, Clone)]
pub struct SplitRows {
    /// The rows the search fits on.
    pub fit: Array2<f32>,
    /// The rows the choice is checked on (`None` with too few rows to spare any).
    pub held: Option<Array2<f32>>,
}

impl SplitRows {
    /// Splits `x` (rows × channels): every [`HELD_OUT_EVERY`]th row held out, from
    /// [`MIN_ROWS`] rows on.
    pub fn of(x: ArrayView2<'_, f32>) -> Self {
        if x.nrows() < MIN_ROWS {
            return SplitRows {
                fit: x.to_owned(),
                held: None,
            };
        }
        let held_out = |i: &usize| i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1;
        let (held, fit): (Vec<usize>, Vec<usize>) = (0..x.nrows()).partition(held_out);
        SplitRows {
            fit: x.select(Axis(0), &fit),
            held: Some(x.select(Axis(0), &held)),
        }
    }

    /// Rows held out (0 when none are).
    pub fn held_rows(&self) -> usize {
        self.held.as_ref().map_or(0, Array2::nrows)
    }

    /// Whether the searched form is kept over plain rounding: `errors(held rows)` gives the
    /// searched form's error and plain rounding's, and the first must be smaller; kept
    /// without held-out rows.
    pub fn keeps(&self, errors: impl FnOnce(ArrayView2<'_, f32>) -> (f64, f64)) -> bool {
        self.held.as_ref().is_none_or(|held| {
            let (searched, plain) = errors(held.view());
            searched < plain
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fourth_row_is_held_out_from_sixteen_rows_on() {
        let x = Array2::from_shape_fn((20, 2), |(r, c)| (r * 2 + c) as f32);
        let split = SplitRows::of(x.view());
        assert_eq!((split.fit.nrows(), split.held_rows()), (15, 5));
        let held = split.held.as_ref().unwrap();
        assert_eq!(held.row(0).to_vec(), [6.0, 7.0], "row 3");
        assert_eq!(split.fit.row(3).to_vec(), [8.0, 9.0], "row 4");
        let few = SplitRows::of(x.slice(ndarray::s![..8, ..]));
        assert_eq!((few.fit.nrows(), few.held_rows()), (8, 0));
        assert!(few.keeps(|_| unreachable!("nothing held out to measure")));
        // Kept only where the searched form is better on the held-out rows.
        assert!(split.keeps(|held| {
            assert_eq!(held.nrows(), 5);
            (1.0, 2.0)
        }));
        assert!(!split.keeps(|_| (2.0, 1.0)));
    }
}
