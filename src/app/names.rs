//! Long tensor and node names in narrow columns. An exported transformer's names run to 80
//! characters of which the end tells them apart (`…/layer.2/attention/self/MatMul_1`), so a
//! name that does not fit loses its start, not its end; the whole name stays in the tooltip
//! and in what screen readers (and the tests) read.

use egui::{Response, RichText, Sense, Ui, WidgetInfo, WidgetType};

/// `text` cut to at most `max_chars` characters, its end replaced by an ellipsis when it is
/// longer (a box label or a detail line, where the start says what it is).
pub fn elide_end(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// The end of `name` that fits in `width` points in `font`, behind an ellipsis; `name` itself
/// when it fits.
pub fn elide_start(ui: &Ui, name: &str, font: &egui::FontId, width: f32) -> String {
    let fits = |text: &str| {
        ui.ctx().fonts_mut(|f| {
            f.layout_no_wrap(text.to_owned(), font.clone(), egui::Color32::WHITE)
                .size()
                .x
        }) <= width
    };
    if fits(name) {
        return name.to_owned();
    }
    let starts: Vec<usize> = name.char_indices().map(|(i, _)| i).collect();
    // The fewest characters dropped from the start that make it fit (binary search: the
    // width shrinks as more is dropped).
    let (mut lo, mut hi) = (1, starts.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fits(&format!("…{}", &name[starts[mid]..])) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    match starts.get(lo) {
        Some(&at) => format!("…{}", &name[at..]),
        None => "…".to_owned(),
    }
}

/// A link showing as much of the end of `name` as fits the room left in the row, the whole
/// name on hover and to assistive technology.
pub fn name_link(ui: &mut Ui, name: &str) -> Response {
    let width = ui.available_width();
    elided(ui, name, width, egui::TextStyle::Body, true)
}

/// `name` in monospace within `width` points (its start elided when longer), as a link or a
/// label; the whole name on hover and to assistive technology.
pub fn mono_name(ui: &mut Ui, name: &str, width: f32, link: bool) -> Response {
    elided(ui, name, width, egui::TextStyle::Monospace, link)
}

fn elided(ui: &mut Ui, name: &str, width: f32, style: egui::TextStyle, link: bool) -> Response {
    let font = style.resolve(ui.style());
    let shown = elide_start(ui, name, &font, width.max(40.0));
    let elided = shown != name;
    let mut text = RichText::new(shown).font(font);
    if link {
        text = text.color(ui.visuals().hyperlink_color);
    }
    let label = egui::Label::new(text);
    let response = if link {
        ui.add(label.sense(Sense::click()))
            .on_hover_cursor(egui::CursorIcon::PointingHand)
    } else {
        ui.add(label)
    };
    let kind = if link {
        WidgetType::Link
    } else {
        WidgetType::Label
    };
    response.widget_info(|| WidgetInfo::labeled(kind, true, name));
    if elided {
        response.on_hover_text(name)
    } else {
        response
    }
}
