//! Carrying out the quantization commands (calibrate, quantize & compare, sensitivity,
//! auto-exclude, save, statistics files, runtime install) and taking their results when their
//! tasks finish. Each builds a request from the open model's state and starts a task from
//! [`crate::app::work::tasks`]; the steps themselves are [`crate::workflow`]'s.

use std::path::Path;
use std::sync::Arc;

use crate::app::command::Command;
use crate::app::command::WorkCommand;
use crate::app::document::Document;
use crate::app::runtime_status::RuntimeStatus;
use crate::app::studio::Studio;
use crate::app::window::PathPurpose;
use crate::app::work::data::{DataCheck, DataKind};
use crate::app::work::task::TaskWork;
use crate::app::work::{FloatModel, TaskError, TaskKind, TaskOutput, Work, heat, tasks};
use crate::app::work_panel::{SaveDialog, WorkTab};
use crate::calib::CalibrationConfig;
use crate::runtime::EpState;
use crate::sample::SAMPLE_STEM;
use crate::workflow::compare::{CompareRequest, STUDIO_LATENCY};
use crate::workflow::quantize::{SaveRequest, companion, default_output, needs_statistics};
use crate::workflow::reference::EvalSetup;
use crate::workflow::statistics;

/// A failure to show: a title and the cause.
type Failure = (String, String);

fn no_model() -> Failure {
    ("No model is open".into(), "Open a model first.".into())
}

/// The float model runs are measured against: the open model, or for a model that is
/// quantized already the float model chosen for it.
fn float_model(doc: &Document) -> Result<&crate::model::Model, Failure> {
    if !doc.is_quantized() {
        return Ok(&doc.opened.model);
    }
    doc.work
        .float_model
        .as_ref()
        .map(|f| &f.model)
        .ok_or_else(|| {
            (
                "Choose the float model first".into(),
                "This model is quantized already: it is compared against the float model it was \
             made from. Choose that model in Results (Float model…)."
                    .into(),
            )
        })
}

/// Refuses work that quantizes the open model when it is quantized already.
fn float_only(doc: &Document, what: &str) -> Result<(), Failure> {
    if doc.is_quantized() {
        return Err((
            format!("{what} needs a float model"),
            format!(
                "{} is quantized already. {what} works on the float model: open that one to \
                 quantize it again.",
                doc.opened.source.label()
            ),
        ));
    }
    Ok(())
}

/// Starts `work` as the open model's task.
fn start(work: &mut Work, kind: TaskKind, body: TaskWork) -> Result<(), Failure> {
    work.task
        .start(kind, body)
        .map_err(|e| (format!("{} could not start", kind.label()), e))
}

impl Studio {
    /// Carries out one quantization command.
    pub(crate) fn apply_work(&mut self, command: WorkCommand) {
        if let WorkCommand::InstallRuntime(flavor) = command {
            return self.install_runtime(flavor);
        }
        if self.doc.is_none() {
            self.window.status = "Open a model first".to_owned();
            return;
        }
        let result = match command {
            WorkCommand::Calibrate => self.calibrate(),
            WorkCommand::QuantizeCompare => self.quantize_compare(),
            WorkCommand::ShowSample(sample) => self.show_sample(sample),
            WorkCommand::ScanSensitivity => self.scan_sensitivity(),
            WorkCommand::AutoExclude => self.auto_exclude(),
            WorkCommand::ChooseWeightRanges => self.choose_weight_ranges(),
            WorkCommand::TuneLatency => self.tune_latency(),
            WorkCommand::CancelTask => {
                if let Some(doc) = self.doc.as_ref() {
                    doc.work.task.cancel();
                }
                self.window.status = "Cancelling…".to_owned();
                Ok(())
            }
            WorkCommand::SaveStatisticsDialog => {
                self.statistics_dialog(true);
                Ok(())
            }
            WorkCommand::LoadStatisticsDialog => {
                self.statistics_dialog(false);
                Ok(())
            }
            WorkCommand::SaveStatistics(path) => self.save_statistics(&path),
            WorkCommand::LoadStatistics(path) => self.load_statistics(&path),
            WorkCommand::SaveQuantizedDialog => self.open_save_window(false),
            WorkCommand::SaveQuantized => self.save_quantized(),
            WorkCommand::BrowseData { evaluation, kind } => {
                self.browse_data(evaluation, kind);
                Ok(())
            }
            WorkCommand::BrowseTokenizer { evaluation } => {
                self.browse_tokenizer(evaluation);
                Ok(())
            }
            WorkCommand::ChooseFloatModel => {
                self.choose_float_model();
                Ok(())
            }
            WorkCommand::SetFloatModel(path) => self.set_float_model(path),
            // Taken above, before a model is needed.
            WorkCommand::InstallRuntime(_) => Ok(()),
            edit @ (WorkCommand::ApplyAlternative(_)
            | WorkCommand::SetMethod(_)
            | WorkCommand::SetTensorOverride(..)
            | WorkCommand::ShowHistogram(_)
            | WorkCommand::RevealNodes(_)
            | WorkCommand::SetDataPath { .. }
            | WorkCommand::SetTokenizer { .. }
            | WorkCommand::SetHeatMap { .. }
            | WorkCommand::SetOutputKind { .. }
            | WorkCommand::CloseSaveWindow) => {
                self.edit_work(edit);
                Ok(())
            }
        };
        if let Some(doc) = self.doc.as_mut() {
            doc.refresh();
        }
        if let Err((title, detail)) = result {
            self.fail(title, detail);
        }
    }

