//! The per-element arithmetic of the output metrics, written for speed: a scan computes them
//! for every variant on every batch (PP-OCR rec: 40 positions × 6,625 classes × 32 samples
//! per variant, 659 variants), where they took a tenth of the scan's processor time.
//!
//! Both keep the exact meaning of the plain loops they replace: [`top_k`] ranks as a stable
//! descending sort by [`f32::total_cmp`] would; [`fidelity`] sums in `f64` as before, in
//! several independent partial sums (so the compiler can keep them in vector lanes).

/// Values per chunk [`top_k`] tests at once against the least value it keeps.
const CHUNK: usize = 32;

/// Partial sums [`fidelity`] keeps side by side.
const LANES: usize = 8;

/// `value`'s place in [`f32::total_cmp`]'s order as an integer: two values compare as
/// their keys do (the same transform the standard library's `total_cmp` applies).
fn order_key(value: f32) -> i32 {
    let bits = value.to_bits() as i32;
    bits ^ (((bits >> 31) as u32) >> 1) as i32
}

/// The indices of `row`'s `k` largest values, largest first, equal values in index order:
/// the first `k` of a stable descending sort by [`f32::total_cmp`]. Once `k` values are
/// kept, a chunk none of whose values beats the least of them is passed over after one
/// vectorizable maximum; in a row of scores almost every chunk is.
pub(super) fn top_k(row: &[f32], k: usize) -> Vec<usize> {
    let mut best: Vec<(i32, usize)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return Vec::new();
    }
    for (c, chunk) in row.chunks(CHUNK).enumerate() {
        if let Some(&(least, _)) = best.get(k - 1) {
            let most = chunk.iter().map(|&v| order_key(v)).fold(i32::MIN, i32::max);
            if most <= least {
                continue;
            }
        }
        for (i, &value) in chunk.iter().enumerate() {
            keep(&mut best, k, order_key(value), c * CHUNK + i);
        }
    }
    best.into_iter().map(|(_, index)| index).collect()
}

/// Keeps `(key, index)` among the `k` best in `best` (sorted, best first) when it beats
/// the least of them; after every kept key at least as large (those came first).
fn keep(best: &mut Vec<(i32, usize)>, k: usize, key: i32, index: usize) {
    if best.len() == k && best.last().is_none_or(|&(least, _)| key <= least) {
        return;
    }
    let at = best.partition_point(|&(kept, _)| kept >= key);
    best.insert(at, (key, index));
    best.truncate(k);
}

/// Sums over the elements of a reference `a` and a test `b`, in `f64`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Fidelity {
    /// Σ a².
    pub reference2: f64,
    /// Σ b².
    pub test2: f64,
    /// Σ a·b.
    pub dot: f64,
    /// Σ (a − b)².
    pub noise2: f64,
    /// The largest |a − b| (NaN differences passed over, as [`f64::max`] does).
    pub max_abs: f64,
}

/// [`Fidelity`] of `a` against `b`, element by element (the shorter one's length).
pub(super) fn fidelity(a: &[f32], b: &[f32]) -> Fidelity {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut sums = [[0.0f64; LANES]; 4];
    let mut max_abs = [0.0f64; LANES];
    let (blocks_a, blocks_b) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (rest_a, rest_b) = (blocks_a.remainder(), blocks_b.remainder());
    for (x, y) in blocks_a.zip(blocks_b) {
        for lane in 0..LANES {
            let (x, y) = (f64::from(x[lane]), f64::from(y[lane]));
            sums[0][lane] += x * x;
            sums[1][lane] += y * y;
            sums[2][lane] += x * y;
            sums[3][lane] += (x - y) * (x - y);
            max_abs[lane] = max_abs[lane].max((x - y).abs());
        }
    }
    for (lane, (&x, &y)) in rest_a.iter().zip(rest_b).enumerate() {
        let (x, y) = (f64::from(x), f64::from(y));
        sums[0][lane] += x * x;
        sums[1][lane] += y * y;
        sums[2][lane] += x * y;
        sums[3][lane] += (x - y) * (x - y);
        max_abs[lane] = max_abs[lane].max((x - y).abs());
    }
    let total = |s: &[f64; LANES]| s.iter().sum::<f64>();
    Fidelity {
        reference2: total(&sums[0]),
        test2: total(&sums[1]),
        dot: total(&sums[2]),
        noise2: total(&sums[3]),
        max_abs: max_abs.iter().copied().fold(0.0, f64::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_the_head_of_a_stable_descending_sort() {
        // Long enough for several chunks, with ties, NaNs, signed zeros and infinities
        // spread over them, the best values late as well as early.
        let mut row: Vec<f32> = (0..200)
            .map(|i| ((i * 37) % 23) as f32 * 0.5 - 3.0)
            .collect();
        row[5] = f32::NAN;
        row[70] = -0.0;
        row[71] = 0.0;
        row[150] = f32::INFINITY;
        row[151] = f32::NEG_INFINITY;
        row[199] = 100.0;
        row[40] = 100.0;
        let mut sorted: Vec<usize> = (0..row.len()).collect();
        sorted.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        for k in 0..=12 {
            let expected: Vec<usize> = sorted.iter().copied().take(k).collect();
            assert_eq!(top_k(&row, k), expected, "k = {k}");
        }
        assert_eq!(top_k(&row[..3], 5).len(), 3);
    }

    #[test]
    fn keys_order_as_total_cmp() {
        let values = [
            f32::NAN,
            -f32::NAN,
            -1.0,
            -0.0,
            0.0,
            1e-40,
            3.0,
            f32::INFINITY,
        ];
        for a in values {
            for b in values {
                assert_eq!(order_key(a).cmp(&order_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }

    #[test]
    fn fidelity_sums_as_the_element_by_element_loop() {
        let a: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let mut b: Vec<f32> = a.iter().map(|x| x * 0.98 + 0.01).collect();
        b[500] = f32::NAN;
        let mut plain = Fidelity::default();
        for (&x, &y) in a.iter().zip(&b) {
            let (x, y) = (f64::from(x), f64::from(y));
            plain.reference2 += x * x;
            plain.test2 += y * y;
            plain.dot += x * y;
            plain.noise2 += (x - y) * (x - y);
            plain.max_abs = plain.max_abs.max((x - y).abs());
        }
        let fast = fidelity(&a, &b);
        let close = |p: f64, f: f64| (p.is_nan() && f.is_nan()) || (p - f).abs() <= 1e-12 * p.abs();
        assert!(close(plain.reference2, fast.reference2));
        assert!(close(plain.test2, fast.test2), "{plain:?} {fast:?}");
        assert!(close(plain.dot, fast.dot));
        assert!(close(plain.noise2, fast.noise2));
        assert_eq!(plain.max_abs, fast.max_abs);
        // Values whose differences are exact in float32.
        let whole: Vec<f32> = (0..1003).map(|i| (i % 17) as f32 - 8.0).collect();
        let clean: Vec<f32> = whole.iter().map(|x| x + 0.5).collect();
        let sums = fidelity(&whole, &clean);
        assert_eq!(sums.noise2, 0.25 * whole.len() as f64);
        assert_eq!(sums.max_abs, 0.5);
        assert_eq!(
            sums.dot,
            whole
                .iter()
                .zip(&clean)
                .map(|(&x, &y)| f64::from(x) * f64::from(y))
                .sum::<f64>()
        );
    }
}
