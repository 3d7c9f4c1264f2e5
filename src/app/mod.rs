//! The studio: the eframe window over the engine.
//!
//! [`Studio`] holds the window's state and draws it; every user action is a
//! [`command::Command`] carried out in one place ([`Studio::apply`]). The parts that need no
//! window live beside it and are tested on their own: recipe editing with undo ([`edit`]),
//! the layered layout ([`layout`]), search ([`search`]), weight statistics ([`weights`]).
//! The graph view ([`canvas`]) draws through egui_graphs' display traits with navigation of
//! its own, so an idle window does not repaint.

pub mod canvas;
pub mod command;
pub mod dialogs;
pub mod document;
mod document_commands;
pub mod document_parts;
pub mod edit;
pub mod inspector;
pub mod layout;
mod names;
pub mod panel_state;
pub mod panels;
pub mod runtime_status;
pub mod search;
pub mod settings;
pub mod side_view;
pub mod states;
pub mod studio;
pub mod weights;
pub mod window;
pub mod work;
mod work_actions;
pub mod work_panel;

use std::path::PathBuf;

pub use document::Source;
pub use settings::Settings;
pub use studio::{Studio, StudioOptions};

/// The app icon (`assets/icon/qdq-studio.png`, also the desktop entry's), for the window.
fn window_icon() -> egui::IconData {
    const ICON: &[u8] = include_bytes!("../../assets/icon/qdq-studio.png");
    match image::load_from_memory_with_format(ICON, image::ImageFormat::Png) {
        Ok(icon) => {
            let rgba = icon.into_rgba8();
            egui::IconData {
                width: rgba.width(),
                height: rgba.height(),
                rgba: rgba.into_raw(),
            }
        }
        // The bundled PNG always decodes; without it the window has the toolkit's icon.
        Err(_) => egui::IconData::default(),
    }
}

/// Opens the studio window on `model` (the bundled sample when `None`) and runs it until the
/// window closes.
pub fn run(model: Option<PathBuf>) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("qdq-studio")
            .with_app_id("qdq-studio")
            .with_inner_size([1440.0, 900.0])
            .with_min_inner_size([800.0, 500.0])
            .with_drag_and_drop(true)
            .with_icon(std::sync::Arc::new(window_icon())),
        renderer: eframe::Renderer::Glow,
        ..Default::default()
    };
    eframe::run_native(
        "qdq-studio",
        options,
        Box::new(move |cc| {
            let settings: Settings = cc
                .storage
                .and_then(|s| eframe::get_value(s, eframe::APP_KEY))
                .unwrap_or_default();
            let mut studio = Studio::new(StudioOptions::default(), settings);
            studio.open(model.map_or(Source::Sample, Source::File));
            Ok(Box::new(studio))
        }),
    )
    .map_err(|e| anyhow::anyhow!("the studio window could not start: {e}"))
}
