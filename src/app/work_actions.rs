//! Carrying out the quantization commands (calibrate, quantize & compare, sensitivity,
//! auto-exclude, save, statistics files, runtime install) and taking their results when their
//! jobs finish. The jobs themselves are in [`crate::app::work::tasks`].

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::app::command::Command;
use crate::app::runtime_status::RuntimeStatus;
use crate::app::studio::{PathPurpose, Studio};
use crate::app::work::data::{DataCheck, DataKind};
use crate::app::work::tasks::{self, CalibrateRequest, CompareRequest, EvalSetup, SaveRequest};
use crate::app::work::{SaveDialog, TargetKind, TaskKind, TaskOutput, WorkTab, Workbench, heat};
use crate::calib::file as stats_file;
use crate::eval::sensitivity::Target;
use crate::recipe::QuantMode;
use crate::runtime::EpState;

/// True for the commands [`Studio::apply_work`] carries out.
pub fn is_work_command(command: &Command) -> bool {
    matches!(
        command,
        Command::Calibrate
            | Command::QuantizeCompare
            | Command::ShowSample(_)
            | Command::ScanSensitivity
            | Command::AutoExclude
            | Command::ApplyAlternative(_)
            | Command::CancelTask
            | Command::SaveStatisticsDialog
            | Command::SaveStatistics(_)
            | Command::LoadStatisticsDialog
            | Command::LoadStatistics(_)
            | Command::SaveQuantizedDialog
            | Command::SaveQuantized
            | Command::InstallRuntime(_)
            | Command::SetMethod(_)
            | Command::SetTensorOverride(..)
            | Command::ShowHistogram(_)
            | Command::RevealNodes(_)
            | Command::BrowseData { .. }
            | Command::SetDataPath { .. }
    )
}

