//! The charts of quantization error, drawn with plotters onto any backend: SVG text for the
//! HTML and Markdown reports, an RGB buffer that becomes a texture in the studio. One function
//! per chart serves both, so what the report shows is what the studio shows.

use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::calib::histogram::Histogram;
use crate::eval::tensor_error::tensors::{TensorErrors, WeightError};

/// The font family the charts use (registered from the bundled DejaVu Sans, so charts look
/// the same on every machine and need no system font lookup).
const FONT: &str = "sans-serif";

/// DejaVu Sans, bundled (see `assets/fonts/NOTICE.md`).
static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// SQNR values are drawn clipped to this ceiling: an exact tensor has infinite SQNR.
const SQNR_CEILING_DB: f64 = 120.0;

/// Colour of the float-against-QDQ series and of histogram bars.
const BLUE: RGBColor = RGBColor(31, 119, 180);
/// Colour of the pre-Q-against-post-DQ series.
const ORANGE: RGBColor = RGBColor(255, 127, 14);
/// Colour of range markers and of the worst points.
const ALERT: RGBColor = RGBColor(214, 39, 40);

/// A chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The backend failed (the message is plotters').
    #[error("the chart could not be drawn: {0}")]
    Draw(String),
    /// The bundled font could not be parsed.
    #[error("the bundled chart font could not be loaded")]
    Font,
}

fn draw_err(e: impl std::fmt::Display) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// Registers the bundled font with plotters once per process (plotters keeps its fonts in a
/// registry of its own; registering again would be harmless but wasteful).
fn ensure_font() -> Result<(), ChartError> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        result = plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
            .map_err(|_| ChartError::Font);
    });
    result
}

/// Renders a chart to SVG text of `width` × `height` pixels.
pub fn to_svg<F>(width: u32, height: u32, draw: F) -> Result<String, ChartError>
where
    F: FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), ChartError>,
{
    ensure_font()?;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        area.fill(&WHITE).map_err(draw_err)?;
        draw(&area)?;
        area.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// Renders a chart to an RGB buffer (`width * height * 3` bytes, rows top to bottom): what the
/// studio uploads as a texture.
pub fn to_rgb<F>(width: u32, height: u32, draw: F) -> Result<Vec<u8>, ChartError>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), ChartError>,
{
    ensure_font()?;
    let mut buffer = vec![0u8; width as usize * height as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut buffer, (width, height)).into_drawing_area();
        area.fill(&WHITE).map_err(draw_err)?;
        draw(&area)?;
        area.present().map_err(draw_err)?;
    }
    Ok(buffer)
}

fn finite_db(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.min(SQNR_CEILING_DB)
    }
}

/// The y range of a set of dB values, with a margin.
fn db_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let margin = ((hi - lo) * 0.08).max(1.0);
    (lo - margin, hi + margin)
}

/// A chart of dB values against a position along the graph, with its caption and mesh drawn.
fn db_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x_desc: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, ChartError> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18).into_font().color(&BLACK))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("SQNR (dB)")
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    Ok(chart)
}

