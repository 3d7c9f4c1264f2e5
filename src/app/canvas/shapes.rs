//! How one op-type box and one tensor edge look: egui_graphs' display traits implemented for
//! the studio's graph. The canvas ([`super::GraphCanvas`]) decides what is visible and calls
//! these for it; the shapes know nothing of navigation.

use egui::epaint::CubicBezierShape;
use egui::{Color32, CornerRadius, FontId, Pos2, Rect, Shape, Stroke, StrokeKind, Vec2};
use egui_graphs::{DisplayEdge, DisplayNode, DrawContext, EdgeProps, Node, NodeProps};
use petgraph::Directed;

use crate::app::names::elide_end;
use crate::app::states::NodeState;
use crate::model::NodeId;

/// Below this on-screen font size labels are not drawn (the boxes alone carry the colour).
const MIN_LABEL_PX: f32 = 5.5;
/// Zoom from which the node name is drawn under the op type.
const NAME_ZOOM: f32 = 1.6;

/// How a node is emphasised right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Emphasis {
    /// Nothing special.
    #[default]
    Normal,
    /// Something else is selected and this node is not next to it.
    Dimmed,
    /// A neighbour of the selection.
    Neighbour,
    /// A search match.
    Match,
    /// The search match the view is centred on.
    CurrentMatch,
}

/// What a node box shows: recomputed when the recipe, selection or search changes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeLook {
    /// Fill colour (the node's quantization state).
    pub fill: Color32,
    /// Label colour, readable on `fill`.
    pub text: Color32,
    /// Outline colour for selection and emphasis.
    pub accent: Color32,
    /// Emphasis.
    pub emphasis: Emphasis,
    /// The node has a structural problem (dangling input, on a cycle).
    pub flagged: bool,
}

/// The payload of a graph-view node: which model node it is and how to draw it.
#[derive(Debug, Clone)]
pub struct OpNode {
    /// The model node.
    pub id: NodeId,
    /// Its op type (the box's label).
    pub op_type: String,
    /// Its name (drawn when zoomed in).
    pub name: String,
    /// Box size in layout units.
    pub size: Vec2,
    /// Current look.
    pub look: NodeLook,
    /// How the model quantizes its weight (a folded DequantizeLinear), as a short tag.
    pub badge: Option<String>,
    /// Its key facts (weight shape, strides, axis …) under the op type.
    pub detail: Option<String>,
}

/// The payload of a graph-view edge: the tensor it carries.
#[derive(Debug, Clone)]
pub struct TensorEdge {
    /// The tensor's name.
    pub tensor: String,
    /// The edge closes a cycle (drawn dashed in red).
    pub cycle: bool,
    /// The edge touches the selection.
    pub emphasised: bool,
    /// Something is selected and this edge does not touch it.
    pub dimmed: bool,
    /// The quantized type of a folded Q/DQ pair on the edge (`u8`, `i8` …).
    pub badge: Option<String>,
    /// The x it runs down at, right of the boxes it would otherwise cross.
    pub detour: Option<f32>,
}

/// The graph type behind the view.
pub type ViewGraph = egui_graphs::Graph<OpNode, TensorEdge, Directed, u32, OpBox, TensorLink>;

/// A small colour square: the key of a legend, in the colours drawn here.
pub fn swatch(ui: &mut egui::Ui, colour: Color32) {
    let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
    ui.painter().rect_filled(rect, 2.0, colour);
}

/// Fill colour of a node in each state; the legend uses the same colours.
pub fn state_fill(state: NodeState, dark: bool) -> Color32 {
    match (state, dark) {
        (NodeState::Quantized | NodeState::QuantizedInModel, _) => Color32::from_rgb(38, 150, 105),
        (NodeState::Quantized16, _) => Color32::from_rgb(18, 100, 62),
        (NodeState::QuantizedW4, _) => Color32::from_rgb(118, 158, 38),
        (NodeState::ExcludedByOpType, _) => Color32::from_rgb(205, 135, 35),
        (NodeState::ExcludedByNode, _) => Color32::from_rgb(200, 70, 75),
        (NodeState::OutsideSubgraph, _) => Color32::from_rgb(125, 100, 190),
        (NodeState::NotQuantizable | NodeState::FloatInModel, true) => {
            Color32::from_rgb(82, 86, 92)
        }
        (NodeState::NotQuantizable | NodeState::FloatInModel, false) => {
            Color32::from_rgb(205, 208, 212)
        }
        (NodeState::Folded, true) => Color32::from_rgb(45, 62, 88),
        (NodeState::Folded, false) => Color32::from_rgb(196, 210, 232),
        (NodeState::KeptFloat, _) => Color32::from_rgb(40, 130, 170),
    }
}

