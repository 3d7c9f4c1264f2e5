//! The checks of the data chosen in the run settings: each source is checked again on a
//! thread when its choice or the batch size changes.

use crate::app::work::data::{DataCheck, DataChoice};
use crate::app::work::settings::RunSettings;
use crate::calib::data::InputSpec;

/// The checks of the calibration and evaluation data, each re-run when its settings change.
#[derive(Default)]
pub struct DataChecks {
    /// The calibration data's check.
    pub calibration: DataCheck,
    /// The evaluation data's check (unused while evaluating on the calibration data).
    pub evaluation: DataCheck,
    checked_calibration: Option<(DataChoice, usize)>,
    checked_evaluation: Option<(DataChoice, usize)>,
}

impl DataChecks {
    /// Re-checks the sources whose settings changed since their last check; true while a
    /// check runs (the window keeps polling).
    pub fn poll(&mut self, settings: &RunSettings, inputs: &[InputSpec]) -> bool {
        let batch = settings.batch_size;
        let key = (settings.calibration.clone(), batch);
        if self.checked_calibration.as_ref() != Some(&key) {
            self.calibration = DataCheck::start(&settings.calibration, inputs.to_vec(), batch);
            self.checked_calibration = Some(key);
        }
        let key = (settings.evaluation.clone(), batch);
        if !settings.evaluate_on_calibration && self.checked_evaluation.as_ref() != Some(&key) {
            self.evaluation = DataCheck::start(&settings.evaluation, inputs.to_vec(), batch);
            self.checked_evaluation = Some(key);
        }
        let calibrating = self.calibration.poll();
        let evaluating = self.evaluation.poll();
        calibrating || evaluating
    }

    /// The evaluation data's check (the calibration data's when evaluating on it).
    pub fn evaluation(&self, settings: &RunSettings) -> &DataCheck {
        if settings.evaluate_on_calibration {
            &self.calibration
        } else {
            &self.evaluation
        }
    }
}
