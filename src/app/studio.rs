//! The studio window: its state, the frame (menus, panels, graph, windows) and
//! [`Studio::apply`], where every [`Command`] is carried out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::app::command::{self, Command};
use crate::app::command::{AppCommand, ViewCommand, WorkCommand};
use crate::app::document::{self, Document, OpenError, Source};
use crate::app::document_commands::{self, Applied};
use crate::app::inspector::InspectorState;
use crate::app::panels::{MenuState, OpeningView};
use crate::app::runtime_status::RuntimeStatus;
use crate::app::settings::{ModelData, Settings};
use crate::app::window::{ExitState, Notice, PathPrompt, PathPurpose, WindowState};
use crate::app::work::settings::RunSettings;
use crate::app::{dialogs, panels, work_panel};
use crate::jobs::Job;
use crate::recipe::{Recipe, Target};
use crate::workflow::model_folder;

/// How often the window polls a running job (it repaints only while one runs).
const JOB_POLL: Duration = Duration::from_millis(50);
/// A native dialog that returns nothing faster than this was not shown (no dialog service,
/// e.g. no desktop portal): the path field opens instead.
const NO_DIALOG_WITHIN: Duration = Duration::from_millis(150);

/// Choices made when the studio starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StudioOptions {
    /// Use native file dialogs (off in tests: the path field is used instead).
    pub native_dialogs: bool,
    /// Find ONNX Runtime and probe its execution providers in the background, for the
    /// status bar and the About window.
    pub probe_runtime: bool,
}

impl Default for StudioOptions {
    fn default() -> Self {
        StudioOptions {
            native_dialogs: true,
            probe_runtime: true,
        }
    }
}

/// A model being opened.
struct Opening {
    job: Job<Result<Document, OpenError>>,
    label: String,
    started: Instant,
}

/// Timings the closing notes and benchmarks report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StudioMetrics {
    /// From the open request to the first frame showing the model.
    pub open_to_first_frame: Option<Duration>,
    /// From "quantize & compare" to the first frame showing the updated heat map.
    pub compare_to_heat_map: Option<Duration>,
}

/// When things happened, for [`StudioMetrics`].
#[derive(Debug, Clone, Copy, Default)]
struct Timing {
    /// When the model now showing was asked for (until its first frame).
    opened_at: Option<Instant>,
    /// When quantize & compare was asked for (until its heat map is drawn).
    compare_requested: Option<Instant>,
    /// The heat map was installed this frame: the next frame shows it.
    heat_installed: bool,
    /// What was measured.
    metrics: StudioMetrics,
}

/// The studio application: the open model, the window's state, and the queue of commands
/// the views produced this frame.
pub struct Studio {
    pub(crate) options: StudioOptions,
    settings: Settings,
    pub(crate) doc: Option<Document>,
    opening: Option<Opening>,
    pub(crate) runtime: RuntimeStatus,
    pub(crate) window: WindowState,
    pub(crate) inspector: InspectorState,
    pub(crate) exit: ExitState,
    timing: Timing,
    queue: Vec<Command>,
}

impl std::fmt::Debug for Studio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Studio")
            .field("doc", &self.doc)
            .field("notices", &self.window.notices)
            .finish_non_exhaustive()
    }
}

impl Studio {
    /// A studio with `settings` (recent files, theme) and nothing open yet.
    pub fn new(options: StudioOptions, settings: Settings) -> Self {
        Studio {
            options,
            settings,
            doc: None,
            opening: None,
            runtime: if options.probe_runtime {
                RuntimeStatus::probe()
            } else {
                RuntimeStatus::NotProbed
            },
            window: WindowState::default(),
            inspector: InspectorState::default(),
            exit: ExitState::default(),
            timing: Timing::default(),
            queue: Vec::new(),
        }
    }

    /// The open model.
    pub fn document(&self) -> Option<&Document> {
        self.doc.as_ref()
    }

    /// The open model, mutably (tests, benchmarks).
    pub fn document_mut(&mut self) -> Option<&mut Document> {
        self.doc.as_mut()
    }

    /// Errors waiting to be dismissed.
    pub fn notices(&self) -> &[Notice] {
        &self.window.notices
    }

    /// Dismisses the notice at `index`.
    pub fn dismiss(&mut self, index: usize) {
        if index < self.window.notices.len() {
            self.window.notices.remove(index);
        }
    }

    /// The status bar's message.
    pub fn status(&self) -> &str {
        &self.window.status
    }

