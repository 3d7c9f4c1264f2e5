//! Everything the user can do in the studio, as values: menus, buttons, shortcuts, the
//! context menu and tests all produce [`Command`]s, and [`crate::app::Studio::apply`] is the
//! one place that carries them out.

use std::path::PathBuf;

use egui::{Key, KeyboardShortcut, Modifiers};

use crate::model::NodeId;
use crate::recipe::NodePrecision;

/// How a click changes the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectMode {
    /// Select only this node.
    Replace,
    /// Add the node, or remove it when already selected (Shift/Ctrl+click).
    Toggle,
}

/// One user action, by kind: each kind goes to the code that carries it out, and the compiler
/// checks that every command of a kind is handled there.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The application: open a model, save and load recipes, the recent list, its own
    /// windows and theme, quitting and the unsaved-changes question.
    App(AppCommand),
    /// A setting of the open model's recipe: op types, target, mode, techniques (undoable).
    Recipe(RecipeCommand),
    /// An edit of the nodes' choices in the recipe (exclusions, precisions, the subgraph),
    /// and undo and redo.
    Edit(EditCommand),
    /// Quantization work on the open model and its results: calibrate, compare, scans and
    /// searches, statistics and saves, the data and the float model.
    Work(WorkCommand),
    /// What the graph shows: the selection, search, side by side and the camera; nothing
    /// here changes the recipe.
    View(ViewCommand),
}

/// The application: open a model, save and load recipes, the recent list, its own windows
/// and theme, quitting and the unsaved-changes question.
#[derive(Debug, Clone, PartialEq)]
pub enum AppCommand {
    /// File ▸ Open…: the native dialog (or the path field when none is available).
    OpenDialog,
    /// File ▸ Open model folder…: a folder holding a model (onnxruntime-genai's, named by its
    /// `genai_config.json`, or one `.onnx` file), picked in the native dialog.
    OpenFolderDialog,
    /// File ▸ Open path…: the path field.
    OpenPathPrompt,
    /// Open this model file.
    Open(PathBuf),
    /// Open the bundled sample.
    OpenSample,
    /// File ▸ Save recipe…
    SaveRecipeDialog,
    /// Save the recipe to this file.
    SaveRecipe(PathBuf),
    /// File ▸ Load recipe…
    LoadRecipeDialog,
    /// Load the recipe in this file.
    LoadRecipe(PathBuf),
    /// File ▸ Recent ▸ Clear recent.
    ClearRecent,
    /// Stop opening the model being opened (the one open stays).
    CancelOpen,
    /// Close the window (asks first when there is unsaved work).
    Quit,
    /// The unsaved-work question: go on without saving (quit, or open the model asked for).
    Discard,
    /// The unsaved-work question: save the quantized model, then go on.
    SaveThenGoOn,
    /// The unsaved-work question: stay.
    KeepWorking,
    /// Help ▸ Keyboard shortcuts.
    ShowShortcuts,
    /// Help ▸ About.
    ShowAbout,
    /// View ▸ Theme.
    SetTheme(egui::ThemePreference),
}

impl From<AppCommand> for Command {
    fn from(command: AppCommand) -> Self {
        Command::App(command)
    }
}

/// A setting of the open model's recipe: op types, target, mode, techniques (undoable).
#[derive(Debug, Clone, PartialEq)]
pub enum RecipeCommand {
    /// Check (quantize) or uncheck (exclude) an op type.
    SetOpType {
        /// The op type.
        op_type: String,
        /// Quantize it.
        quantize: bool,
    },
    /// Turn the recipe's automatic precision on or off.
    SetAutoPrecision(bool),
    /// Turn automatic precision's saturation guard (7-bit weights for the integer kernels) on
    /// or off.
    SetSaturationGuard(bool),
    /// Compute MatMul/Gemm weights' outlier rows in float (part of automatic precision).
    SetOutlierRows(bool),
    /// Choose where the model will run: the target's settings are applied at once.
    SetTarget(crate::recipe::Target),
    /// The execution provider changed from `.0` to `.1`: a recipe whose target followed the
    /// old provider follows the new one.
    FollowEp(crate::runtime::EpSpec, crate::runtime::EpSpec),
    /// Switch the recipe's mode (int8, fp8, int4), with the types it needs.
    SetMode(crate::recipe::QuantMode),
    /// Choose the int4 method (AWQ-lite, AWQ-clip, RTN).
    SetInt4Method(crate::recipe::Int4Method),
    /// Choose the int4 output form (DequantizeLinear or MatMulNBits).
    SetInt4Output(crate::recipe::Int4Output),
    /// Turn SmoothQuant (int8) on or off.
    SetSmoothQuant(bool),
    /// Turn simplification (folding what the runtime fuses before quantizing) on or off.
    SetSimplify(bool),
    /// Turn cross-layer equalization on or off.
    SetEqualize(bool),
    /// Turn bias correction on or off.
    SetBiasCorrection(bool),
    /// Turn GPTQ rounding on or off.
    SetGptq(bool),
    /// Turn layer-wise range choice on or off.
    SetLayerwiseRange(bool),
    /// One scale per output channel of each weight (true) or one per weight (false).
    SetPerChannel(bool),
    /// Weight ranges of least squared error (on) or the weights' extremes (off).
    SetMseWeightRanges(bool),
}