    /// The commands that only change the open model's state (recipe, panel, data paths);
    /// [`Studio::apply_work`] hands over these alone.
    fn edit_work(&mut self, command: WorkCommand) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        let status = match command {
            WorkCommand::ApplyAlternative(index) => apply_alternative(doc, index),
            WorkCommand::SetMethod(method) => {
                doc.planned.editor.change(|r| r.calibration_method = method);
                Some(format!("Calibration method: {}", method.name()))
            }
            WorkCommand::SetTensorOverride(tensor, value) => {
                let cleared = value.is_none();
                doc.planned.editor.change(|r| match value {
                    Some(v) => {
                        r.tensor_overrides.insert(tensor.clone(), v);
                    }
                    None => {
                        r.tensor_overrides.remove(&tensor);
                    }
                });
                Some(if cleared {
                    format!("{tensor}: back to the recipe's method")
                } else {
                    format!("{tensor}: override set (in the recipe)")
                })
            }
            WorkCommand::ShowHistogram(tensor) => {
                doc.view.panel.histogram_tensor = Some(tensor);
                doc.view.panel.tab = WorkTab::Histogram;
                None
            }
            WorkCommand::RevealNodes(names) => {
                let ids: Vec<_> = names
                    .iter()
                    .filter_map(|n| doc.opened.graph.node_by_name(n).map(|node| node.id))
                    .collect();
                if let Some(first) = ids.first() {
                    doc.view.canvas.centre_on(*first);
                }
                doc.view.selection = ids;
                None
            }
            WorkCommand::SetDataPath { evaluation, path } => {
                let settings = &mut doc.work.settings;
                let choice = if evaluation {
                    settings.evaluate_on_calibration = false;
                    &mut settings.evaluation
                } else {
                    &mut settings.calibration
                };
                choice.path = path.display().to_string();
                if choice.kind == DataKind::Random {
                    choice.kind = crate::app::work::data::kind_of(&path);
                }
                None
            }
            WorkCommand::SetTokenizer { evaluation, path } => {
                let settings = &mut doc.work.settings;
                let choice = if evaluation {
                    &mut settings.evaluation
                } else {
                    &mut settings.calibration
                };
                choice.tokenizer = path.display().to_string();
                None
            }
            WorkCommand::SetHeatMap {
                shown,
                kind,
                threshold_db,
            } => {
                doc.view.panel.heat_map = shown;
                doc.view.panel.heat_threshold_db = threshold_db;
                if doc.view.panel.heat_kind != kind {
                    doc.view.panel.heat_kind = kind;
                    doc.view.heat = node_heat(doc);
                }
                None
            }
            WorkCommand::SetOutputKind { output, kind } => {
                let kinds = &mut doc.work.settings.task.kinds;
                let said = match kind {
                    Some(kind) => {
                        kinds.insert(output.clone(), kind);
                        kind.label()
                    }
                    None => {
                        kinds.remove(&output);
                        "the detected kind"
                    }
                };
                Some(format!(
                    "Output {output} is read as {said}: Quantize & compare (F5) measures it so."
                ))
            }
            WorkCommand::CloseSaveWindow => {
                doc.view.panel.save_dialog = None;
                self.exit.after_save = false;
                None
            }
            // Carried out by `apply_work` itself.
            _ => None,
        };
        if let Some(status) = status {
            self.window.status = status;
        }
    }

    fn calibrate(&mut self) -> Result<(), Failure> {
        let ep_problem = self.ep_problem();
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        float_only(doc, "Calibration")?;
        doc.view.panel.tab = WorkTab::Calibrate;
        if let Some(problem) = ep_problem {
            return Err(("Calibration cannot run on this provider".into(), problem));
        }
        let prepared = doc.planned.prepared.clone().map_err(|e| {
            (
                "The model cannot be prepared for quantization".to_owned(),
                e,
            )
        })?;
        let settings = &doc.work.settings;
        if let DataCheck::Problem(problem) = &doc.work.checks.calibration {
            return Err((
                "The calibration data does not fit the model".into(),
                problem.clone(),
            ));
        }
        let data = settings
            .calibration
            .spec()
            .map_err(|e| ("The calibration data is not set".to_owned(), e))?;
        let config = CalibrationConfig {
            execution_providers: vec![settings.ep.clone()],
            batch_size: settings.batch_size,
            max_samples: (settings.max_samples > 0).then_some(settings.max_samples),
            histogram_bins: settings.histogram_bins,
            ..CalibrationConfig::default()
        };
        let ep = settings.ep.to_string();
        let body = tasks::calibrate(prepared, doc.planned.editor.recipe().clone(), data, config);
        start(&mut doc.work, TaskKind::Calibrate, body)?;
        self.window.status = format!("Calibrating on {ep}…");
        self.remember_data();
        Ok(())
    }

    /// Why the chosen provider cannot run here, when the runtime probe says so.
    fn ep_problem(&self) -> Option<String> {
        let doc = self.doc.as_ref()?;
        let RuntimeStatus::Ready { eps, .. } = &self.runtime else {
            return None;
        };
        let status = eps.iter().find(|s| s.ep == doc.work.settings.ep)?;
        match &status.state {
            EpState::Ready => None,
            EpState::Unavailable(reason) => {
                Some(format!("{} cannot run here: {reason}", status.ep))
            }
            EpState::NotInLibrary(hint) => Some(format!(
                "{} is not in the loaded ONNX Runtime build: {hint}",
                status.ep
            )),
        }
    }

    /// What evaluating the current recipe needs, from the open model's state.
    fn eval_setup(&self) -> Result<EvalSetup, Failure> {
        let doc = self.doc.as_ref().ok_or_else(no_model)?;
        let work = &doc.work;
        let recipe = doc.planned.editor.recipe().clone();
        let stats = match &work.results.stats {
            Some(stats) => stats.clone(),
            None if !needs_statistics(&recipe) || doc.is_quantized() => {
                Arc::new(Default::default())
            }
            None => {
                return Err((
                    "Calibrate first".into(),
                    "This runs models quantized from the cached calibration statistics: run Calibrate (Ctrl+R) or load statistics first.".into(),
                ));
            }
        };
        if let DataCheck::Problem(problem) = work.checks.evaluation(&work.settings) {
            return Err((
                "The evaluation data does not fit the model".into(),
                problem.clone(),
            ));
        }
        let data = work
            .settings
            .evaluation_choice()
            .spec()
            .map_err(|e| ("The evaluation data is not set".to_owned(), e))?;
        Ok(EvalSetup {
            model: float_model(doc)?.clone(),
            stats,
            recipe,
            data,
            eps: vec![work.settings.ep.clone()],
            batch_size: work.settings.batch_size,
            task: work.settings.task.clone(),
            reference: work.results.reference(),
        })
    }

    fn quantize_compare(&mut self) -> Result<(), Failure> {
        if let Some(problem) = self.ep_problem() {
            return Err(("Cannot compare on this provider".into(), problem));
        }
        let setup = self.eval_setup()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        if let Some(why) = doc
            .is_quantized()
            .then(|| doc.work.settings.unchosen_random())
            .flatten()
        {
            return Err(("Choose the evaluation data".into(), why.into()));
        }
        let given = doc
            .is_quantized()
            .then(|| Arc::new(doc.opened.model.clone()));
        self.window.status = match given {
            Some(_) => "Comparing the quantized model with its float model…",
            None => "Quantizing from the cached statistics and comparing…",
        }
        .to_owned();
        let request = CompareRequest {
            setup,
            latency: doc.work.settings.measure_latency.then_some(STUDIO_LATENCY),
            sample: doc.view.panel.sample,
            given,
        };
        let body = tasks::quantize_and_compare(request);
        start(&mut doc.work, TaskKind::Compare, body)?;
        self.compare_started();
        self.remember_data();
        Ok(())
    }

    fn show_sample(&mut self, sample: usize) -> Result<(), Failure> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        doc.view.panel.sample = sample;
        let Some(comparison) = doc.work.results.comparison.as_ref() else {
            return Ok(());
        };
        if comparison.sample.0 == sample {
            return Ok(());
        }
        let body = tasks::sample_outputs(
            float_model(doc)?.clone(),
            comparison.quantized.clone(),
            comparison.reference.clone(),
            sample,
        );
        start(&mut doc.work, TaskKind::Sample, body)
    }

    fn scan_sensitivity(&mut self) -> Result<(), Failure> {
        float_only(
            self.doc.as_ref().ok_or_else(no_model)?,
            "A sensitivity scan",
        )?;
        let setup = self.eval_setup()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        doc.view.panel.tab = WorkTab::Sensitivity;
        start(&mut doc.work, TaskKind::Sensitivity, tasks::scan(setup))
    }

    fn auto_exclude(&mut self) -> Result<(), Failure> {
        float_only(self.doc.as_ref().ok_or_else(no_model)?, "Auto-exclude")?;
        let setup = self.eval_setup()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        doc.view.panel.tab = WorkTab::Sensitivity;
        let work = &mut doc.work;
        let body = tasks::auto_exclude(setup, work.results.scanned.clone(), work.settings.goal());
        start(work, TaskKind::AutoExclude, body)
    }

    fn choose_weight_ranges(&mut self) -> Result<(), Failure> {
        float_only(
            self.doc.as_ref().ok_or_else(no_model)?,
            "Choosing weight ranges",
        )?;
        let setup = self.eval_setup()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        start(
            &mut doc.work,
            TaskKind::WeightRanges,
            tasks::weight_ranges(setup),
        )
    }

    fn tune_latency(&mut self) -> Result<(), Failure> {
        float_only(self.doc.as_ref().ok_or_else(no_model)?, "Tuning for speed")?;
        let setup = self.eval_setup()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        start(
            &mut doc.work,
            TaskKind::TuneLatency,
            tasks::tune_latency(setup),
        )
    }

    fn statistics_dialog(&mut self, save: bool) {
        let default = self
            .doc
            .as_ref()
            .and_then(|d| {
                d.opened
                    .source
                    .path()
                    .map(|p| p.with_extension("stats.json"))
            })
            .unwrap_or_else(|| std::path::PathBuf::from(format!("{SAMPLE_STEM}.stats.json")));
        let purpose = if save {
            PathPurpose::SaveStatistics
        } else {
            PathPurpose::LoadStatistics
        };
        let picked = self.native_dialog(purpose, move || {
            let dialog = rfd::FileDialog::new()
                .set_title(if save {
                    "Save the calibration statistics"
                } else {
                    "Load calibration statistics (qdq-studio, onnxruntime or TensorRT cache)"
                })
                .add_filter("Statistics", &["json", "stats", "cache"])
                .add_filter("All files", &["*"]);
            if save {
                let mut dialog = dialog;
                if let Some(folder) = default.parent().filter(|p| !p.as_os_str().is_empty()) {
                    dialog = dialog.set_directory(folder);
                }
                if let Some(name) = default.file_name() {
                    dialog = dialog.set_file_name(name.to_string_lossy());
                }
                dialog.save_file()
            } else {
                dialog.pick_file()
            }
        });
        if let Some(path) = picked {
            self.push(if save {
                Command::Work(WorkCommand::SaveStatistics(path))
            } else {
                Command::Work(WorkCommand::LoadStatistics(path))
            });
        }
    }

    fn save_statistics(&mut self, path: &Path) -> Result<(), Failure> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let Some(stats) = doc.work.results.stats.clone() else {
            return Err((
                "No statistics to save".into(),
                "Calibrate first (Ctrl+R).".into(),
            ));
        };
        doc.run_files()
            .output("the statistics", path)
            .check()
            .map_err(|e| ("The statistics were not saved".to_owned(), e.chain()))?;
        statistics::save(&stats, path)
            .map_err(|e| ("The statistics were not saved".to_owned(), e.chain()))?;
        doc.work.results.stats_saved = true;
        self.window.status = format!("Statistics saved to {}", path.display());
        Ok(())
    }

    /// Loads statistics of any supported format: qdq-studio's, onnxruntime's or TensorRT's
    /// calibration cache.
    fn load_statistics(&mut self, path: &Path) -> Result<(), Failure> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let failed = |e: crate::workflow::WorkflowError| {
            ("The statistics could not be loaded".to_owned(), e.chain())
        };
        let (stats, format) = statistics::load(path).map_err(failed)?;
        statistics::check_for(&stats, &doc.opened.graph, path).map_err(|e| {
            (
                "These statistics are for another model".to_owned(),
                e.chain(),
            )
        })?;
        let count = stats.tensors.len();
        doc.work.results.statistics_replaced(stats, true);
        self.window.status = format!(
            "Loaded statistics of {count} tensors from {} ({})",
            path.display(),
            format.describe()
        );
        Ok(())
    }

    fn open_save_window(&mut self, then_quit: bool) -> Result<(), Failure> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        float_only(doc, "Saving a quantized model")?;
        let path = doc
            .work
            .results
            .saved_model
            .clone()
            .unwrap_or_else(|| default_output(doc.opened.source.path(), SAMPLE_STEM));
        doc.view.panel.save_dialog = Some(SaveDialog {
            path: path.display().to_string(),
            external_data: false,
            companions: true,
            then_quit,
        });
        Ok(())
    }

    fn save_quantized(&mut self) -> Result<(), Failure> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let Some(dialog) = doc.view.panel.save_dialog.clone() else {
            return Ok(());
        };
        let request = save_request(doc, &dialog)?;
        start(&mut doc.work, TaskKind::Save, tasks::save(request))?;
        doc.view.panel.save_dialog = None;
        self.exit.after_save = dialog.then_quit;
        Ok(())
    }

    fn browse_data(&mut self, evaluation: bool, kind: DataKind) {
        let purpose = if evaluation {
            PathPurpose::EvaluationData
        } else {
            PathPurpose::CalibrationData
        };
        let picked = self.native_dialog(purpose, move || {
            let dialog = rfd::FileDialog::new().set_title(if evaluation {
                "Evaluation data"
            } else {
                "Calibration data"
            });
            match kind {
                DataKind::Images | DataKind::TestData => dialog.pick_folder(),
                DataKind::Text => dialog
                    .add_filter("Text", &["txt", "md"])
                    .add_filter("All files", &["*"])
                    .pick_file(),
                DataKind::File | DataKind::Random => dialog
                    .add_filter("NumPy arrays", &["npz", "npy"])
                    .add_filter("All files", &["*"])
                    .pick_file(),
            }
        });
        if let Some(path) = picked {
            self.push(Command::Work(WorkCommand::SetDataPath { evaluation, path }));
        }
    }

    fn browse_tokenizer(&mut self, evaluation: bool) {
        let picked = self.native_dialog(PathPurpose::Tokenizer(evaluation), || {
            rfd::FileDialog::new()
                .set_title("The model's tokenizer")
                .add_filter("Tokenizer", &["json"])
                .pick_file()
        });
        if let Some(path) = picked {
            self.push(Command::Work(WorkCommand::SetTokenizer {
                evaluation,
                path,
            }));
        }
    }

    fn choose_float_model(&mut self) {
        let picked = self.native_dialog(PathPurpose::FloatModel, || {
            rfd::FileDialog::new()
                .set_title("The float model this quantized model was made from")
                .add_filter("ONNX model", &["onnx"])
                .pick_file()
        });
        if let Some(path) = picked {
            self.push(Command::Work(WorkCommand::SetFloatModel(path)));
        }
    }

    /// Reads the float model an open quantized model is compared against, checks the two fit
    /// (same inputs and outputs) and forgets results measured against another one.
    fn set_float_model(&mut self, path: std::path::PathBuf) -> Result<(), Failure> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let refused = |e: String| ("This float model cannot be used".to_owned(), e);
        let model = crate::model::Model::load(&path).map_err(|e| refused(e.to_string()))?;
        crate::eval::compare::check_comparable(
            &model,
            &doc.opened.model,
            &doc.opened.source.label(),
        )
        .map_err(|e| refused(e.to_string()))?;
        let label = crate::app::document::Source::File(path.clone()).label();
        doc.work.float_model = Some(FloatModel { path, model });
        doc.work.results.comparison = None;
        doc.view.heat = None;
        self.window.status = format!("{label} is the float model: compare with F5");
        Ok(())
    }

    fn install_runtime(&mut self, flavor: crate::runtime::Flavor) {
        let Some(doc) = self.doc.as_mut() else {
            self.window.status = "Open a model first".to_owned();
            return;
        };
        let body = tasks::install_runtime(flavor);
        if let Err((title, detail)) = start(&mut doc.work, TaskKind::InstallRuntime, body) {
            self.fail(title, detail);
        }
    }

    /// Polls the data checks and the running task; takes a finished task's result.
    pub(crate) fn poll_work(&mut self, ctx: &egui::Context) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        let checking = doc.work.poll_checks();
        let finished = doc.work.task.poll();
        if checking || doc.work.busy() {
            ctx.request_repaint_after(std::time::Duration::from_millis(50));
        }
        let Some((kind, result)) = finished else {
            return;
        };
        ctx.request_repaint();
        match result {
            Ok(output) => self.take_output(output),
            Err(TaskError::Cancelled) => {
                self.window.status = format!("{} cancelled; nothing was changed", kind.label());
                self.exit.after_save = false;
            }
            Err(TaskError::Failed(cause)) => {
                self.exit.after_save = false;
                // The status bar said the task was running; it must not go on saying so.
                self.window.status = format!("{} failed; nothing was changed", kind.label());
                self.fail(format!("{} failed", kind.label()), cause);
            }
        }
    }

    fn take_output(&mut self, output: TaskOutput) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        let mut open_next = None;
        let mut saved_model = None;
        let status = match output {
            TaskOutput::Calibrated(stats) => {
                let status = calibrated_status(&stats);
                doc.work.results.statistics_replaced(*stats, false);
                doc.refresh();
                if doc.view.panel.histogram_tensor.is_none() {
                    doc.view.panel.histogram_tensor = first_tensor(doc);
                }
                doc.view.panel.tab = WorkTab::Histogram;
                status
            }
            TaskOutput::Compared(comparison) => {
                let verb = if doc.is_quantized() {
                    "Compared"
                } else {
                    "Quantized"
                };
                let status = format!(
                    "{verb} {} nodes · worst output SQNR {:.2} dB · {:.0} ms",
                    comparison.quantized_nodes.len(),
                    comparison
                        .outputs
                        .iter()
                        .map(|m| m.sqnr_db)
                        .fold(f64::INFINITY, f64::min),
                    comparison.timings.total_ms
                );
                doc.work.results.comparison = Some(*comparison);
                doc.view.heat = node_heat(doc);
                doc.view.panel.heat_map = true;
                doc.view.panel.tab = WorkTab::Results;
                doc.view.panel.output_images = None;
                doc.refresh();
                self.heat_map_installed();
                status
            }
            TaskOutput::Sample(sample, pairs) => {
                if let Some(c) = doc.work.results.comparison.as_mut() {
                    c.sample = (sample, pairs);
                }
                doc.view.panel.output_images = None;
                return;
            }
            TaskOutput::Scanned(scanned) => {
                let s = &scanned.sensitivity;
                let status = match s.partial_note() {
                    Some(partial) => format!("Sensitivity scan cancelled: {partial}, kept"),
                    None => format!(
                        "Scanned {} nodes: baseline output SQNR {:.2} dB",
                        s.nodes.len(),
                        s.baseline_db
                    ),
                };
                doc.work.results.scanned = Some(*scanned);
                status
            }
            TaskOutput::AutoExcluded(result) => {
                let (result, scanned) = *result;
                let status = format!(
                    "Auto-exclude: {} (Ctrl+Z undoes)",
                    crate::app::work::auto_exclude_summary(&result)
                );
                doc.work.results.scanned = Some(scanned);
                doc.planned.editor.replace(result.recipe.clone());
                doc.work.results.auto_excluded = Some(result);
                doc.refresh();
                status
            }
            TaskOutput::WeightRanges(chosen) if !chosen.changed() => {
                format!(
                    "Weight ranges: {}; the recipe is unchanged",
                    chosen.summary()
                )
            }
            TaskOutput::WeightRanges(chosen) => {
                let status = format!("Weight ranges: {} (Ctrl+Z undoes)", chosen.summary());
                doc.planned.editor.replace(chosen.recipe.clone());
                doc.refresh();
                status
            }
            TaskOutput::LatencyTuning(tuned) if tuned.left_out().is_empty() => {
                format!("{}; the recipe is unchanged", tuned.summary())
            }
            TaskOutput::LatencyTuning(tuned) => {
                let status = format!("{} (Ctrl+Z undoes)", tuned.summary());
                doc.planned.editor.replace(tuned.recipe.clone());
                doc.refresh();
                status
            }
            TaskOutput::Saved(saved) => {
                let status = saved_status(&saved);
                saved_model = Some(saved.report.model_path.clone());
                doc.work.results.saved_model = Some(saved.report.model_path.clone());
                doc.work.results.saved_recipe = Some(saved.recipe.clone());
                if saved.recipe_file.is_some() {
                    // The recipe panel names the file the recipe now lives in.
                    doc.planned.recipe_path.clone_from(&saved.recipe_file);
                }
                if std::mem::take(&mut self.exit.after_save) {
                    match self.exit.open_after.take() {
                        Some(source) => open_next = Some(source),
                        None => {
                            self.exit.confirmed = true;
                            self.exit.quit = true;
                        }
                    }
                }
                status
            }
            TaskOutput::Installed(version, path) => self.runtime_installed(&version, &path),
        };
        self.window.status = status;
        if let Some(path) = saved_model {
            self.remember_saved(&path);
        }
        if let Some(source) = open_next {
            self.open(source);
        }
    }

    /// ONNX Runtime is one library per process: with none loaded yet (first run), the new
    /// one is picked up now; otherwise it takes a restart.
    fn runtime_installed(&mut self, version: &str, path: &Path) -> String {
        if matches!(self.runtime, RuntimeStatus::Missing(_)) {
            self.runtime = RuntimeStatus::probe();
            format!("ONNX Runtime {version} installed at {}", path.display())
        } else {
            format!(
                "ONNX Runtime {version} installed at {}: restart qdq-studio to use it",
                path.display()
            )
        }
    }

    /// Quit: asks first when there is unsaved work.
    pub(crate) fn request_quit(&mut self) {
        self.exit.open_after = None;
        if self.has_unsaved_work() {
            self.exit.ask_unsaved = true;
        } else {
            self.exit.quit = true;
        }
    }

    /// True when quitting would lose work.
    pub fn has_unsaved_work(&self) -> bool {
        self.doc.as_ref().is_some_and(|d| {
            d.work
                .results
                .unsaved(d.planned.editor.recipe(), d.planned.editor.edited())
        })
    }

    /// The window's close button: cancelled and asked about when there is unsaved work;
    /// otherwise any running task is cancelled as the window closes.
    pub(crate) fn handle_close_request(&mut self, ctx: &egui::Context) {
        if !ctx.input(|i| i.viewport().close_requested()) {
            return;
        }
        if !self.exit.confirmed && self.has_unsaved_work() {
            ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
            self.exit.open_after = None;
            self.exit.ask_unsaved = true;
            return;
        }
        if let Some(doc) = self.doc.as_ref() {
            doc.work.task.cancel();
        }
    }

    /// Opens the save window, going on (quitting, or opening the model asked for) once the
    /// save succeeds (the unsaved-work prompt).
    pub(crate) fn save_then_go_on(&mut self) {
        self.exit.ask_unsaved = false;
        if let Err((title, detail)) = self.open_save_window(true) {
            self.fail(title, detail);
        }
    }
}