    /// The persisted settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// True while a model is being opened.
    pub fn is_busy(&self) -> bool {
        self.opening.is_some()
    }

    /// Measured timings.
    pub fn metrics(&self) -> StudioMetrics {
        self.timing.metrics
    }

    /// Queues `command` for the next frame (menus and panels do this while drawing).
    pub fn push(&mut self, command: Command) {
        self.queue.push(command);
    }

    pub(crate) fn fail(&mut self, title: impl Into<String>, detail: impl std::fmt::Display) {
        let title = title.into();
        tracing::warn!("{title}: {detail}");
        self.window.notices.push(Notice {
            title,
            detail: detail.to_string(),
        });
    }

    /// Starts opening `source` as a job; the current model stays open until it succeeds. A
    /// folder opens the model it holds ([`model_folder::resolve_model_path`]).
    pub fn open(&mut self, source: Source) {
        let source = match source {
            Source::File(path) => match model_folder::resolve_model_path(&path) {
                Ok(model) => Source::File(model),
                Err(e) => return self.open_failed(&path.display().to_string(), e),
            },
            Source::Sample => Source::Sample,
        };
        let label = source.label();
        // The document (node states, every box's look) is built in the job too: on a
        // 50,000-node graph that is a noticeable stall the window should not take.
        let dark = self.window.dark;
        let job = Job::spawn("open-model", move |ctx| {
            document::load(source, &ctx)
                // The CPU provider is every model's first: its target is the first one.
                .map(|loaded| Document::new(loaded, Recipe::for_target(Target::Cpu), dark))
        });
        match job {
            Ok(job) => {
                self.window.status = format!("Opening {label}…");
                // Replacing a running job drops it, which cancels it.
                self.opening = Some(Opening {
                    job,
                    label,
                    started: Instant::now(),
                });
            }
            Err(e) => self.open_failed(&label, e),
        }
    }

    /// Opens `source`, asking first when the open model has unsaved work (the new model
    /// would replace it).
    fn open_asking(&mut self, source: Source) {
        if self.has_unsaved_work() {
            self.exit.open_after = Some(source);
            self.exit.ask_unsaved = true;
        } else {
            self.open(source);
        }
    }

    /// Remembers the open model's data for the next time it is opened.
    pub(crate) fn remember_data(&mut self) {
        let Some(doc) = self.doc.as_ref() else {
            return;
        };
        let Source::File(path) = &doc.opened.source else {
            return;
        };
        let data = model_data(doc, doc.work.float_model.as_ref().map(|f| f.path.clone()));
        self.settings.remember_data(path, data);
    }

    /// Remembers, for the QDQ model just saved at `saved`, the data the open model was run
    /// on and the float model it was made from: opening it later compares it on the same
    /// data against that float model (the bundled sample's is written beside its data).
    pub(crate) fn remember_saved(&mut self, saved: &Path) {
        let Some(doc) = self.doc.as_ref() else {
            return;
        };
        if doc.is_quantized() {
            return;
        }
        let float = match &doc.opened.source {
            Source::File(path) => Some(path.clone()),
            Source::Sample => document::sample_files(&doc.opened.source).map(|f| f.model),
        };
        let data = model_data(doc, float);
        self.settings.remember_saved(saved, data);
    }

    /// Opening `label` failed: the notice says why, and the status bar no longer says
    /// "Opening …" (the model open before stays).
    fn open_failed(&mut self, label: &str, detail: impl std::fmt::Display) {
        self.window.status = format!("Could not open {label}");
        self.fail(format!("Could not open {label}"), detail);
    }

    fn poll_open(&mut self, ctx: &egui::Context) {
        let Some(opening) = self.opening.as_mut() else {
            return;
        };
        opening.job.poll_progress();
        let Some(result) = opening.job.try_take() else {
            ctx.request_repaint_after(JOB_POLL);
            return;
        };
        let Some(opening) = self.opening.take() else {
            return;
        };
        match result {
            Ok(Ok(doc)) => self.install(doc, opening.started),
            Ok(Err(OpenError::Cancelled(_))) => self.window.status = "Opening cancelled".to_owned(),
            Ok(Err(e)) => self.open_failed(&opening.label, format!("{e:#}")),
            Err(panic) => self.open_failed(&opening.label, panic),
        }
        ctx.request_repaint();
    }