impl From<RecipeCommand> for Command {
    fn from(command: RecipeCommand) -> Self {
        Command::Recipe(command)
    }
}

/// An edit of the nodes' choices in the recipe (exclusions, precisions, the subgraph), and
/// undo and redo.
#[derive(Debug, Clone, PartialEq)]
pub enum EditCommand {
    /// X: exclude the selected nodes, or include them again when all are excluded.
    ToggleExclusion,
    /// Exclude (`true`) or include (`false`) nodes by name.
    SetExcluded(Vec<NodeId>, bool),
    /// Give nodes another precision (`None`: the recipe's 8 bits); nodes it cannot apply to
    /// (4-bit weights on a node without a constant weight) are left as they are.
    SetPrecision(Vec<NodeId>, Option<NodePrecision>),
    /// Exclude every node of this node's op type.
    ExcludeOpTypeOf(NodeId),
    /// Exclude this node and everything after it.
    ExcludeAfter(NodeId),
    /// Make this node the subgraph's start (`None` clears).
    SubgraphStart(Option<NodeId>),
    /// Make this node the subgraph's end (`None` clears).
    SubgraphEnd(Option<NodeId>),
    /// Undo the last recipe change.
    Undo,
    /// Redo it.
    Redo,
}

impl From<EditCommand> for Command {
    fn from(command: EditCommand) -> Self {
        Command::Edit(command)
    }
}

/// Quantization work on the open model and its results: calibrate, compare, scans and
/// searches, statistics and saves, the data and the float model.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkCommand {
    /// Calibrate with the panel's settings.
    Calibrate,
    /// Build the QDQ model from the cached statistics and compare it with the float one.
    QuantizeCompare,
    /// Show this sample of the evaluation data side by side.
    ShowSample(usize),
    /// Rank the quantized nodes by their cost to the outputs.
    ScanSensitivity,
    /// Leave the most harmful nodes in float until the panel's target is met.
    AutoExclude,
    /// Choose each weight's range (its extremes, or the clipped range of least squared
    /// error) by the outputs on the evaluation data, one real run per weight.
    ChooseWeightRanges,
    /// Leave out of quantization the Q/DQ groups that make the model slower on the chosen
    /// provider, while the outputs stay within 1 dB (measured on the evaluation data).
    TuneLatency,
    /// Take the auto-exclude result's recipe-wide change at this index into the recipe.
    ApplyAlternative(usize),
    /// Cancel the running task.
    CancelTask,
    /// Calibration ▸ Save statistics…
    SaveStatisticsDialog,
    /// Save the statistics to this file.
    SaveStatistics(PathBuf),
    /// Calibration ▸ Load statistics…
    LoadStatisticsDialog,
    /// Load statistics from this file.
    LoadStatistics(PathBuf),
    /// File ▸ Save quantized model…: the save window.
    SaveQuantizedDialog,
    /// Save the QDQ model as the save window says.
    SaveQuantized,
    /// Close the save window without saving.
    CloseSaveWindow,
    /// Colour the graph by per-tensor SQNR (or not), flagging nodes under the threshold.
    SetHeatMap {
        /// Show the heat map.
        shown: bool,
        /// Which error it shows.
        kind: crate::eval::tensor_error::tensors::ErrorKind,
        /// The threshold in dB.
        threshold_db: f32,
    },
    /// Choose an output's kind (which task metrics it gets), or go back to the detected one
    /// (`None`).
    SetOutputKind {
        /// The output.
        output: String,
        /// The kind chosen.
        kind: Option<crate::eval::compare::OutputKind>,
    },
    /// Fetch the ONNX Runtime build of this flavour.
    InstallRuntime(crate::runtime::Flavor),
    /// Set the recipe's calibration method.
    SetMethod(crate::calib::range::RangeMethod),
    /// Set (or clear, `None`) a tensor's override.
    SetTensorOverride(String, Option<crate::recipe::TensorOverride>),
    /// Show this tensor's histogram.
    ShowHistogram(String),
    /// Select these nodes by name and centre the view on the first.
    RevealNodes(Vec<String>),
    /// Browse for the calibration (`false`) or evaluation (`true`) data.
    BrowseData {
        /// Which data.
        evaluation: bool,
        /// The kind of source browsed for (a folder for images and test data, a text file,
        /// else arrays).
        kind: crate::app::work::data::DataKind,
    },
    /// Browse for the tokenizer that tokenizes the calibration (`false`) or evaluation
    /// (`true`) text.
    BrowseTokenizer {
        /// Which data.
        evaluation: bool,
    },
    /// Use this `tokenizer.json` for the calibration or evaluation text.
    SetTokenizer {
        /// Which data.
        evaluation: bool,
        /// The tokenizer file.
        path: PathBuf,
    },
    /// Use this path for the calibration or evaluation data.
    SetDataPath {
        /// Which data.
        evaluation: bool,
        /// The file or folder.
        path: PathBuf,
    },
    /// Pick the float model an open quantized model is compared against (native dialog).
    ChooseFloatModel,
    /// Compare the open quantized model against this float model.
    SetFloatModel(PathBuf),
}

