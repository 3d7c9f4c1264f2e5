//! Signal-to-quantization-noise ratio in decibels: the one formula every comparison, tensor
//! error and weight search reports, with the caps made explicit where a search needs them.

/// `20 log10(‖signal‖ / ‖noise‖)` from summed squares, each norm floored at `f64::EPSILON`:
/// no noise reads as a large finite figure (about 313 dB for a unit signal), never infinity,
/// and no signal with no noise as 0 dB.
pub fn sqnr_db(signal2: f64, noise2: f64) -> f64 {
    let eps = f64::EPSILON;
    20.0 * (signal2.sqrt().max(eps) / noise2.sqrt().max(eps)).log10()
}

/// [`sqnr_db`] at most `cap` dB, and exactly `cap` when there is no noise (an exact
/// quantization, a zero signal included): a search that averages or compares SQNRs must not
/// let one exact channel outweigh every other.
pub fn capped_sqnr_db(signal2: f64, noise2: f64, cap: f64) -> f64 {
    if noise2 <= 0.0 {
        cap
    } else {
        sqnr_db(signal2, noise2).min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_times_the_noise_power_is_ten_db() {
        assert!((sqnr_db(10.0, 1.0) - 10.0).abs() < 1e-12);
        assert!((sqnr_db(1.0, 0.01) - 20.0).abs() < 1e-12);
        assert!(sqnr_db(1.0, 0.0).is_finite() && sqnr_db(1.0, 0.0) > 300.0);
        assert_eq!(sqnr_db(0.0, 0.0), 0.0);
        assert_eq!(capped_sqnr_db(1.0, 0.0, 60.0), 60.0);
        assert_eq!(capped_sqnr_db(0.0, 0.0, 60.0), 60.0);
        assert_eq!(capped_sqnr_db(1e12, 1.0, 60.0), 60.0);
        assert!((capped_sqnr_db(10.0, 1.0, 60.0) - 10.0).abs() < 1e-12);
    }
}