    fn install(&mut self, mut doc: Document, started: Instant) {
        if let Source::File(path) = &doc.opened.source {
            self.settings.add_recent(path);
            // The data it was last run on, as it was chosen.
            if let Some(data) = self.settings.data_for(path) {
                restore_data(&mut doc.work.settings, data);
                if let Some(float) =
                    (data.float_model.clone()).filter(|float| doc.is_quantized() && float.is_file())
                {
                    self.queue
                        .push(Command::Work(WorkCommand::SetFloatModel(float)));
                }
            }
        }
        let simplified = doc.opened.layout.simplified;
        let problems = doc.opened.graph.problems().len();
        let mut status = format!(
            "Opened {} ({} nodes) in {:.0} ms",
            doc.opened.source.label(),
            doc.opened.graph.nodes().len(),
            started.elapsed().as_secs_f64() * 1000.0
        );
        if simplified {
            status.push_str(" · simplified layout for a very large graph");
        }
        if problems > 0 {
            status.push_str(&format!(
                " · {problems} structural problem(s), flagged with !"
            ));
        }
        self.window.status = status;
        self.inspector.clear();
        self.doc = Some(doc);
        self.timing.opened_at = Some(started);
    }

    /// Carries out one command: each kind goes to the code for that kind.
    pub fn apply(&mut self, command: Command) {
        match command {
            Command::App(command) => self.apply_app(command),
            Command::Work(command) => self.apply_work(command),
            Command::Recipe(command) => {
                self.apply_to_document(|doc, _| document_commands::recipe_setting(doc, command))
            }
            Command::Edit(command) => {
                self.apply_to_document(|doc, _| document_commands::node_edit(doc, command))
            }
            // Escape closes the shortcuts and About windows before it reaches the graph.
            Command::View(ViewCommand::Escape)
                if self.window.show_shortcuts || self.window.show_about =>
            {
                self.window.show_shortcuts = false;
                self.window.show_about = false;
            }
            Command::View(command) => self.apply_to_document(|doc, window| {
                document_commands::view_change(doc, window, command)
            }),
        }
    }

    /// Files, the application's windows and theme, quitting.
    fn apply_app(&mut self, command: AppCommand) {
        match command {
            AppCommand::OpenDialog => self.open_dialog(),
            AppCommand::OpenFolderDialog => self.open_folder_dialog(),
            AppCommand::OpenPathPrompt => self.ask_path(PathPurpose::OpenModel, None),
            AppCommand::Open(path) => self.open_asking(Source::File(path)),
            AppCommand::OpenSample => self.open_asking(Source::Sample),
            AppCommand::SaveRecipeDialog => self.save_recipe_dialog(),
            AppCommand::SaveRecipe(path) => self.save_recipe(&path),
            AppCommand::LoadRecipeDialog => self.load_recipe_dialog(),
            AppCommand::LoadRecipe(path) => self.load_recipe(&path),
            AppCommand::ShowShortcuts => self.window.show_shortcuts = true,
            AppCommand::ShowAbout => self.window.show_about = true,
            AppCommand::SetTheme(theme) => self.settings.theme = theme,
            AppCommand::ClearRecent => self.settings.recent.clear(),
            AppCommand::CancelOpen => self.cancel_open(),
            AppCommand::Quit => self.request_quit(),
            AppCommand::Discard => {
                self.exit.ask_unsaved = false;
                match self.exit.open_after.take() {
                    Some(source) => self.open(source),
                    None => {
                        self.exit.confirmed = true;
                        self.exit.quit = true;
                    }
                }
            }
            AppCommand::SaveThenGoOn => self.save_then_go_on(),
            AppCommand::KeepWorking => {
                self.exit.ask_unsaved = false;
                self.exit.open_after = None;
            }
        }
    }