impl Studio {
    /// Carries out one quantization command.
    pub(crate) fn apply_work(&mut self, command: Command) {
        if let Command::InstallRuntime(flavor) = command {
            return self.install_runtime(flavor);
        }
        if self.doc.is_none() {
            self.status = "Open a model first".to_owned();
            return;
        }
        let result = match command {
            Command::Calibrate => self.calibrate(),
            Command::QuantizeCompare => self.quantize_compare(),
            Command::ShowSample(sample) => self.show_sample(sample),
            Command::ScanSensitivity => self.scan_sensitivity(),
            Command::AutoExclude => self.auto_exclude(),
            Command::ApplyAlternative(index) => {
                if let Some(doc) = self.doc.as_mut()
                    && let Some(alternative) = doc
                        .work
                        .auto_excluded
                        .as_ref()
                        .and_then(|r| r.alternatives.get(index))
                {
                    doc.editor.replace(alternative.recipe.clone());
                    self.status = format!("Recipe: {} (Ctrl+Z undoes)", alternative.change);
                    doc.refresh();
                }
                Ok(())
            }
            Command::CancelTask => {
                if let Some(doc) = self.doc.as_mut() {
                    doc.work.cancel();
                }
                self.status = "Cancelling…".to_owned();
                Ok(())
            }
            Command::SaveStatisticsDialog => {
                self.statistics_dialog(true);
                Ok(())
            }
            Command::LoadStatisticsDialog => {
                self.statistics_dialog(false);
                Ok(())
            }
            Command::SaveStatistics(path) => self.save_statistics(&path),
            Command::LoadStatistics(path) => self.load_statistics(&path),
            Command::SaveQuantizedDialog => self.open_save_window(false),
            Command::SaveQuantized => self.save_quantized(),
            Command::SetMethod(method) => {
                if let Some(doc) = self.doc.as_mut() {
                    doc.editor.change(|r| r.calibration_method = method);
                    self.status = format!("Calibration method: {}", method.name());
                }
                Ok(())
            }
            Command::SetTensorOverride(tensor, value) => {
                if let Some(doc) = self.doc.as_mut() {
                    let cleared = value.is_none();
                    doc.editor.change(|r| match value {
                        Some(v) => {
                            r.tensor_overrides.insert(tensor.clone(), v);
                        }
                        None => {
                            r.tensor_overrides.remove(&tensor);
                        }
                    });
                    self.status = if cleared {
                        format!("{tensor}: back to the recipe's method")
                    } else {
                        format!("{tensor}: override set (in the recipe)")
                    };
                }
                Ok(())
            }
            Command::ShowHistogram(tensor) => {
                if let Some(doc) = self.doc.as_mut() {
                    doc.work.histogram_tensor = Some(tensor);
                    doc.work.tab = WorkTab::Histogram;
                }
                Ok(())
            }
            Command::RevealNodes(names) => {
                if let Some(doc) = self.doc.as_mut() {
                    let ids: Vec<_> = names
                        .iter()
                        .filter_map(|n| doc.graph.node_by_name(n).map(|node| node.id))
                        .collect();
                    if let Some(first) = ids.first() {
                        doc.canvas.centre_on(*first);
                    }
                    doc.selection = ids;
                }
                Ok(())
            }
            Command::BrowseData { evaluation, folder } => {
                self.browse_data(evaluation, folder);
                Ok(())
            }
            Command::SetDataPath { evaluation, path } => {
                if let Some(doc) = self.doc.as_mut() {
                    let choice = if evaluation {
                        doc.work.evaluate_on_calibration = false;
                        &mut doc.work.evaluation
                    } else {
                        &mut doc.work.calibration
                    };
                    choice.path = path.display().to_string();
                    if choice.kind == DataKind::Random {
                        choice.kind = crate::app::work::data::kind_of(&path);
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        };
        if let Some(doc) = self.doc.as_mut() {
            doc.refresh();
        }
        if let Err((title, detail)) = result {
            self.fail(title, detail);
        }
    }

    fn calibrate(&mut self) -> Result<(), (String, String)> {
        let ep_problem = self.ep_problem();
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let work = &mut doc.work;
        work.tab = WorkTab::Calibrate;
        if let Some(problem) = ep_problem {
            return Err(("Calibration cannot run on this provider".into(), problem));
        }
        if let DataCheck::Problem(problem) = &work.calibration_check {
            return Err((
                "The calibration data does not fit the model".into(),
                problem.clone(),
            ));
        }
        let data = work
            .calibration
            .spec()
            .map_err(|e| ("The calibration data is not set".to_owned(), e))?;
        let request = CalibrateRequest {
            model: doc.model.clone(),
            recipe: doc.editor.recipe().clone(),
            data,
            eps: vec![work.ep.clone()],
            batch_size: work.batch_size,
            max_samples: (work.max_samples > 0).then_some(work.max_samples),
            histogram_bins: work.histogram_bins,
        };
        let ep = work.ep.to_string();
        start(work, TaskKind::Calibrate, move |ctx| {
            tasks::calibrate_model(request, &ctx).map(TaskOutput::Calibrated)
        })?;
        self.status = format!("Calibrating on {ep}…");
        Ok(())
    }

    /// Why the chosen provider cannot run here, when the runtime probe says so.
    fn ep_problem(&self) -> Option<String> {
        let doc = self.doc.as_ref()?;
        let crate::app::runtime_status::RuntimeStatus::Ready { eps, .. } = &self.runtime else {
            return None;
        };
        let status = eps.iter().find(|s| s.ep == doc.work.ep)?;
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

    fn compare_request(&self) -> Result<CompareRequest, (String, String)> {
        let doc = self.doc.as_ref().ok_or_else(no_model)?;
        let work = &doc.work;
        let recipe = doc.editor.recipe().clone();
        let stats = match (&work.stats, recipe.mode) {
            (Some(stats), _) => stats.clone(),
            (None, QuantMode::Int4) => Arc::new(Default::default()),
            (None, _) => {
                return Err((
                    "Calibrate first".into(),
                    "Quantize & compare uses the cached calibration statistics: run Calibrate (Ctrl+R) or load statistics first.".into(),
                ));
            }
        };
        if let DataCheck::Problem(problem) = work.evaluation_check() {
            return Err((
                "The evaluation data does not fit the model".into(),
                problem.clone(),
            ));
        }
        let data = work
            .evaluation_choice()
            .spec()
            .map_err(|e| ("The evaluation data is not set".to_owned(), e))?;
        let reference = work
            .comparison
            .as_ref()
            .map(|c| c.reference.clone())
            .or_else(|| work.scanned.as_ref().map(|s| s.reference.clone()));
        Ok(CompareRequest {
            setup: EvalSetup {
                model: doc.model.clone(),
                stats,
                recipe,
                data,
                eps: vec![work.ep.clone()],
                batch_size: work.batch_size,
                reference,
            },
            latency: work.measure_latency,
            sample: work.sample,
        })
    }

    fn quantize_compare(&mut self) -> Result<(), (String, String)> {
        if let Some(problem) = self.ep_problem() {
            return Err(("Cannot compare on this provider".into(), problem));
        }
        let request = self.compare_request()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        start(&mut doc.work, TaskKind::Compare, move |ctx| {
            tasks::quantize_and_compare(request, &ctx).map(|c| TaskOutput::Compared(Box::new(c)))
        })?;
        self.compare_requested = Some(Instant::now());
        self.status = "Quantizing from the cached statistics and comparing…".to_owned();
        Ok(())
    }

    fn show_sample(&mut self, sample: usize) -> Result<(), (String, String)> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        doc.work.sample = sample;
        let Some(comparison) = doc.work.comparison.as_ref() else {
            return Ok(());
        };
        if comparison.sample.0 == sample {
            return Ok(());
        }
        let model = doc.model.clone();
        let quantized = comparison.quantized.clone();
        let reference = comparison.reference.clone();
        start(&mut doc.work, TaskKind::Sample, move |ctx| {
            tasks::sample_outputs(&model, &quantized, &reference, sample, &ctx)
                .map(|pairs| TaskOutput::Sample(sample, pairs))
        })
    }

    fn sensitivity_request(&self) -> Result<EvalSetup, (String, String)> {
        Ok(self.compare_request()?.setup)
    }

    fn scan_sensitivity(&mut self) -> Result<(), (String, String)> {
        let request = self.sensitivity_request()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        doc.work.tab = WorkTab::Sensitivity;
        start(&mut doc.work, TaskKind::Sensitivity, move |ctx| {
            tasks::scan_nodes(request, &ctx).map(|s| TaskOutput::Scanned(Box::new(s)))
        })
    }

    fn auto_exclude(&mut self) -> Result<(), (String, String)> {
        let request = self.sensitivity_request()?;
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let work = &mut doc.work;
        work.tab = WorkTab::Sensitivity;
        let target = match work.target_kind {
            TargetKind::SqnrDb => Target::SqnrDb(work.target_value),
            TargetKind::Top1 => Target::Top1(work.target_value / 100.0),
            TargetKind::Sequence => Target::Sequence(work.target_value / 100.0),
        };
        let scanned = work.scanned.clone();
        let max = work.max_excluded;
        start(work, TaskKind::AutoExclude, move |ctx| {
            tasks::auto_exclude_nodes(request, scanned, target, max, &ctx)
                .map(|r| TaskOutput::AutoExcluded(Box::new(r)))
        })
    }

    fn statistics_dialog(&mut self, save: bool) {
        let default = self
            .doc
            .as_ref()
            .and_then(|d| d.source.path().map(|p| p.with_extension("stats.json")))
            .unwrap_or_else(|| std::path::PathBuf::from("calibration.stats.json"));
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
                    "Load calibration statistics"
                })
                .add_filter("Statistics", &["json", "stats"])
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
                Command::SaveStatistics(path)
            } else {
                Command::LoadStatistics(path)
            });
        }
    }

    fn save_statistics(&mut self, path: &Path) -> Result<(), (String, String)> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let Some(stats) = doc.work.stats.clone() else {
            return Err((
                "No statistics to save".into(),
                "Calibrate first (Ctrl+R).".into(),
            ));
        };
        if doc.source.path().is_some_and(|m| same_path(m, path)) {
            return Err((
                "The statistics were not saved".into(),
                "that path is the model itself; choose another file name".into(),
            ));
        }
        stats_file::save(&stats, path)
            .map_err(|e| ("The statistics were not saved".to_owned(), e.to_string()))?;
        doc.work.stats_saved = true;
        self.status = format!("Statistics saved to {}", path.display());
        Ok(())
    }

    fn load_statistics(&mut self, path: &Path) -> Result<(), (String, String)> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let stats = stats_file::load(path).map_err(|e| {
            (
                "The statistics could not be loaded".to_owned(),
                e.to_string(),
            )
        })?;
        let known = stats
            .tensors
            .keys()
            .filter(|t| doc.graph.tensor(t).is_some())
            .count();
        if known == 0 && !stats.tensors.is_empty() {
            return Err((
                "These statistics are for another model".into(),
                format!(
                    "none of the {} tensors in {} exists in this model",
                    stats.tensors.len(),
                    path.display()
                ),
            ));
        }
        let count = stats.tensors.len();
        doc.work.statistics_replaced(stats, true);
        self.status = format!(
            "Loaded statistics of {count} tensors from {}",
            path.display()
        );
        Ok(())
    }

    fn open_save_window(&mut self, then_quit: bool) -> Result<(), (String, String)> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let path = doc
            .work
            .saved_model
            .clone()
            .unwrap_or_else(|| Workbench::default_output(doc.source.path()));
        doc.work.save_dialog = Some(SaveDialog {
            path: path.display().to_string(),
            external_data: false,
            companions: true,
            then_quit,
        });
        Ok(())
    }

    fn save_quantized(&mut self) -> Result<(), (String, String)> {
        let doc = self.doc.as_mut().ok_or_else(no_model)?;
        let Some(dialog) = doc.work.save_dialog.clone() else {
            return Ok(());
        };
        let path = std::path::PathBuf::from(dialog.path.trim());
        if dialog.path.trim().is_empty() {
            return Err(("Choose where to save".into(), "the path is empty".into()));
        }
        if doc.source.path().is_some_and(|m| same_path(m, &path)) {
            return Err((
                "The quantized model was not saved".into(),
                "that path is the input model: qdq-studio never writes over it; choose another name".into(),
            ));
        }
        let recipe = doc.editor.recipe().clone();
        let stats = doc.work.stats.clone();
        if stats.is_none() && recipe.mode != QuantMode::Int4 {
            return Err((
                "Calibrate first".into(),
                "The quantized model needs activation ranges: run Calibrate (Ctrl+R) or load statistics.".into(),
            ));
        }
        let fresh = doc.work.fresh_comparison(&recipe);
        let quantized = fresh.map(|c| c.quantized.clone());
        let model_label = doc.source.label();
        let companions = dialog
            .companions
            .then(|| fresh.map(|c| c.report(&model_label, &path.display().to_string())));
        let request = SaveRequest {
            model: doc.model.clone(),
            stats,
            recipe,
            quantized,
            path,
            external_data: dialog.external_data,
            companions,
        };
        start(&mut doc.work, TaskKind::Save, move |ctx| {
            tasks::save_quantized(request, &ctx).map(|s| TaskOutput::Saved(Box::new(s)))
        })?;
        if let Some(dialog) = doc.work.save_dialog.as_mut() {
            let then_quit = dialog.then_quit;
            doc.work.save_dialog = None;
            self.quit_after_save = then_quit;
        }
        Ok(())
    }

    fn browse_data(&mut self, evaluation: bool, folder: bool) {
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
            if folder {
                dialog.pick_folder()
            } else {
                dialog
                    .add_filter("NumPy arrays", &["npz", "npy"])
                    .add_filter("All files", &["*"])
                    .pick_file()
            }
        });
        if let Some(path) = picked {
            self.push(Command::SetDataPath { evaluation, path });
        }
    }

    fn install_runtime(&mut self, flavor: crate::runtime::Flavor) {
        let Some(doc) = self.doc.as_mut() else {
            self.status = "Open a model first".to_owned();
            return;
        };
        let result = start(&mut doc.work, TaskKind::InstallRuntime, move |ctx| {
            tasks::install_runtime(flavor, &ctx).map(|(v, p)| TaskOutput::Installed(v, p))
        });
        if let Err((title, detail)) = result {
            self.fail(title, detail);
        }
    }

    /// Polls the data checks and the running task; takes a finished task's result.
    pub(crate) fn poll_work(&mut self, ctx: &egui::Context) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        let checking = doc.work.poll_checks();
        let finished = doc.work.poll_task();
        if checking || doc.work.busy() {
            ctx.request_repaint_after(std::time::Duration::from_millis(50));
        }
        let Some((kind, result)) = finished else {
            return;
        };
        ctx.request_repaint();
        match result {
            Ok(output) => self.take_output(output),
            Err(e) if e == "cancelled" || e.contains("cancelled") => {
                self.status = format!("{} cancelled; nothing was changed", kind.label());
                self.quit_after_save = false;
            }
            Err(e) => {
                self.quit_after_save = false;
                self.fail(format!("{} failed", kind.label()), e);
            }
        }
    }

    fn take_output(&mut self, output: TaskOutput) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        let work = &mut doc.work;
        match output {
            TaskOutput::Calibrated(stats) => {
                let info = &stats.info;
                self.status = format!(
                    "Calibrated {} tensors on {} samples in {:.1} s ({})",
                    stats.tensors.len(),
                    info.samples,
                    info.seconds,
                    info.execution_providers.join(" > ")
                );
                for note in &info.notes {
                    self.status = format!("{} · {note}", self.status);
                }
                doc.work.statistics_replaced(stats, false);
                if doc.work.histogram_tensor.is_none() {
                    doc.work.histogram_tensor = first_tensor(doc);
                }
                doc.work.tab = WorkTab::Histogram;
            }
            TaskOutput::Compared(comparison) => {
                let worst = comparison
                    .outputs
                    .iter()
                    .map(|m| m.sqnr_db)
                    .fold(f64::INFINITY, f64::min);
                self.status = format!(
                    "Quantized {} nodes · worst output SQNR {:.2} dB · {:.0} ms",
                    comparison.quantized_nodes.len(),
                    worst,
                    comparison.timings.total_ms
                );
                doc.heat = Some(heat::node_sqnr(&doc.graph, &comparison.tensors));
                work.heat_map = true;
                work.comparison = Some(*comparison);
                work.tab = WorkTab::Results;
                self.output_images = None;
                self.heat_installed = true;
                doc.refresh();
            }
            TaskOutput::Sample(sample, pairs) => {
                if let Some(c) = work.comparison.as_mut() {
                    c.sample = (sample, pairs);
                }
                self.output_images = None;
            }
            TaskOutput::Scanned(scanned) => {
                self.status = format!(
                    "Scanned {} nodes: baseline output SQNR {:.2} dB",
                    scanned.sensitivity.nodes.len(),
                    scanned.sensitivity.baseline_db
                );
                work.scanned = Some(*scanned);
            }
            TaskOutput::AutoExcluded(result) => {
                let (result, scanned) = *result;
                self.status = format!(
                    "Auto-exclude: {} (Ctrl+Z undoes)",
                    crate::app::work::auto_exclude_summary(&result)
                );
                work.scanned = Some(scanned);
                doc.editor.replace(result.recipe.clone());
                doc.work.auto_excluded = Some(result);
                doc.refresh();
            }
            TaskOutput::Saved(saved) => {
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
                self.status = status;
                work.saved_model = Some(saved.report.model_path.clone());
                work.saved_recipe = Some(saved.recipe.clone());
                if std::mem::take(&mut self.quit_after_save) {
                    self.quit_confirmed = true;
                    self.quit = true;
                }
            }
            TaskOutput::Installed(version, path) => {
                // ONNX Runtime is one library per process: with none loaded yet (first run),
                // the new one is picked up now; otherwise it takes a restart.
                if matches!(self.runtime, RuntimeStatus::Missing(_)) {
                    self.runtime = RuntimeStatus::probe();
                    self.status = format!("ONNX Runtime {version} installed at {}", path.display());
                } else {
                    self.status = format!(
                        "ONNX Runtime {version} installed at {}: restart qdq-studio to use it",
                        path.display()
                    );
                }
            }
        }
    }

    /// Quit: asks first when there is unsaved work.
    pub(crate) fn request_quit(&mut self) {
        if self.has_unsaved_work() {
            self.ask_unsaved = true;
        } else {
            self.quit = true;
        }
    }

    /// True when quitting would lose work.
    pub fn has_unsaved_work(&self) -> bool {
        self.doc
            .as_ref()
            .is_some_and(|d| d.work.unsaved(d.editor.recipe(), d.editor.edited()))
    }

    /// The window's close button: cancelled and asked about when there is unsaved work;
    /// otherwise any running task is cancelled as the window closes.
    pub(crate) fn handle_close_request(&mut self, ctx: &egui::Context) {
        if !ctx.input(|i| i.viewport().close_requested()) {
            return;
        }
        if !self.quit_confirmed && self.has_unsaved_work() {
            ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
            self.ask_unsaved = true;
            return;
        }
        if let Some(doc) = self.doc.as_mut() {
            doc.work.cancel();
        }
    }

    /// Opens the save window, quitting once the save succeeds (the unsaved-work prompt).
    pub(crate) fn save_then_quit(&mut self) {
        self.ask_unsaved = false;
        if let Err((title, detail)) = self.open_save_window(true) {
            self.fail(title, detail);
        }
    }
}

fn start(
    work: &mut Workbench,
    kind: TaskKind,
    run: impl FnOnce(crate::jobs::JobContext) -> Result<TaskOutput, String> + Send + 'static,
) -> Result<(), (String, String)> {
    work.start(kind, run)
        .map_err(|e| (format!("{} could not start", kind.label()), e))
}

fn no_model() -> (String, String) {
    ("No model is open".into(), "Open a model first.".into())
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The first calibrated tensor of the selected node (its inputs, then outputs), else of the
/// graph.
fn first_tensor(doc: &crate::app::document::Document) -> Option<String> {
    let stats = doc.work.stats.as_ref()?;
    let selected = doc.selection.first().map(|id| doc.graph.node(*id));
    selected
        .into_iter()
        .flat_map(|n| n.inputs.iter().chain(&n.outputs))
        .find(|t| stats.tensors.contains_key(*t))
        .cloned()
        .or_else(|| stats.tensors.keys().next().cloned())
}