/// Label colour readable on [`state_fill`].
pub fn state_text(state: NodeState, dark: bool) -> Color32 {
    match (state, dark) {
        (NodeState::NotQuantizable | NodeState::FloatInModel | NodeState::Folded, false) => {
            Color32::from_rgb(30, 30, 30)
        }
        (NodeState::NotQuantizable | NodeState::FloatInModel | NodeState::Folded, true) => {
            Color32::from_rgb(225, 225, 225)
        }
        _ => Color32::WHITE,
    }
}

/// A label colour readable on any `fill`: near-black on pale fills (the yellow middle of the
/// heat map's scale, light-theme boxes), white on dark ones, by the fill's relative luminance.
pub fn text_on(fill: Color32) -> Color32 {
    let linear = |c: u8| {
        let c = f32::from(c) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    let luminance =
        0.2126 * linear(fill.r()) + 0.7152 * linear(fill.g()) + 0.0722 * linear(fill.b());
    // Where white and this near-black (luminance 0.0123) have equal contrast ratios:
    // (L + 0.05)² = 1.05 × 0.0623.
    if luminance > 0.206 {
        Color32::from_rgb(30, 30, 30)
    } else {
        Color32::WHITE
    }
}

/// The display of an op-type box (egui_graphs' [`DisplayNode`]).
#[derive(Debug, Clone)]
pub struct OpBox {
    centre: Pos2,
    size: Vec2,
    op_type: String,
    name: String,
    look: NodeLook,
    selected: bool,
    hovered: bool,
    badge: Option<String>,
    detail: Option<String>,
}

impl OpBox {
    /// The box in layout coordinates.
    pub fn rect(&self) -> Rect {
        Rect::from_center_size(self.centre, self.size)
    }

    /// The lines of text in the box (`rect` on screen), stacked about its centre: the op type,
    /// the detail line from [`DETAIL_ZOOM`], the name from [`NAME_ZOOM`].
    fn labels(&self, ctx: &DrawContext, rect: Rect, text: Color32) -> Vec<Shape> {
        let zoom = ctx.meta.zoom;
        let mut lines = vec![(
            self.op_type.clone(),
            FontId::proportional(12.0 * zoom),
            text,
        )];
        if let Some(detail) = self.detail.as_ref().filter(|_| zoom >= DETAIL_ZOOM) {
            lines.push((
                detail.clone(),
                FontId::proportional(8.5 * zoom),
                text.gamma_multiply(0.85),
            ));
        }
        if zoom >= NAME_ZOOM && !self.name.is_empty() {
            let px = 8.0 * zoom;
            let max_chars = (rect.width() / (px * 0.62)).max(4.0) as usize;
            lines.push((
                elide_end(&self.name, max_chars),
                FontId::monospace(px),
                text.gamma_multiply(0.7),
            ));
        }
        ctx.ctx.fonts_mut(|fonts| {
            let galleys: Vec<_> = lines
                .into_iter()
                .map(|(line, font, colour)| (fonts.layout_no_wrap(line, font, colour), colour))
                .collect();
            let total: f32 = galleys.iter().map(|(g, _)| g.size().y).sum();
            let mut top = rect.center().y - total / 2.0;
            galleys
                .into_iter()
                .map(|(galley, colour)| {
                    let at = Pos2::new(rect.center().x - galley.size().x / 2.0, top);
                    top += galley.size().y;
                    Shape::galley(at, galley, colour)
                })
                .collect()
        })
    }
}

/// Zoom from which a box shows its detail line under the op type.
const DETAIL_ZOOM: f32 = 0.75;

impl From<NodeProps<OpNode>> for OpBox {
    fn from(props: NodeProps<OpNode>) -> Self {
        OpBox {
            centre: props.location(),
            size: props.payload.size,
            op_type: props.payload.op_type.clone(),
            name: props.payload.name.clone(),
            look: props.payload.look,
            selected: props.selected,
            hovered: props.hovered,
            badge: props.payload.badge.clone(),
            detail: props.payload.detail.clone(),
        }
    }
}

/// A small tag (a Q/DQ pair's type) centred on `at`, drawn from `font_px` up.
fn tag(ctx: &DrawContext, at: Pos2, text: &str, font_px: f32, alpha: f32) -> Vec<Shape> {
    if font_px < MIN_LABEL_PX {
        return vec![Shape::circle_filled(
            at,
            (font_px * 0.4).max(1.5),
            TAG_FILL.gamma_multiply(alpha),
        )];
    }
    ctx.ctx.fonts_mut(|fonts| {
        let galley = fonts.layout_no_wrap(
            text.to_owned(),
            FontId::monospace(font_px),
            Color32::WHITE.gamma_multiply(alpha),
        );
        let rect = Rect::from_center_size(at, galley.size() + Vec2::new(font_px * 0.6, 0.0));
        vec![
            Shape::rect_filled(rect, font_px * 0.4, TAG_FILL.gamma_multiply(alpha)),
            Shape::galley(
                at - galley.size() / 2.0,
                galley,
                Color32::WHITE.gamma_multiply(alpha),
            ),
        ]
    })
}

/// Fill of the Q/DQ tags: a violet apart from every state colour.
pub const TAG_FILL: Color32 = Color32::from_rgb(118, 78, 170);

impl DisplayNode<OpNode, TensorEdge, Directed, u32> for OpBox {
    fn closest_boundary_point(&self, dir: Vec2) -> Pos2 {
        // Edges run top to bottom: leave from the bottom, arrive at the top.
        let half = self.size / 2.0;
        if dir.y >= 0.0 {
            self.centre + Vec2::new(0.0, half.y)
        } else {
            self.centre - Vec2::new(0.0, half.y)
        }
    }

    fn shapes(&mut self, ctx: &DrawContext) -> Vec<Shape> {
        let zoom = ctx.meta.zoom;
        let rect =
            Rect::from_center_size(ctx.meta.canvas_to_screen_pos(self.centre), self.size * zoom);
        let look = self.look;
        let alpha = if look.emphasis == Emphasis::Dimmed {
            0.35
        } else {
            1.0
        };
        let fill = look.fill.gamma_multiply(alpha);
        let radius = CornerRadius::same((4.0 * zoom).clamp(0.0, 12.0) as u8);
        let mut out = Vec::with_capacity(4);
        // A box smaller than a few pixels is a dot in an overview: no outline, no text.
        if rect.height() < 3.0 {
            out.push(Shape::rect_filled(rect, 0.0, fill));
            return out;
        }
        let outline = if self.selected {
            Stroke::new(3.0, look.accent)
        } else if look.emphasis == Emphasis::CurrentMatch {
            Stroke::new(3.0, Color32::from_rgb(250, 200, 30))
        } else if look.emphasis == Emphasis::Match {
            Stroke::new(2.0, Color32::from_rgb(250, 200, 30))
        } else if look.emphasis == Emphasis::Neighbour || self.hovered {
            Stroke::new(1.5, look.accent)
        } else {
            Stroke::new(1.0, Color32::from_black_alpha(60).gamma_multiply(alpha))
        };
        out.push(Shape::Rect(egui::epaint::RectShape::new(
            rect,
            radius,
            fill,
            outline,
            StrokeKind::Outside,
        )));
        if 12.0 * zoom >= MIN_LABEL_PX {
            out.extend(self.labels(ctx, rect, look.text.gamma_multiply(alpha)));
        }
        if let Some(badge) = &self.badge {
            let at = rect.right_bottom() - Vec2::new(0.0, rect.height() * 0.1);
            out.extend(tag(ctx, at, badge, 9.0 * zoom, alpha));
        }
        if look.flagged {
            let r = (5.0 * zoom).max(3.0);
            let at = rect.right_top();
            out.push(Shape::circle_filled(at, r, Color32::from_rgb(220, 40, 40)));
            if r >= 4.0 {
                ctx.ctx.fonts_mut(|fonts| {
                    let g = fonts.layout_no_wrap(
                        "!".to_owned(),
                        FontId::proportional(r * 1.6),
                        Color32::WHITE,
                    );
                    out.push(Shape::galley(at - g.size() / 2.0, g, Color32::WHITE));
                });
            }
        }
        out
    }

    fn update(&mut self, props: &NodeProps<OpNode>) {
        self.centre = props.location();
        self.size = props.payload.size;
        self.look = props.payload.look;
        self.selected = props.selected;
        self.hovered = props.hovered;
        if self.op_type != props.payload.op_type {
            self.op_type.clone_from(&props.payload.op_type);
        }
        if self.name != props.payload.name {
            self.name.clone_from(&props.payload.name);
        }
        if self.badge != props.payload.badge {
            self.badge.clone_from(&props.payload.badge);
        }
        if self.detail != props.payload.detail {
            self.detail.clone_from(&props.payload.detail);
        }
    }

    fn is_inside(&self, pos: Pos2) -> bool {
        self.rect().contains(pos)
    }
}

/// The display of a tensor edge (egui_graphs' [`DisplayEdge`]): a vertical cubic curve from
/// the producer's bottom to the consumer's top with an arrow head, and the tag of a Q/DQ
/// pair folded into it.
#[derive(Debug, Clone, Default)]
pub struct TensorLink {
    cycle: bool,
    emphasised: bool,
    dimmed: bool,
    badge: Option<String>,
    detour: Option<f32>,
}

impl From<EdgeProps<TensorEdge>> for TensorLink {
    fn from(props: EdgeProps<TensorEdge>) -> Self {
        TensorLink {
            cycle: props.payload.cycle,
            emphasised: props.payload.emphasised,
            dimmed: props.payload.dimmed,
            badge: props.payload.badge.clone(),
            detour: props.payload.detour,
        }
    }
}

/// The path of an edge between two boxes in layout coordinates, as cubic segments: one
/// curve, or with a `detour`, a bend out to that x, a run down it and a bend back in.
pub fn edge_path(start: &OpBox, end: &OpBox, detour: Option<f32>) -> Vec<[Pos2; 4]> {
    let curve = edge_curve(start, end);
    path_between(curve, detour)
}

/// `curve`, or with a `detour` (and going down), the detour from its start to its end.
fn path_between(curve: [Pos2; 4], detour: Option<f32>) -> Vec<[Pos2; 4]> {
    let (a, b) = (curve[0], curve[3]);
    let Some(x) = detour.filter(|_| b.y > a.y) else {
        return vec![curve];
    };
    let bend = ((b.y - a.y) / 4.0).min(20.0);
    let (top, bottom) = (Pos2::new(x, a.y + bend), Pos2::new(x, b.y - bend));
    vec![
        [a, a + Vec2::new(0.0, bend), Pos2::new(x, a.y), top],
        [top, top, bottom, bottom],
        [bottom, Pos2::new(x, b.y), b - Vec2::new(0.0, bend), b],
    ]
}

/// Shortest distance from `pos` to a path of cubic segments.
pub fn distance_to_path(path: &[[Pos2; 4]], pos: Pos2) -> f32 {
    path.iter()
        .map(|c| distance_to_curve(*c, pos))
        .fold(f32::INFINITY, f32::min)
}

/// The curve of an edge between two boxes, in layout coordinates.
pub fn edge_curve(start: &OpBox, end: &OpBox) -> [Pos2; 4] {
    let a = start.closest_boundary_point(Vec2::DOWN);
    let b = if end.centre.y > start.centre.y {
        end.closest_boundary_point(Vec2::UP)
    } else {
        // A cycle edge goes back up: enter from below.
        end.closest_boundary_point(Vec2::DOWN)
    };
    curve_between(a, b)
}

/// A vertical S-curve from `a` to `b`.
fn curve_between(a: Pos2, b: Pos2) -> [Pos2; 4] {
    let bend = ((b.y - a.y).abs() * 0.5).max(20.0);
    let down = if b.y >= a.y { bend } else { -bend };
    [a, a + Vec2::new(0.0, bend), b - Vec2::new(0.0, down), b]
}

/// A link drawn along `path` (cubic segments, screen coordinates): the curves (dashed for a
/// cycle), the arrow head, and a Q/DQ tag with its opacity at the middle.
fn link(
    ctx: &DrawContext,
    path: &[[Pos2; 4]],
    stroke: Stroke,
    dashed: bool,
    tagged: Option<(&str, f32)>,
) -> Vec<Shape> {
    let zoom = ctx.meta.zoom;
    let Some(last) = path.last() else {
        return Vec::new();
    };
    // Zoomed far out, curves and arrow heads are invisible detail: straight segments are a
    // fraction of the tessellation work on a graph of thousands of edges.
    if zoom < 0.35 {
        return path
            .iter()
            .map(|c| Shape::line_segment([c[0], c[3]], stroke))
            .collect();
    }
    let mut out = Vec::with_capacity(path.len() + 2);
    for curve in path {
        let bezier =
            CubicBezierShape::from_points_stroke(*curve, false, Color32::TRANSPARENT, stroke);
        if dashed {
            out.extend(Shape::dashed_line(
                &bezier.flatten(Some(1.0)),
                stroke,
                6.0,
                4.0,
            ));
        } else {
            out.push(Shape::CubicBezier(bezier));
        }
    }
    // Arrow head pointing along the last segment's last tangent.
    let tip = last[3];
    let dir = (last[3] - last[2]).normalized();
    let size = (6.0 * zoom).clamp(2.0, 10.0);
    if size > 2.5 {
        let side = Vec2::new(-dir.y, dir.x) * size * 0.5;
        let back = tip - dir * size;
        out.push(Shape::convex_polygon(
            vec![tip, back + side, back - side],
            stroke.color,
            Stroke::NONE,
        ));
    }
    if let Some((text, alpha)) = tagged {
        let middle = path[path.len() / 2];
        let bezier =
            CubicBezierShape::from_points_stroke(middle, false, Color32::TRANSPARENT, stroke);
        out.extend(tag(ctx, bezier.sample(0.5), text, 8.5 * zoom, alpha));
    }
    out
}

/// The link from a graph input's pill to a box reading it, or from a box to an output's
/// pill (`from`, `to` in layout coordinates), with the tag of a Q/DQ pair on it.
pub fn link_shapes(
    ctx: &DrawContext,
    from: Pos2,
    to: Pos2,
    detour: Option<f32>,
    tagged: Option<&str>,
) -> Vec<Shape> {
    let path: Vec<[Pos2; 4]> = path_between(curve_between(from, to), detour)
        .into_iter()
        .map(|c| c.map(|p| ctx.meta.canvas_to_screen_pos(p)))
        .collect();
    let colour = ctx
        .ctx
        .global_style()
        .visuals
        .widgets
        .noninteractive
        .fg_stroke
        .color
        .gamma_multiply(0.7);
    let stroke = Stroke::new(ctx.meta.zoom.clamp(0.5, 1.5), colour);
    link(ctx, &path, stroke, false, tagged.map(|t| (t, 1.0)))
}

/// A graph input's or output's pill (`rect` in layout coordinates): its name, elided to
/// the pill, on the panel's colour with an outline.
pub fn terminal_shapes(ctx: &DrawContext, rect: Rect, name: &str, input: bool) -> Vec<Shape> {
    let zoom = ctx.meta.zoom;
    let rect = Rect::from_min_max(
        ctx.meta.canvas_to_screen_pos(rect.min),
        ctx.meta.canvas_to_screen_pos(rect.max),
    );
    let visuals = &ctx.ctx.global_style().visuals;
    let fill = if input {
        visuals.widgets.inactive.bg_fill
    } else {
        visuals.faint_bg_color
    };
    let mut out = vec![Shape::Rect(egui::epaint::RectShape::new(
        rect,
        rect.height() / 2.0,
        fill,
        Stroke::new(1.0, visuals.widgets.noninteractive.fg_stroke.color),
        StrokeKind::Inside,
    ))];
    let font_px = 10.0 * zoom;
    if font_px >= MIN_LABEL_PX && rect.height() >= 3.0 {
        let max_chars = crate::app::layout::MAX_TERMINAL_CHARS;
        let colour = visuals.strong_text_color();
        ctx.ctx.fonts_mut(|fonts| {
            let galley = fonts.layout_no_wrap(
                elide_end(name, max_chars),
                FontId::monospace(font_px),
                colour,
            );
            out.push(Shape::galley(
                rect.center() - galley.size() / 2.0,
                galley,
                colour,
            ));
        });
    }
    out
}

/// Shortest distance from `pos` to the curve, sampled.
pub fn distance_to_curve(curve: [Pos2; 4], pos: Pos2) -> f32 {
    let bezier =
        CubicBezierShape::from_points_stroke(curve, false, Color32::TRANSPARENT, Stroke::NONE);
    (0..=16)
        .map(|i| bezier.sample(i as f32 / 16.0).distance(pos))
        .fold(f32::INFINITY, f32::min)
}

impl DisplayEdge<OpNode, TensorEdge, Directed, u32, OpBox> for TensorLink {
    fn shapes(
        &mut self,
        start: &Node<OpNode, TensorEdge, Directed, u32, OpBox>,
        end: &Node<OpNode, TensorEdge, Directed, u32, OpBox>,
        ctx: &DrawContext,
    ) -> Vec<Shape> {
        let zoom = ctx.meta.zoom;
        let path: Vec<[Pos2; 4]> = edge_path(start.display(), end.display(), self.detour)
            .into_iter()
            .map(|c| c.map(|p| ctx.meta.canvas_to_screen_pos(p)))
            .collect();
        let visuals = &ctx.ctx.global_style().visuals;
        let base = if self.cycle {
            Color32::from_rgb(220, 50, 50)
        } else if self.emphasised {
            visuals.selection.stroke.color
        } else {
            visuals
                .widgets
                .noninteractive
                .fg_stroke
                .color
                .gamma_multiply(0.7)
        };
        let colour = if self.dimmed {
            base.gamma_multiply(0.3)
        } else {
            base
        };
        let width = if self.emphasised { 2.0 } else { 1.0 } * zoom.clamp(0.5, 1.5);
        let alpha = if self.dimmed { 0.3 } else { 1.0 };
        link(
            ctx,
            &path,
            Stroke::new(width, colour),
            self.cycle,
            self.badge.as_deref().map(|b| (b, alpha)),
        )
    }

    fn update(&mut self, props: &EdgeProps<TensorEdge>) {
        self.cycle = props.payload.cycle;
        self.emphasised = props.payload.emphasised;
        self.dimmed = props.payload.dimmed;
        if self.badge != props.payload.badge {
            self.badge.clone_from(&props.payload.badge);
        }
        self.detour = props.payload.detour;
    }

    fn is_inside(
        &self,
        start: &Node<OpNode, TensorEdge, Directed, u32, OpBox>,
        end: &Node<OpNode, TensorEdge, Directed, u32, OpBox>,
        pos: Pos2,
    ) -> bool {
        distance_to_path(&edge_path(start.display(), end.display(), self.detour), pos) < 4.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_elided_short_ones_kept() {
        assert_eq!(elide_end("conv1", 8), "conv1");
        assert_eq!(elide_end("backbone.stage3.conv", 8), "backbon…");
    }

    #[test]
    fn edges_leave_at_the_bottom_and_enter_at_the_top() {
        let boxed = |y: f32| OpBox {
            centre: Pos2::new(0.0, y),
            size: Vec2::new(60.0, 30.0),
            op_type: "Conv".into(),
            name: String::new(),
            look: NodeLook::default(),
            selected: false,
            hovered: false,
            badge: None,
            detail: None,
        };
        let curve = edge_curve(&boxed(0.0), &boxed(100.0));
        assert_eq!(curve[0], Pos2::new(0.0, 15.0));
        assert_eq!(curve[3], Pos2::new(0.0, 85.0));
        assert!(distance_to_curve(curve, Pos2::new(0.0, 50.0)) < 1.0);
        assert!(distance_to_curve(curve, Pos2::new(30.0, 50.0)) > 20.0);
    }

    #[test]
    fn labels_are_dark_on_pale_fills_and_white_on_dark_ones() {
        use crate::app::work::heat;
        let dark = Color32::from_rgb(30, 30, 30);
        // The heat map's yellow (at the threshold) is pale; its deep green and red are not.
        assert_eq!(text_on(heat::colour(20.0, 20.0)), dark);
        assert_eq!(text_on(heat::colour(80.0, 20.0)), Color32::WHITE);
        assert_eq!(text_on(heat::colour(-40.0, 20.0)), Color32::WHITE);
        assert_eq!(text_on(state_fill(NodeState::Folded, false)), dark);
        assert_eq!(text_on(state_fill(NodeState::Folded, true)), Color32::WHITE);
    }
}