/// The recipe-wide change at `index` of the auto-exclude result, into the recipe.
fn apply_alternative(doc: &mut Document, index: usize) -> Option<String> {
    let alternative = doc
        .work
        .results
        .auto_excluded
        .as_ref()
        .and_then(|r| r.alternatives.get(index))?;
    let change = alternative.change.clone();
    doc.planned.editor.replace(alternative.recipe.clone());
    Some(format!("Recipe: {change} (Ctrl+Z undoes)"))
}

/// What the save window asks for, as a save request: never over the input, and with
/// statistics unless the mode needs none.
fn save_request(doc: &Document, dialog: &SaveDialog) -> Result<SaveRequest, Failure> {
    let path = std::path::PathBuf::from(dialog.path.trim());
    if dialog.path.trim().is_empty() {
        return Err(("Choose where to save".into(), "the path is empty".into()));
    }
    let recipe_to = dialog.companions.then(|| companion(&path, "recipe.toml"));
    let report_path = companion(&path, "report.html");
    doc.run_files()
        .model_output("the quantized model", &path)
        .output_if("the recipe", recipe_to.as_deref())
        .output_if(
            "the report",
            dialog.companions.then_some(report_path.as_path()),
        )
        .folder_outputs(&doc.opened.model, &path)
        .check()
        .map_err(|e| ("The quantized model was not saved".to_owned(), e.chain()))?;
    let recipe = doc.planned.editor.recipe().clone();
    let stats = doc.work.results.stats.clone();
    if stats.is_none() && needs_statistics(&recipe) {
        return Err((
            "Calibrate first".into(),
            "The quantized model needs activation ranges: run Calibrate (Ctrl+R) or load statistics.".into(),
        ));
    }
    let fresh = doc.work.results.fresh_comparison(&recipe);
    let report_to = fresh.filter(|_| dialog.companions).map(|c| {
        let report = c.report(&doc.opened.source.label(), &path.display().to_string());
        (report_path, report)
    });
    Ok(SaveRequest {
        model: doc.opened.model.clone(),
        stats,
        quantized: fresh.map(|c| c.quantized.clone()),
        recipe_to,
        report_to,
        recipe,
        path,
        external_data: dialog.external_data,
    })
}

