//! The window's own state, apart from any open model: error notices, the status line, the
//! path field, the Help windows, the op-type filter, the theme as applied, and how quitting
//! stands. Widget state only; each piece is drawn by [`crate::app::dialogs`] or
//! [`crate::app::panels`] and changed by [`crate::app::Studio::apply`].

/// An error shown in the window until dismissed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// One line: what failed.
    pub title: String,
    /// The full cause.
    pub detail: String,
}

/// What a path field is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathPurpose {
    /// A model to open.
    OpenModel,
    /// Where to save the recipe.
    SaveRecipe,
    /// A recipe to load.
    LoadRecipe,
    /// Where to save calibration statistics.
    SaveStatistics,
    /// Statistics to load.
    LoadStatistics,
    /// The calibration data file or folder.
    CalibrationData,
    /// The evaluation data file or folder.
    EvaluationData,
    /// The float model a quantized model is compared against.
    FloatModel,
    /// The tokenizer of the calibration (`false`) or evaluation (`true`) text.
    Tokenizer(bool),
}

/// The path field window (fallback for native dialogs, and File ▸ Open path…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPrompt {
    /// What the path is for.
    pub purpose: PathPurpose,
    /// The text typed so far.
    pub text: String,
    /// A note shown above the field (why it opened instead of a dialog).
    pub note: Option<String>,
}

/// The window's chrome: notices, status, the small windows and the theme.
#[derive(Debug, Clone)]
pub struct WindowState {
    /// Errors waiting to be dismissed.
    pub notices: Vec<Notice>,
    /// The status bar's message.
    pub status: String,
    /// The path field, while open.
    pub prompt: Option<PathPrompt>,
    /// Help ▸ Keyboard shortcuts is open.
    pub show_shortcuts: bool,
    /// Help ▸ About is open.
    pub show_about: bool,
    /// The op-type list's filter.
    pub op_filter: String,
    /// The search field takes the keyboard next frame.
    pub focus_search: bool,
    /// The theme last applied to the window.
    pub theme_applied: Option<egui::ThemePreference>,
    /// The window's theme as of the last frame (documents are built for it).
    pub dark: bool,
    /// The title last sent to the window.
    pub title: String,
}

impl Default for WindowState {
    fn default() -> Self {
        WindowState {
            notices: Vec::new(),
            status: "Ready".to_owned(),
            prompt: None,
            show_shortcuts: false,
            show_about: false,
            op_filter: String::new(),
            focus_search: false,
            theme_applied: None,
            dark: true,
            title: String::new(),
        }
    }
}

/// How quitting (or leaving the open model for another) stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitState {
    /// Close the window at the end of this frame.
    pub quit: bool,
    /// The user chose to quit without saving (the close is not asked about again).
    pub confirmed: bool,
    /// The unsaved-work question is showing.
    pub ask_unsaved: bool,
    /// Go on (quit, or open `open_after`) when the running save succeeds.
    pub after_save: bool,
    /// The model to open once the unsaved-work question is answered; `None` when the
    /// question is about quitting.
    pub open_after: Option<crate::app::Source>,
}
