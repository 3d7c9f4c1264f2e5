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
pub(crate) fn top_k(row: &[f32], k: usize) -> Vec<usize> {
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
pub(crate) struct Fidelity {
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

/// [`Fidelity`] of `a` against `b`, element by element (the shorter one's length), in
/// [`LANES`] partial sums per quantity added up at the end. Runs on AVX2 where the CPU has it
/// (detected at run time: the release build targets plain x86-64, whose compiled loop kept
/// its lanes on the stack and took 3 % of a PP-OCR rec scan's time, measured with perf): the
/// same f64 operations in the same order per lane, so the sums are equal bit for bit.
pub(crate) fn fidelity(a: &[f32], b: &[f32]) -> Fidelity {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let (blocks_a, rest_a) = a.as_chunks::<LANES>();
    let (blocks_b, rest_b) = b.as_chunks::<LANES>();
    let mut lanes = block_lanes(blocks_a, blocks_b);
    for (lane, (&x, &y)) in rest_a.iter().zip(rest_b).enumerate() {
        lanes.add(lane, x, y);
    }
    lanes.total()
}

/// The lanes of whole blocks, element `i` of each in lane `i`: on AVX2 where the CPU has it.
fn block_lanes(a: &[[f32; LANES]], b: &[[f32; LANES]]) -> Lanes {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above; nothing else is required.
        return unsafe { lanes_avx2(a, b) };
    }
    let mut lanes = Lanes::default();
    lanes.add_blocks(a, b);
    lanes
}

/// Per-lane partial sums of [`Fidelity`]: Σ a², Σ b², Σ a·b, Σ (a − b)², and the largest
/// |a − b|.
#[derive(Default)]
struct Lanes {
    sums: [[f64; LANES]; 4],
    max_abs: [f64; LANES],
}

impl Lanes {
    /// Adds one element pair into `lane`.
    #[inline(always)]
    fn add(&mut self, lane: usize, x: f32, y: f32) {
        let (x, y) = (f64::from(x), f64::from(y));
        self.sums[0][lane] += x * x;
        self.sums[1][lane] += y * y;
        self.sums[2][lane] += x * y;
        self.sums[3][lane] += (x - y) * (x - y);
        self.max_abs[lane] = self.max_abs[lane].max((x - y).abs());
    }

    /// Adds whole blocks, element `i` of each into lane `i`.
    fn add_blocks(&mut self, a: &[[f32; LANES]], b: &[[f32; LANES]]) {
        for (x, y) in a.iter().zip(b) {
            for lane in 0..LANES {
                self.add(lane, x[lane], y[lane]);
            }
        }
    }

    /// The lanes added up.
    fn total(&self) -> Fidelity {
        let total = |s: &[f64; LANES]| s.iter().sum::<f64>();
        Fidelity {
            reference2: total(&self.sums[0]),
            test2: total(&self.sums[1]),
            dot: total(&self.sums[2]),
            noise2: total(&self.sums[3]),
            max_abs: self.max_abs.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// [`Lanes::add_blocks`] from empty lanes with the eight lanes of each quantity in two AVX2
/// vectors of four f64: lanes 0-3 from a block's first half, 4-7 from its second.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lanes_avx2(a: &[[f32; LANES]], b: &[[f32; LANES]]) -> Lanes {
    use std::arch::x86_64::{
        __m256d, _mm_loadu_ps, _mm256_add_pd, _mm256_andnot_pd, _mm256_cvtps_pd, _mm256_max_pd,
        _mm256_mul_pd, _mm256_set1_pd, _mm256_setzero_pd, _mm256_storeu_pd, _mm256_sub_pd,
    };
    const _: () = assert!(LANES == 8, "two AVX2 vectors hold eight f64 lanes");
    let zero = _mm256_setzero_pd();
    let sign = _mm256_set1_pd(-0.0);
    let mut sums = [[zero; 2]; 4];
    let mut max_abs = [zero; 2];
    for (x, y) in a.iter().zip(b) {
        for half in 0..2 {
            // SAFETY: each block holds eight float32 values; each load reads four of them,
            // from its first or its second half.
            let (x, y): (__m256d, __m256d) = unsafe {
                (
                    _mm256_cvtps_pd(_mm_loadu_ps(x.as_ptr().add(4 * half))),
                    _mm256_cvtps_pd(_mm_loadu_ps(y.as_ptr().add(4 * half))),
                )
            };
            let d = _mm256_sub_pd(x, y);
            sums[0][half] = _mm256_add_pd(sums[0][half], _mm256_mul_pd(x, x));
            sums[1][half] = _mm256_add_pd(sums[1][half], _mm256_mul_pd(y, y));
            sums[2][half] = _mm256_add_pd(sums[2][half], _mm256_mul_pd(x, y));
            sums[3][half] = _mm256_add_pd(sums[3][half], _mm256_mul_pd(d, d));
            // |d| by clearing the sign bit; a NaN |d| leaves the lane as it is, as
            // `f64::max` passes a NaN over (`max_pd` returns its second operand then).
            max_abs[half] = _mm256_max_pd(_mm256_andnot_pd(sign, d), max_abs[half]);
        }
    }
    let mut lanes = Lanes::default();
    let store = |to: &mut [f64; LANES], from: &[__m256d; 2]| {
        // SAFETY: each half of the array holds four f64, the four each store writes.
        unsafe {
            _mm256_storeu_pd(to.as_mut_ptr(), from[0]);
            _mm256_storeu_pd(to.as_mut_ptr().add(4), from[1]);
        }
    };
    for (to, from) in lanes.sums.iter_mut().zip(&sums) {
        store(to, from);
    }
    store(&mut lanes.max_abs, &max_abs);
    lanes
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
    fn the_lanes_as_fidelity_sums_them_equal_the_portable_loops_bit_for_bit() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let mut b: Vec<f32> = a.iter().map(|x| x * 0.98 + 0.01).collect();
        let blocks = |v: &[f32]| v.as_chunks::<LANES>().0.to_vec();
        let bits = |l: &Lanes| {
            (
                l.sums.map(|s| s.map(f64::to_bits)),
                l.max_abs.map(f64::to_bits),
            )
        };
        // A NaN in the last block: a max that kept it would end its lane on NaN.
        for nan in [None, Some(996)] {
            if let Some(i) = nan {
                b[i] = f32::NAN;
            }
            let (x, y) = (blocks(&a), blocks(&b));
            let mut portable = Lanes::default();
            portable.add_blocks(&x, &y);
            assert_eq!(
                bits(&block_lanes(&x, &y)),
                bits(&portable),
                "NaN at {nan:?}"
            );
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