impl From<WorkCommand> for Command {
    fn from(command: WorkCommand) -> Self {
        Command::Work(command)
    }
}

/// What the graph shows: the selection, search, side by side and the camera; nothing here
/// changes the recipe.
#[derive(Debug, Clone, PartialEq)]
pub enum ViewCommand {
    /// Select a node.
    Select(NodeId, SelectMode),
    /// Select exactly these nodes.
    SelectNodes(Vec<NodeId>),
    /// Clear the selection.
    ClearSelection,
    /// Ctrl+F: show the search bar.
    OpenSearch,
    /// Search for this text.
    Search(String),
    /// Next match.
    SearchNext,
    /// Previous match.
    SearchPrevious,
    /// Escape: close the search bar, else clear the selection.
    Escape,
    /// Show the whole graph.
    Fit,
    /// Zoom to the selection.
    ZoomToSelection,
    /// Show or hide the other model of the float/QDQ pair beside the graph.
    ToggleSideBySide,
    /// Zoom in.
    ZoomIn,
    /// Zoom out.
    ZoomOut,
    /// Pan the view by this many points.
    Pan(egui::Vec2),
}

impl From<ViewCommand> for Command {
    fn from(command: ViewCommand) -> Self {
        Command::View(command)
    }
}

/// A keyboard shortcut and what it does, as the Shortcuts window lists it.
#[derive(Debug, Clone, Copy)]
pub struct Shortcut {
    /// The keys.
    pub keys: KeyboardShortcut,
    /// What it does, for the Shortcuts window.
    pub description: &'static str,
    /// Fires even while a text field has the keyboard.
    pub global: bool,
    /// The command.
    pub command: fn() -> Command,
}

const fn shortcut(
    modifiers: Modifiers,
    key: Key,
    description: &'static str,
    global: bool,
    command: fn() -> Command,
) -> Shortcut {
    Shortcut {
        keys: KeyboardShortcut::new(modifiers, key),
        description,
        global,
        command,
    }
}

const CTRL: Modifiers = Modifiers::COMMAND;
const CTRL_SHIFT: Modifiers = Modifiers {
    shift: true,
    ..Modifiers::COMMAND
};
const NONE: Modifiers = Modifiers::NONE;
const SHIFT: Modifiers = Modifiers::SHIFT;