    /// Carries out `change` on the open document (nothing without one), then shows its status,
    /// says why an edit the recipe's target does not allow was taken back, and restyles the
    /// graph unless only the camera moved.
    fn apply_to_document(
        &mut self,
        change: impl FnOnce(&mut Document, &mut WindowState) -> Applied,
    ) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        let status = match change(doc, &mut self.window) {
            Applied::Status(status) => status,
            // Camera moves change nothing the boxes show: no restyle.
            Applied::Camera => return,
        };
        if let Some(status) = status {
            self.window.status = status;
        }
        // An edit the recipe's target does not allow was taken back: say why.
        if let Some(reason) = doc.planned.editor.take_refusal() {
            self.window.status = format!("Not changed: {reason}");
        }
        doc.refresh();
    }

    pub(crate) fn ask_path(&mut self, purpose: PathPurpose, note: Option<String>) {
        let text = match purpose {
            PathPurpose::SaveRecipe => self.default_recipe_path().display().to_string(),
            _ => String::new(),
        };
        self.window.prompt = Some(PathPrompt {
            purpose,
            text,
            note,
        });
    }

    /// Runs a native dialog; `None` and opens the path field when no dialog could be shown.
    pub(crate) fn native_dialog(
        &mut self,
        purpose: PathPurpose,
        run: impl FnOnce() -> Option<PathBuf>,
    ) -> Option<PathBuf> {
        if !self.options.native_dialogs {
            self.ask_path(purpose, None);
            return None;
        }
        let started = Instant::now();
        let picked = run();
        if picked.is_none() && started.elapsed() < NO_DIALOG_WITHIN {
            self.ask_path(
                purpose,
                Some("No file dialog is available on this desktop (no portal service): type the path.".to_owned()),
            );
        }
        picked
    }

    fn open_dialog(&mut self) {
        let folder = self
            .settings
            .recent
            .first()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        let picked = self.native_dialog(PathPurpose::OpenModel, move || {
            let mut dialog = rfd::FileDialog::new()
                .set_title("Open an ONNX model")
                .add_filter("ONNX model", &["onnx"])
                .add_filter("All files", &["*"]);
            if let Some(folder) = folder {
                dialog = dialog.set_directory(folder);
            }
            dialog.pick_file()
        });
        if let Some(path) = picked {
            self.open_asking(Source::File(path));
        }
    }

    /// A model folder (onnxruntime-genai's, or one holding a single `.onnx`): its model is
    /// opened, and a quantized model saved into another folder gets the folder's files.
    fn open_folder_dialog(&mut self) {
        let folder = self
            .settings
            .recent
            .first()
            .and_then(|p| p.parent().and_then(Path::parent).map(Path::to_path_buf));
        let picked = self.native_dialog(PathPurpose::OpenModel, move || {
            let mut dialog = rfd::FileDialog::new().set_title("Open a model folder");
            if let Some(folder) = folder {
                dialog = dialog.set_directory(folder);
            }
            dialog.pick_folder()
        });
        if let Some(path) = picked {
            self.open_asking(Source::File(path));
        }
    }

    fn default_recipe_path(&self) -> PathBuf {
        match self.doc.as_ref() {
            Some(doc) => {
                doc.planned
                    .recipe_path
                    .clone()
                    .unwrap_or_else(|| match doc.opened.source.path() {
                        Some(model) => model.with_extension("recipe.toml"),
                        None => PathBuf::from("ppocr_cls.recipe.toml"),
                    })
            }
            None => PathBuf::from("recipe.toml"),
        }
    }

    fn save_recipe_dialog(&mut self) {
        if self.doc.is_none() {
            return;
        }
        let default = self.default_recipe_path();
        let picked = self.native_dialog(PathPurpose::SaveRecipe, move || {
            let mut dialog = rfd::FileDialog::new()
                .set_title("Save the recipe")
                .add_filter("Recipe (TOML)", &["toml"]);
            if let Some(folder) = default.parent().filter(|p| !p.as_os_str().is_empty()) {
                dialog = dialog.set_directory(folder);
            }
            if let Some(name) = default.file_name() {
                dialog = dialog.set_file_name(name.to_string_lossy());
            }
            dialog.save_file()
        });
        if let Some(path) = picked {
            self.save_recipe(&path);
        }
    }

    fn load_recipe_dialog(&mut self) {
        if self.doc.is_none() {
            return;
        }
        let picked = self.native_dialog(PathPurpose::LoadRecipe, || {
            rfd::FileDialog::new()
                .set_title("Load a recipe")
                .add_filter("Recipe (TOML)", &["toml"])
                .pick_file()
        });
        if let Some(path) = picked {
            self.load_recipe(&path);
        }
    }

    fn save_recipe(&mut self, path: &Path) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        if let Err(e) = doc.run_files().output("the recipe", path).check() {
            self.fail("The recipe was not saved", e.chain());
            return;
        }
        // The data it was run on travel with it (a table the recipe itself does not read).
        let mut data = toml::Table::try_from(model_data(doc, None)).unwrap_or_default();
        // And as the engine reads them, for `quantize --recipe` without data flags.
        let spec = doc.work.settings.calibration.spec().ok();
        if let Some(spec) = spec.and_then(|s| toml::Value::try_from(s).ok()) {
            data.insert(crate::recipe::CALIBRATION_SPEC.to_owned(), spec);
        }
        match doc.recipe().save_with_data(path, &data) {
            Ok(()) => {
                doc.planned.recipe_path = Some(path.to_path_buf());
                self.window.status = format!("Recipe saved to {}", path.display());
            }
            Err(e) => self.fail("The recipe was not saved", e),
        }
    }

    fn load_recipe(&mut self, path: &Path) {
        let Some(doc) = self.doc.as_mut() else {
            return;
        };
        match Recipe::load_with_data(path) {
            Ok((recipe, data)) => {
                let warning = recipe.check_against(&doc.opened.graph).err();
                doc.planned.editor.replace(recipe);
                doc.planned.recipe_path = Some(path.to_path_buf());
                // The data saved with it, when they read as the studio writes them.
                let data = data.and_then(|d| d.try_into::<ModelData>().ok());
                if let Some(data) = &data {
                    restore_data(&mut doc.work.settings, data);
                }
                doc.refresh();
                let with_data = if data.is_some() { " with its data" } else { "" };
                self.window.status = match warning {
                    None => format!("Recipe loaded from {}{with_data}", path.display()),
                    Some(w) => format!(
                        "Recipe loaded from {}{with_data}; note: {w}",
                        path.display()
                    ),
                };
            }
            Err(e) => self.fail("The recipe could not be loaded", e),
        }
    }

    /// Opens a file dropped on the window: an ONNX model, or a recipe when a model is open.
    fn handle_dropped_files(&mut self, ctx: &egui::Context) {
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        });
        for path in dropped {
            let extension = path
                .extension()
                .map(|e| e.to_string_lossy().to_ascii_lowercase())
                .unwrap_or_default();
            match extension.as_str() {
                "onnx" => self.open_asking(Source::File(path)),
                "toml" if self.doc.is_some() => self.load_recipe(&path),
                "npz" | "npy" if self.doc.is_some() => {
                    self.window.status = format!("Calibration data: {}", path.display());
                    self.apply(Command::Work(WorkCommand::SetDataPath {
                        evaluation: false,
                        path,
                    }));
                }
                _ => self.fail(
                    format!("{} is not an ONNX model", path.display()),
                    "Drop a .onnx file to open it (or, once a model is open, a .toml recipe or .npz/.npy calibration data).",
                ),
            }
        }
    }

    /// Draws one frame and handles its input. eframe calls this through
    /// [`eframe::App::ui`]; tests call it through egui_kittest.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        if self.window.theme_applied != Some(self.settings.theme) {
            ctx.set_theme(self.settings.theme);
            self.window.theme_applied = Some(self.settings.theme);
        }
        self.poll_open(&ctx);
        self.runtime.poll(&ctx);
        self.poll_work(&ctx);
        self.handle_close_request(&ctx);
        self.handle_dropped_files(&ctx);
        let text_focused = ctx.memory(|m| m.focused().is_some());
        let pressed = ctx.input_mut(|i| command::pressed(i, text_focused));
        self.queue.extend(pressed);
        self.window.dark = ui.visuals().dark_mode;
        if let Some(doc) = self.doc.as_mut() {
            doc.set_dark(self.window.dark);
        }
        self.draw(ui, &ctx);
        let queued = std::mem::take(&mut self.queue);
        if !queued.is_empty() {
            for command in queued {
                self.apply(command);
            }
            ctx.request_repaint();
        }
        if std::mem::take(&mut self.exit.quit) {
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        }
        self.update_title(&ctx);
        self.record_timings();
    }

    /// Draws every part of the window; the views queue what the user did.
    fn draw(&mut self, ui: &mut egui::Ui, ctx: &egui::Context) {
        let mut commands = Vec::new();
        let menu = self.menu_state();
        panels::menu_bar(ui, &menu, &mut commands);
        panels::status_bar(
            ui,
            self.doc.as_ref(),
            &self.runtime.summary(),
            &self.window.status,
        );
        if let Some(doc) = self.doc.as_mut() {
            // The work panel first: it spans the window's width under the side panels.
            work_panel::show(ui, &mut doc.parts(), &self.runtime, &mut commands);
            panels::left_panel(ui, doc, &mut self.window.op_filter, &mut commands);
            panels::inspector_panel(ui, Some(&*doc), &mut self.inspector, &mut commands);
        } else {
            panels::inspector_panel(ui, None, &mut self.inspector, &mut commands);
        }
        let opening = self.opening_view();
        let focus_search = std::mem::take(&mut self.window.focus_search);
        panels::central(
            ui,
            self.doc.as_mut(),
            opening.as_ref(),
            focus_search,
            &mut commands,
        );
        dialogs::show(ctx, &mut self.window, &self.runtime, &mut commands);
        if let Some(doc) = self.doc.as_mut() {
            work_panel::save_window(
                ctx,
                &mut doc.parts(),
                self.options.native_dialogs,
                &mut commands,
            );
        }
        let opening = self.exit.open_after.as_ref().map(Source::label);
        work_panel::unsaved_prompt(ctx, self.exit.ask_unsaved, opening, &mut commands);
        self.queue.extend(commands);
    }

    /// What the menus need to know.
    fn menu_state(&self) -> MenuState {
        let doc = self.doc.as_ref();
        MenuState {
            has_doc: doc.is_some(),
            busy: doc.is_some_and(|d| d.work.busy()),
            has_stats: doc.is_some_and(|d| d.work.results.stats.is_some()),
            can_undo: doc.is_some_and(|d| d.planned.editor.can_undo()),
            can_redo: doc.is_some_and(|d| d.planned.editor.can_redo()),
            has_selection: doc.is_some_and(|d| !d.view.selection.is_empty()),
            recent: self.settings.recent.clone(),
            theme: self.settings.theme,
            quantized: doc.is_some_and(Document::is_quantized),
        }
    }

    /// The window's title follows the open model.
    fn update_title(&mut self, ctx: &egui::Context) {
        let title = match (&self.doc, &self.opening) {
            (_, Some(o)) => format!("qdq-studio — opening {}", o.label),
            (Some(doc), None) => format!("qdq-studio — {}", doc.opened.source.label()),
            (None, None) => "qdq-studio".to_owned(),
        };
        if title != self.window.title {
            ctx.send_viewport_cmd(egui::ViewportCommand::Title(title.clone()));
            self.window.title = title;
        }
    }

    /// Open-to-first-frame and compare-to-heat-map, once their frame is drawn.
    fn record_timings(&mut self) {
        let timing = &mut self.timing;
        if std::mem::take(&mut timing.heat_installed)
            && let Some(started) = timing.compare_requested.take()
        {
            timing.metrics.compare_to_heat_map = Some(started.elapsed());
            tracing::info!("quantize & compare to heat map: {:?}", started.elapsed());
        }
        if let Some(started) = timing.opened_at.take() {
            timing.metrics.open_to_first_frame = Some(started.elapsed());
            tracing::info!("open to first frame: {:?}", started.elapsed());
        }
    }

    /// Notes that quantize & compare was asked for now (for its heat-map timing).
    pub(crate) fn compare_started(&mut self) {
        self.timing.compare_requested = Some(Instant::now());
    }

    /// Notes that a new heat map is installed (drawn next frame).
    pub(crate) fn heat_map_installed(&mut self) {
        self.timing.heat_installed = true;
    }

    /// The opening job's progress, for the progress box.
    fn opening_view(&mut self) -> Option<OpeningView> {
        let opening = self.opening.as_mut()?;
        let progress = opening.job.poll_progress().cloned();
        Some(OpeningView {
            label: opening.label.clone(),
            progress,
            elapsed: opening.started.elapsed(),
        })
    }

    pub(crate) fn cancel_open(&mut self) {
        if self.opening.take().is_some() {
            self.window.status = "Opening cancelled".to_owned();
        }
    }
}

impl eframe::App for Studio {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        Studio::ui(self, ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.settings);
    }
}

/// Runs on `data` again, as it was chosen (random data included: chosen before).
fn restore_data(settings: &mut RunSettings, data: &ModelData) {
    settings.calibration = data.calibration.clone();
    settings.evaluation = data.evaluation.clone();
    settings.evaluate_on_calibration = data.evaluate_on_calibration;
    settings.random_chosen = true;
}

/// The data `doc` is run on, with the float model its comparisons measure against.
fn model_data(doc: &Document, float_model: Option<PathBuf>) -> ModelData {
    let settings = &doc.work.settings;
    ModelData {
        calibration: settings.calibration.clone(),
        evaluation: settings.evaluation.clone(),
        evaluate_on_calibration: settings.evaluate_on_calibration,
        float_model,
    }
}