/// Per-tensor SQNR along the float graph's order: float against QDQ (the error as it has
/// accumulated by that tensor), the local error (the producing node's own quantization with
/// float inputs, when measured) and pre-Q against post-DQ (the error this Q/DQ adds alone).
/// The `worst` lowest float-against-QDQ points are marked, the very worst one named.
pub fn sqnr_along_graph<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    tensors: &TensorErrors,
    worst: usize,
) -> Result<(), ChartError> {
    let activations = &tensors.activations;
    let xmodel: Vec<f64> = activations
        .iter()
        .map(|a| finite_db(a.xmodel_sqnr_db))
        .collect();
    let qdq: Vec<f64> = activations
        .iter()
        .map(|a| finite_db(a.qdq_sqnr_db))
        .collect();
    let local: Vec<(f64, f64)> = activations
        .iter()
        .enumerate()
        .filter_map(|(i, a)| Some((i as f64, finite_db(tensors.local_of(&a.tensor)?))))
        .collect();
    let (lo, hi) = db_range(
        xmodel
            .iter()
            .chain(&qdq)
            .copied()
            .chain(local.iter().map(|&(_, v)| v)),
    );
    let n = activations.len().max(2);
    let mut chart = db_chart(
        area,
        "Per-tensor SQNR along the graph",
        "quantized activation, in graph order",
        0f64..(n - 1) as f64,
        lo..hi,
    )?;
    chart
        .draw_series(LineSeries::new(
            qdq.iter().enumerate().map(|(i, &v)| (i as f64, v)),
            ORANGE.stroke_width(1),
        ))
        .map_err(draw_err)?
        .label("pre-Q vs post-DQ (this Q/DQ alone)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], ORANGE.stroke_width(2)));
    if !local.is_empty() {
        let colour = RGBColor(30, 140, 90);
        chart
            .draw_series(LineSeries::new(local, colour.stroke_width(1)))
            .map_err(draw_err)?
            .label("local (this node alone, float inputs)")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    chart
        .draw_series(LineSeries::new(
            xmodel.iter().enumerate().map(|(i, &v)| (i as f64, v)),
            BLUE.stroke_width(2),
        ))
        .map_err(draw_err)?
        .label("float vs QDQ (accumulated)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLUE.stroke_width(2)));
    let mut order: Vec<usize> = (0..activations.len()).collect();
    order.sort_by(|&a, &b| xmodel[a].total_cmp(&xmodel[b]));
    chart
        .draw_series(
            order
                .iter()
                .take(worst)
                .map(|&i| Circle::new((i as f64, xmodel[i]), 4, ALERT.filled())),
        )
        .map_err(draw_err)?;
    if let Some(&i) = order.first().filter(|_| worst > 0) {
        // Above the point (the legend sits low), ending at it when it is in the right half so
        // the name stays inside the plot.
        let name = short(&activations[i].tensor, 28);
        let right_half = i * 2 > n;
        let anchor = (i as f64, xmodel[i] + (hi - lo) * 0.04);
        let style = (FONT, 12).into_font().color(&ALERT).pos(Pos::new(
            if right_half { HPos::Right } else { HPos::Left },
            VPos::Bottom,
        ));
        chart
            .draw_series([Text::new(format!("worst: {name}"), anchor, style)])
            .map_err(draw_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 12))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// Shortens a tensor name for a label, keeping its end (the distinctive part).
fn short(name: &str, max: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= max {
        name.to_owned()
    } else {
        let tail: String = chars[chars.len() - (max - 1)..].iter().collect();
        format!("…{tail}")
    }
}

/// Share of the histogram's values outside `(lo, hi)`, bins partly outside counted in
/// proportion. `seen` is the smallest and largest value actually observed, when known: no
/// value lies beyond them, so a range that covers them (MinMax's) clips exactly nothing, and a
/// bin only partly inside them is read over that part.
pub fn clipped_share(histogram: &Histogram, (lo, hi): (f32, f32), seen: Option<(f32, f32)>) -> f64 {
    let total = histogram.total();
    if total == 0 {
        return 0.0;
    }
    let (low, high) = seen.map_or((f64::NEG_INFINITY, f64::INFINITY), |(a, b)| {
        (f64::from(a), f64::from(b))
    });
    if f64::from(lo) <= low && high <= f64::from(hi) {
        return 0.0;
    }
    let edges = histogram.edges();
    let outside: f64 = histogram
        .counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let (a, b) = (edges[i].max(low), edges[i + 1].min(high));
            let width = b - a;
            if c == 0 || width <= 0.0 {
                return 0.0;
            }
            let below = (f64::from(lo).min(b) - a).max(0.0);
            let above = (b - f64::from(hi).max(a)).max(0.0);
            c as f64 * ((below + above) / width).min(1.0)
        })
        .sum();
    outside / total as f64
}

/// A histogram of a tensor's values (log count axis) with the range quantization represents
/// drawn on it: values outside the red lines are clipped. `clipped` is the share clipped when
/// the caller counted it exactly; otherwise it is estimated from the histogram.
pub fn value_histogram<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    histogram: &Histogram,
    range: Option<(f32, f32)>,
    clipped: Option<f64>,
) -> Result<(), ChartError> {
    let edges = histogram.edges();
    let occupied: Vec<usize> = (0..histogram.bins())
        .filter(|&i| histogram.counts[i] > 0)
        .collect();
    let (mut lo, mut hi) = match (occupied.first(), occupied.last()) {
        (Some(&a), Some(&b)) => (edges[a], edges[b + 1]),
        _ => (-1.0, 1.0),
    };
    if let Some((a, b)) = range {
        lo = lo.min(f64::from(a));
        hi = hi.max(f64::from(b));
    }
    let margin = ((hi - lo) * 0.05).max(1e-6);
    let (lo, hi) = (lo - margin, hi + margin);
    let peak = histogram.counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(short(title, 44), (FONT, 14).into_font().color(&BLACK))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(44)
        .build_cartesian_2d(lo..hi, (0.8f64..peak * 2.0).log_scale())
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_labels(6)
        .y_labels(4)
        .label_style((FONT, 10))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()
        .map_err(draw_err)?;
    chart
        .draw_series(occupied.iter().map(|&i| {
            Rectangle::new(
                [(edges[i], 0.8), (edges[i + 1], histogram.counts[i] as f64)],
                BLUE.mix(0.85).filled(),
            )
        }))
        .map_err(draw_err)?;
    if let Some((a, b)) = range {
        for x in [f64::from(a), f64::from(b)] {
            chart
                .draw_series(LineSeries::new(
                    [(x, 0.8), (x, peak * 2.0)],
                    ALERT.stroke_width(2),
                ))
                .map_err(draw_err)?;
        }
        let clipped = clipped.unwrap_or_else(|| clipped_share(histogram, (a, b), None));
        chart
            .draw_series([Text::new(
                format!("range [{a:.3}, {b:.3}], clipped {:.3}%", clipped * 100.0),
                (lo + margin * 0.2, peak * 1.6),
                (FONT, 10).into_font().color(&ALERT),
            )])
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Weight SQNR per quantized weight (float weights against their dequantized values), in the
/// order given (the report passes graph order).
pub fn weight_error_per_layer<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    weights: &[WeightError],
) -> Result<(), ChartError> {
    let values: Vec<f64> = weights.iter().map(|w| finite_db(w.sqnr_db)).collect();
    let (_, hi) = db_range(values.iter().copied());
    let n = weights.len().max(1);
    let mut chart = db_chart(
        area,
        "Weight SQNR per layer",
        "quantized weight, in graph order",
        0f64..n as f64,
        0f64..hi.max(1.0),
    )?;
    let worst = values.iter().copied().fold(f64::INFINITY, f64::min);
    chart
        .draw_series(values.iter().enumerate().map(|(i, &v)| {
            let colour = if v == worst { ALERT } else { BLUE };
            Rectangle::new(
                [(i as f64 + 0.1, 0.0), (i as f64 + 0.9, v.max(0.0))],
                colour.filled(),
            )
        }))
        .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::tensor_error::tensors::ActivationError;

    fn activation(name: &str, xmodel: f64, qdq: f64) -> ActivationError {
        ActivationError {
            tensor: name.into(),
            qdq_sqnr_db: qdq,
            xmodel_sqnr_db: xmodel,
            range: None,
            clipped: None,
            histogram: None,
        }
    }

    #[test]
    fn svg_chart_names_the_worst_tensor() {
        let errors = TensorErrors {
            activations: vec![
                activation("conv1_out", 40.0, 45.0),
                activation("relu_7_out", 12.5, 30.0),
                activation("head", f64::INFINITY, 50.0),
            ],
            local: vec![crate::eval::tensor_error::tensors::LocalError {
                tensor: "relu_7_out".into(),
                sqnr_db: 35.0,
            }],
            ..TensorErrors::default()
        };
        let svg = to_svg(640, 320, |area| sqnr_along_graph(area, &errors, 1)).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains("relu_7_out"));
        assert!(!svg.contains("conv1_out"), "only the worst is labelled");
        assert!(
            svg.contains("local (this node alone"),
            "the local series is drawn"
        );
    }

    #[test]
    fn clipped_share_counts_bins_outside_the_range() {
        let mut h = Histogram::new(8);
        h.add(&[-3.5, -0.5, 0.5, 0.5, 3.5], 4.0);
        // Bins of width 1 over [-4, 4]: -3.5 and 3.5 lie outside [-2, 2]; half of the bin
        // [-1, 0] (one value) lies outside [-0.5, 4].
        let share = clipped_share(&h, (-2.0, 2.0), None);
        assert!((share - 0.4).abs() < 1e-9, "{share}");
        let share = clipped_share(&h, (-0.5, 4.0), None);
        assert!((share - 1.5 / 5.0).abs() < 1e-9, "{share}");
        assert_eq!(clipped_share(&Histogram::new(8), (-1.0, 1.0), None), 0.0);
        // Values seen over [-3.5, 3.5]: MinMax's range clips nothing though the outer bins
        // reach ±4; a bin partly beyond the values is read over its part inside them.
        let seen = Some((-3.5, 3.5));
        assert_eq!(clipped_share(&h, (-3.5, 3.5), seen), 0.0);
        let share = clipped_share(&h, (-3.25, 3.5), seen);
        assert!((share - 0.5 / 5.0).abs() < 1e-9, "{share}");
    }

    #[test]
    fn histogram_renders_to_rgb_with_range_marks() {
        let mut h = Histogram::new(64);
        let values: Vec<f32> = (0..1000).map(|i| (i as f32 / 100.0) - 5.0).collect();
        h.add(&values, 5.0);
        let rgb = to_rgb(320, 200, |area| {
            value_histogram(area, "t", &h, Some((-2.0, 2.0)), None)
        })
        .unwrap();
        assert_eq!(rgb.len(), 320 * 200 * 3);
        let alert_pixels = rgb
            .chunks(3)
            .filter(|p| p[0] > 180 && p[1] < 80 && p[2] < 80)
            .count();
        assert!(alert_pixels > 100, "range lines drawn: {alert_pixels}");
        let blue_pixels = rgb.chunks(3).filter(|p| p[2] > 150 && p[0] < 90).count();
        assert!(blue_pixels > 1000, "bars drawn: {blue_pixels}");
    }
}
