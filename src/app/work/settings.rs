//! How the studio's runs are set up, as the user edits it in the work panel: the data, the
//! execution provider, batch and sample counts, and the auto-exclude target. Plain values; the
//! panel edits them and the tasks read them.

use crate::calib::data::InputSpec;
use crate::eval::compare::task::TaskOptions;
use crate::eval::search::auto_exclude::Goal;
use crate::eval::search::evaluator::{Target, TargetKind};
use crate::runtime::EpSpec;

use super::data::{DataChoice, DataKind};

/// The settings of every run on one open model.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Calibration data.
    pub calibration: DataChoice,
    /// Evaluation data (when not the calibration data).
    pub evaluation: DataChoice,
    /// Evaluate on the calibration data.
    pub evaluate_on_calibration: bool,
    /// The user chose random evaluation data on purpose (or chose this data before, for this
    /// model): a quantized model's comparison refuses random data otherwise, as its figures
    /// would say nothing about the model.
    pub random_chosen: bool,
    /// The execution provider for every run.
    pub ep: EpSpec,
    /// Samples per batch.
    pub batch_size: usize,
    /// Calibrate on at most this many samples (0: all).
    pub max_samples: usize,
    /// Histogram bins.
    pub histogram_bins: usize,
    /// Time float and QDQ in quantize & compare.
    pub measure_latency: bool,
    /// Auto-exclude target kind.
    pub target_kind: TargetKind,
    /// Auto-exclude target value (dB or percent).
    pub target_value: f64,
    /// Auto-exclude's limit.
    pub max_excluded: usize,
    /// Auto-exclude tries 16-bit activations on a node before float.
    pub promote: bool,
    /// Output kinds chosen over the detected ones, and the ground truth to score against.
    pub task: TaskOptions,
}

impl RunSettings {
    /// The settings for a freshly opened model: random data sized to its inputs, or the given
    /// calibration/evaluation files (the bundled sample ships both).
    pub fn new(
        inputs: &[InputSpec],
        data_files: Option<(std::path::PathBuf, std::path::PathBuf)>,
    ) -> Self {
        let (calibration, evaluation, evaluate_on_calibration) = match data_files {
            Some((calib, eval)) => (DataChoice::file(calib), DataChoice::file(eval), false),
            None => (
                DataChoice::random_for(inputs),
                DataChoice::random_for(inputs),
                true,
            ),
        };
        RunSettings {
            calibration,
            evaluation,
            evaluate_on_calibration,
            random_chosen: false,
            ep: EpSpec::Cpu,
            batch_size: 1,
            max_samples: 0,
            histogram_bins: crate::calib::CalibrationConfig::default().histogram_bins,
            measure_latency: true,
            target_kind: TargetKind::SqnrDb,
            target_value: 30.0,
            max_excluded: 10,
            promote: true,
            task: TaskOptions::default(),
        }
    }

    /// The evaluation data in use.
    pub fn evaluation_choice(&self) -> &DataChoice {
        if self.evaluate_on_calibration {
            &self.calibration
        } else {
            &self.evaluation
        }
    }

    /// Why a comparison of an already-quantized model cannot run on this data yet: random
    /// data the user has not chosen.
    pub fn unchosen_random(&self) -> Option<&'static str> {
        (self.evaluation_choice().kind == DataKind::Random && !self.random_chosen).then_some(
            "This quantized model would be compared on random data, which says nothing about how it does on real inputs. Choose its evaluation data in the Data tab (the data its float model was calibrated or evaluated on), or tick 'Compare on random data' there to measure on random data anyway.",
        )
    }

    /// Stops evaluating on the calibration data: the evaluation data start as the same kind
    /// of source (the same file, to be edited) unless they were set already.
    pub fn evaluate_apart(&mut self) {
        self.evaluate_on_calibration = false;
        if self.evaluation.kind == DataKind::Random && self.calibration.kind != DataKind::Random {
            self.evaluation = self.calibration.clone();
        }
    }

    /// Gives both data choices the tokenizer in `model`'s folder, where they have none, so
    /// that text data needs only the text.
    pub fn tokenizer_beside(&mut self, model: &std::path::Path) {
        self.calibration.tokenizer_beside(model);
        self.evaluation.tokenizer_beside(model);
    }

    /// Auto-exclude's target.
    pub fn target(&self) -> Target {
        self.target_kind.target(self.target_value)
    }

    /// Auto-exclude's goal: the target, the limit, whether promotions are tried.
    pub fn goal(&self) -> Goal {
        Goal {
            target: self.target(),
            max_changed: self.max_excluded,
            promote: self.promote,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn evaluating_apart_starts_from_the_calibration_source_and_random_needs_choosing() {
        let files = Some((PathBuf::from("/d/calib.npz"), PathBuf::from("/d/eval.npz")));
        let mut chosen = RunSettings::new(&[], files);
        chosen.evaluate_on_calibration = true;
        chosen.evaluate_apart();
        assert_eq!(chosen.evaluation.path, "/d/eval.npz", "set already: kept");
        let mut random = RunSettings::new(&[], None);
        assert!(random.unchosen_random().is_some());
        random.random_chosen = true;
        assert!(random.unchosen_random().is_none());
        random.calibration = DataChoice::file(PathBuf::from("/d/calib.npz"));
        random.evaluate_apart();
        assert_eq!(
            random.evaluation.kind,
            DataKind::File,
            "the same kind of file"
        );
        assert_eq!(random.evaluation.path, "/d/calib.npz");
    }
}
