//! GPTQ's solver (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
//! Pre-trained Transformers", ICLR 2023), in f64 on the CPU.
//!
//! A weight row `w` multiplies input vectors `x` with Hessian `H = E[x xᵀ]`; rounding column
//! `i` leaves an error `e`, and moving the not yet rounded columns by `−e · U[i, i+1..] /
//! U[i, i]` (`U` the upper Cholesky factor of `H⁻¹`) cancels as much of its effect on the
//! output as those columns can (Optimal Brain Surgeon, one column at a time). Columns are
//! taken in order of decreasing `H[i, i]` (the "act order": the inputs that matter most are
//! rounded while the most columns are left to compensate), in blocks of [`BLOCK`] whose
//! updates to the rest are applied at once as one matrix product (the "lazy batch").
//!
//! Written here rather than taken from a linear-algebra crate: the product needs one dense
//! Cholesky factorization and one triangular inverse of a symmetric matrix a few thousand
//! wide, a few dozen lines, against a dependency as large as the rest of the engine.

use ndarray::{Array2, linalg::general_mat_mul, s};
use rayon::prelude::*;

/// Columns rounded between two lazy updates of the rest.
const BLOCK: usize = 128;

/// GPTQ's dampening: this fraction of the mean diagonal is added to the diagonal, so the
/// factorization is stable when inputs are correlated; raised tenfold (up to
/// [`MAX_DAMPENING`]) while the matrix is not positive definite. The reference value, used
/// when no held-out samples choose among [`DAMPENINGS`].
pub const DAMPENING: f64 = 0.01;
/// The dampenings tried on held-out samples: larger ones trust the measured correlations
/// less (towards rounding to nearest), which a Hessian from few vectors needs.
pub const DAMPENINGS: [f64; 4] = [0.01, 0.1, 1.0, 10.0];
const MAX_DAMPENING: f64 = 10.0;

/// The upper-triangular `U` with `H⁻¹ = Uᵀ U`, for a symmetric positive definite `h`;
/// `None` when it is not. With `J` reversing the order, `J H J = L Lᵀ` gives
/// `H⁻¹ = (J L⁻¹ J)ᵀ (J L⁻¹ J)`, and `J L⁻¹ J` is upper-triangular: one factorization and
/// one triangular inverse.
pub fn inverse_factor(h: &Array2<f64>) -> Option<Array2<f64>> {
    let n = h.nrows();
    let mut l = Array2::from_shape_fn((n, n), |(i, j)| h[[n - 1 - i, n - 1 - j]]);
    cholesky_in_place(l.as_slice_mut()?, n)?;
    let inverse_t = lower_inverse_transposed(l.as_slice()?, n);
    // U[a, b] = L⁻¹[n-1-a, n-1-b] = (L⁻¹)ᵀ[n-1-b, n-1-a].
    Some(Array2::from_shape_fn((n, n), |(a, b)| {
        inverse_t[(n - 1 - b) * n + (n - 1 - a)]
    }))
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `a` (row-major `n × n`, symmetric) replaced by its lower Cholesky factor; `None` when a
/// pivot is not positive.
fn cholesky_in_place(a: &mut [f64], n: usize) -> Option<()> {
    for j in 0..n {
        let (upto, below) = a.split_at_mut((j + 1) * n);
        let row_j = &mut upto[j * n..];
        let pivot = row_j[j] - dot(&row_j[..j], &row_j[..j]);
        if !(pivot > 0.0 && pivot.is_finite()) {
            return None;
        }
        let d = pivot.sqrt();
        row_j[j] = d;
        row_j[j + 1..].fill(0.0);
        let row_j = &*row_j;
        below.par_chunks_mut(n).for_each(|row| {
            row[j] = (row[j] - dot(&row[..j], &row_j[..j])) / d;
        });
    }
    Some(())
}

/// `(L⁻¹)ᵀ` row-major for a lower-triangular `l`: row `j` is the solution of `L x = e_j`,
/// each found by forward substitution, all in parallel.
fn lower_inverse_transposed(l: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0f64; n * n];
    out.par_chunks_mut(n.max(1)).enumerate().for_each(|(j, x)| {
        x[j] = 1.0 / l[j * n + j];
        for i in j + 1..n {
            let row = &l[i * n..i * n + i];
            x[i] = -dot(&row[j..i], &x[j..i]) / l[i * n + i];
        }
    });
    out
}

/// `h` made ready for [`inverse_factor`]: the diagonal of inputs never seen set to 1 (their
/// columns then round to nearest), and `dampening` times the mean diagonal added.
pub fn dampened(h: &Array2<f64>, dampening: f64) -> Array2<f64> {
    let mut h = h.clone();
    let n = h.nrows();
    for i in 0..n {
        if h[[i, i]] <= 0.0 {
            h[[i, i]] = 1.0;
        }
    }
    let mean = (0..n).map(|i| h[[i, i]]).sum::<f64>() / n.max(1) as f64;
    for i in 0..n {
        h[[i, i]] += dampening * mean;
    }
    h
}

/// The columns in decreasing order of `h`'s diagonal (ties in column order).
pub fn act_order(h: &Array2<f64>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..h.nrows()).collect();
    order.sort_by(|&a, &b| h[[b, b]].total_cmp(&h[[a, a]]));
    order
}