/// Every shortcut, most specific first (Ctrl+Shift+Z before Ctrl+Z): the input handler and
/// the Shortcuts window both read this table, so they cannot disagree.
pub const SHORTCUTS: &[Shortcut] = &[
    shortcut(
        CTRL_SHIFT,
        Key::O,
        "Open a model by typing its path",
        true,
        || Command::App(AppCommand::OpenPathPrompt),
    ),
    shortcut(CTRL, Key::O, "Open a model", true, || {
        Command::App(AppCommand::OpenDialog)
    }),
    shortcut(CTRL_SHIFT, Key::S, "Save the quantized model", true, || {
        Command::Work(WorkCommand::SaveQuantizedDialog)
    }),
    shortcut(CTRL, Key::S, "Save the recipe", true, || {
        Command::App(AppCommand::SaveRecipeDialog)
    }),
    shortcut(CTRL, Key::L, "Load a recipe", true, || {
        Command::App(AppCommand::LoadRecipeDialog)
    }),
    shortcut(CTRL_SHIFT, Key::Z, "Redo", false, || {
        Command::Edit(EditCommand::Redo)
    }),
    shortcut(CTRL, Key::Y, "Redo", false, || {
        Command::Edit(EditCommand::Redo)
    }),
    shortcut(CTRL, Key::Z, "Undo", false, || {
        Command::Edit(EditCommand::Undo)
    }),
    shortcut(
        CTRL,
        Key::F,
        "Find a node by name, op type or tensor",
        true,
        || Command::View(ViewCommand::OpenSearch),
    ),
    shortcut(SHIFT, Key::F3, "Previous match", true, || {
        Command::View(ViewCommand::SearchPrevious)
    }),
    shortcut(NONE, Key::F3, "Next match", true, || {
        Command::View(ViewCommand::SearchNext)
    }),
    shortcut(
        NONE,
        Key::X,
        "Exclude / include the selected nodes",
        false,
        || Command::Edit(EditCommand::ToggleExclusion),
    ),
    shortcut(NONE, Key::F, "Fit the whole graph", false, || {
        Command::View(ViewCommand::Fit)
    }),
    shortcut(NONE, Key::Z, "Zoom to the selection", false, || {
        Command::View(ViewCommand::ZoomToSelection)
    }),
    shortcut(NONE, Key::Plus, "Zoom in", false, || {
        Command::View(ViewCommand::ZoomIn)
    }),
    shortcut(NONE, Key::Equals, "Zoom in", false, || {
        Command::View(ViewCommand::ZoomIn)
    }),
    shortcut(NONE, Key::Minus, "Zoom out", false, || {
        Command::View(ViewCommand::ZoomOut)
    }),
    shortcut(NONE, Key::ArrowUp, "Pan up", false, || {
        Command::View(ViewCommand::Pan(egui::vec2(0.0, 80.0)))
    }),
    shortcut(NONE, Key::ArrowDown, "Pan down", false, || {
        Command::View(ViewCommand::Pan(egui::vec2(0.0, -80.0)))
    }),
    shortcut(NONE, Key::ArrowLeft, "Pan left", false, || {
        Command::View(ViewCommand::Pan(egui::vec2(80.0, 0.0)))
    }),
    shortcut(NONE, Key::ArrowRight, "Pan right", false, || {
        Command::View(ViewCommand::Pan(egui::vec2(-80.0, 0.0)))
    }),
    shortcut(
        NONE,
        Key::Escape,
        "Close the search, else clear the selection",
        true,
        || Command::View(ViewCommand::Escape),
    ),
    shortcut(CTRL, Key::R, "Calibrate", true, || {
        Command::Work(WorkCommand::Calibrate)
    }),
    shortcut(NONE, Key::F5, "Quantize & compare", true, || {
        Command::Work(WorkCommand::QuantizeCompare)
    }),
    shortcut(NONE, Key::F1, "Keyboard shortcuts", true, || {
        Command::App(AppCommand::ShowShortcuts)
    }),
    shortcut(CTRL, Key::Q, "Quit", true, || {
        Command::App(AppCommand::Quit)
    }),
];

/// The shortcuts pressed this frame, consumed from `input`. While a text field has the
/// keyboard only the global ones fire (Ctrl+Z there undoes typing, X types an x).
pub fn pressed(input: &mut egui::InputState, text_focused: bool) -> Vec<Command> {
    SHORTCUTS
        .iter()
        .filter(|s| s.global || !text_focused)
        .filter(|s| input.consume_shortcut(&s.keys))
        .map(|s| (s.command)())
        .collect()
}

/// The menu label of a shortcut ("Ctrl+Shift+Z").
pub fn label(shortcut: &KeyboardShortcut) -> String {
    shortcut.format(&egui::ModifierNames::NAMES, cfg!(target_os = "macos"))
}

/// The shortcut of the first table entry that issues `command`, for menus.
pub fn for_command(command: &Command) -> Option<KeyboardShortcut> {
    SHORTCUTS
        .iter()
        .find(|s| (s.command)() == *command)
        .map(|s| s.keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redo_is_matched_before_undo_and_text_fields_keep_plain_keys() {
        let mut input = egui::InputState::default();
        input.events.push(egui::Event::Key {
            key: Key::Z,
            physical_key: None,
            pressed: true,
            repeat: false,
            modifiers: CTRL_SHIFT,
        });
        input.modifiers = CTRL_SHIFT;
        assert_eq!(
            pressed(&mut input, false),
            vec![Command::Edit(EditCommand::Redo)]
        );

        let mut input = egui::InputState::default();
        input.events.push(egui::Event::Key {
            key: Key::X,
            physical_key: None,
            pressed: true,
            repeat: false,
            modifiers: NONE,
        });
        assert!(pressed(&mut input.clone(), true).is_empty(), "typing an x");
        assert_eq!(
            pressed(&mut input, false),
            vec![Command::Edit(EditCommand::ToggleExclusion)]
        );
    }

    #[test]
    fn every_menu_command_shows_its_shortcut() {
        assert_eq!(
            for_command(&Command::Edit(EditCommand::Undo)).map(|k| label(&k)),
            Some("Ctrl+Z".to_owned())
        );
    }
}