/// The status line after calibration.
fn calibrated_status(stats: &crate::calib::CalibrationStats) -> String {
    let info = &stats.info;
    let mut status = format!(
        "Calibrated {} tensors on {} samples in {:.1} s ({})",
        stats.tensors.len(),
        info.samples,
        info.seconds,
        info.execution_providers.join(" > ")
    );
    for note in &info.notes {
        status = format!("{status} · {note}");
    }
    let non_finite = stats.non_finite_tensors().len();
    if non_finite > 0 {
        status = format!("{status} · {non_finite} tensor(s) hold NaN or ±Inf");
    }
    status
}

/// The status line after a save.
fn saved_status(saved: &crate::workflow::quantize::Saved) -> String {
    let mut status = format!(
        "Saved the quantized model to {} ({} bytes)",
        saved.report.model_path.display(),
        saved.report.model_bytes
    );
    if let Some(data) = &saved.report.data_path {
        status.push_str(&format!(", weights in {}", data.display()));
    }
    if !saved.companions.is_empty() {
        status.push_str(&format!(" + {} companion file(s)", saved.companions.len()));
    }
    status
}

/// The first tensor the plan quantizes with its own range, among the selected node's inputs
/// and outputs, else the first calibrated tensor.
fn first_tensor(doc: &Document) -> Option<String> {
    let stats = doc.work.results.stats.as_ref()?;
    let selected = doc
        .view
        .selection
        .first()
        .map(|id| doc.opened.graph.node(*id));
    selected
        .into_iter()
        .flat_map(|n| n.inputs.iter().chain(&n.outputs))
        .find(|t| stats.tensors.contains_key(*t))
        .cloned()
        .or_else(|| stats.tensors.keys().next().cloned())
}

/// Each node's SQNR in the last comparison, of the kind the heat map shows.
fn node_heat(doc: &Document) -> Option<Vec<Option<f64>>> {
    let comparison = doc.work.results.comparison.as_ref()?;
    // A model that is quantized already writes the compared tensors itself (and has no plan).
    let prepared = match &doc.planned.prepared {
        Ok(p) if !doc.is_quantized() => &p.graph,
        _ => &doc.opened.graph,
    };
    Some(heat::node_sqnr(
        &doc.opened.graph,
        prepared,
        &comparison.tensors,
        doc.view.panel.heat_kind,
        &doc.planned.plan,
    ))
}