/// The inverse factor of `h` under the smallest dampening (from `dampening`, tenfold
/// steps) that makes it positive definite; `None` when none does.
pub fn stable_inverse_factor(h: &Array2<f64>, dampening: f64) -> Option<Array2<f64>> {
    let mut dampening = dampening;
    while dampening <= MAX_DAMPENING {
        if let Some(u) = inverse_factor(&dampened(h, dampening)) {
            return Some(u);
        }
        dampening *= 10.0;
    }
    None
}

/// GPTQ over `w` (`[rows, cols]`, columns already in processing order) with `u` from
/// [`inverse_factor`] of the Hessian in that order: the values each element had when its
/// column was rounded, which rounded to nearest give GPTQ's integers. `fake(row, col, v)`
/// quantizes and dequantizes `v` with that element's parameters. Rows are independent and
/// run in parallel.
pub fn round(
    w: &Array2<f64>,
    u: &Array2<f64>,
    fake: &(dyn Fn(usize, usize, f64) -> f64 + Sync),
) -> Array2<f64> {
    let (rows, cols) = w.dim();
    let mut w = w.as_standard_layout().into_owned();
    let mut targets = Array2::<f64>::zeros((rows, cols));
    let u_flat: Vec<f64> = u.iter().copied().collect();
    for b0 in (0..cols).step_by(BLOCK) {
        let b1 = (b0 + BLOCK).min(cols);
        let width = b1 - b0;
        let mut err = Array2::<f64>::zeros((rows, width));
        let (Some(w_flat), Some(t_flat), Some(e_flat)) =
            (w.as_slice_mut(), targets.as_slice_mut(), err.as_slice_mut())
        else {
            break;
        };
        w_flat
            .par_chunks_mut(cols)
            .zip(t_flat.par_chunks_mut(cols))
            .zip(e_flat.par_chunks_mut(width))
            .enumerate()
            .for_each(|(r, ((row, target), error))| {
                for i in b0..b1 {
                    let v = row[i];
                    target[i] = v;
                    let u_row = &u_flat[i * cols..(i + 1) * cols];
                    let e = (v - fake(r, i, v)) / u_row[i];
                    error[i - b0] = e;
                    for (x, f) in row[i + 1..b1].iter_mut().zip(&u_row[i + 1..b1]) {
                        *x -= e * f;
                    }
                }
            });
        if b1 < cols {
            let mut rest = w.slice_mut(s![.., b1..]);
            general_mat_mul(-1.0, &err, &u.slice(s![b0..b1, b1..]), 1.0, &mut rest);
        }
    }
    targets
}

/// `tr(E H Eᵀ)`: the output error energy a weight error `e` (`[rows, cols]`) causes on
/// inputs with Hessian `h`.
pub fn output_error(e: &Array2<f64>, h: &Array2<f64>) -> f64 {
    (e.dot(h) * e).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spd(n: usize) -> Array2<f64> {
        let x = Array2::from_shape_fn((3 * n, n), |(i, j)| ((i * 7 + j * 13) as f64 * 0.31).sin());
        x.t().dot(&x) / (3 * n) as f64
    }

    #[test]
    fn inverse_factor_gives_the_inverse() {
        for n in [1, 2, 5, 40] {
            let h = dampened(&spd(n), DAMPENING);
            let u = inverse_factor(&h).unwrap();
            for i in 0..n {
                for j in 0..i {
                    assert_eq!(u[[i, j]], 0.0, "upper-triangular");
                }
            }
            let identity = h.dot(&u.t().dot(&u));
            for i in 0..n {
                for j in 0..n {
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((identity[[i, j]] - want).abs() < 1e-8, "{n}: {identity}");
                }
            }
        }
    }

    #[test]
    fn not_positive_definite_is_refused() {
        let h = Array2::from_shape_vec((2, 2), vec![1.0, 2.0, 2.0, 1.0]).unwrap();
        assert!(inverse_factor(&h).is_none());
        // Dampening makes a merely singular Hessian usable.
        let singular = Array2::from_shape_vec((2, 2), vec![1.0, 1.0, 1.0, 1.0]).unwrap();
        assert!(inverse_factor(&singular).is_none());
        assert!(stable_inverse_factor(&singular, DAMPENING).is_some());
    }

    #[test]
    fn gptq_lowers_the_output_error_of_rounding_to_nearest() {
        // Correlated inputs, a coarse grid (step 0.25): rounding to nearest ignores the
        // correlation, GPTQ uses it.
        let (rows, n) = (8, 300);
        let h = spd(n);
        let w = Array2::from_shape_fn((rows, n), |(r, c)| ((r * 31 + c * 17) as f64 * 0.173).cos());
        let fake = |_: usize, _: usize, v: f64| (v * 4.0).round() / 4.0;
        let order = act_order(&h);
        let permuted_h = Array2::from_shape_fn((n, n), |(i, j)| h[[order[i], order[j]]]);
        let permuted_w = Array2::from_shape_fn((rows, n), |(r, i)| w[[r, order[i]]]);
        let u = stable_inverse_factor(&permuted_h, DAMPENING).unwrap();
        let targets = round(&permuted_w, &u, &fake);
        let gptq = Array2::from_shape_fn((rows, n), |(r, i)| {
            fake(r, i, targets[[r, i]]) - permuted_w[[r, i]]
        });
        let rtn = permuted_w.mapv(|v| fake(0, 0, v) - v);
        let (gptq, rtn) = (
            output_error(&gptq, &permuted_h),
            output_error(&rtn, &permuted_h),
        );
        assert!(gptq < 0.5 * rtn, "GPTQ {gptq} vs RTN {rtn}");
    }
}
