//! The work panel's own state: which tab shows, what the histogram and side-by-side views
//! are showing, the heat map's switch and threshold, and the Save window's fields. Widget
//! state only; what runs produced is in [`crate::app::work::results`].

/// Textures of one image-like output shown side by side: float, quantized, difference.
pub struct OutputImages {
    /// (sample, output, 0): what they were drawn for.
    pub key: (usize, usize, usize),
    /// Float, quantized, |difference|.
    pub textures: [egui::TextureHandle; 3],
    /// The largest |difference| (the difference image's scale).
    pub max_difference: f32,
}

/// Which tab of the work panel is showing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkTab {
    /// Data, EP, method; run calibration.
    #[default]
    Calibrate,
    /// Activation histograms and ranges.
    Histogram,
    /// Quantize & compare results.
    Results,
    /// Sensitivity scan and auto-exclude.
    Sensitivity,
}

/// The File ▸ Save quantized model window.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveDialog {
    /// Where to write.
    pub path: String,
    /// Weights in a `.data` file.
    pub external_data: bool,
    /// Also write the recipe and the report.
    pub companions: bool,
    /// Quit once saved (the save was started from the unsaved-work prompt).
    pub then_quit: bool,
}

/// The work panel's state for one open model.
pub struct PanelState {
    /// The tab showing.
    pub tab: WorkTab,
    /// The tensor the histogram shows.
    pub histogram_tensor: Option<String>,
    /// Filter of the histogram's tensor list.
    pub histogram_filter: String,
    /// Log-scale counts.
    pub histogram_log: bool,
    /// Colour the graph by per-tensor SQNR.
    pub heat_map: bool,
    /// Which error the heat map shows.
    pub heat_kind: crate::eval::tensor_error::tensors::ErrorKind,
    /// Nodes under this SQNR (dB) are flagged on the heat map.
    pub heat_threshold_db: f32,
    /// The output shown side by side.
    pub output_index: usize,
    /// The sample shown side by side.
    pub sample: usize,
    /// Side-by-side images of the shown output (float, quantized, difference).
    pub output_images: Option<OutputImages>,
    /// The save window, while open.
    pub save_dialog: Option<SaveDialog>,
    /// The graph's legend shown whole (`None`: whole when the graph view has room for it).
    pub legend_open: Option<bool>,
    /// The float model and its QDQ model shown side by side.
    pub side_by_side: bool,
}

impl Default for PanelState {
    fn default() -> Self {
        PanelState {
            tab: WorkTab::Calibrate,
            histogram_tensor: None,
            histogram_filter: String::new(),
            histogram_log: true,
            heat_map: false,
            heat_kind: crate::eval::tensor_error::tensors::ErrorKind::Cumulative,
            heat_threshold_db: 20.0,
            output_index: 0,
            sample: 0,
            output_images: None,
            save_dialog: None,
            legend_open: None,
            side_by_side: false,
        }
    }
}
