//! The graph view: the laid-out model drawn with egui_graphs' display traits, with our own
//! navigation (pan, zoom, fit, centre on a node), hit testing, level of detail and a minimap.
//!
//! Why not `egui_graphs::GraphView`: its `show` requests a repaint every frame, so a window
//! showing it never idles (157 % CPU measured on a 30-node graph), and it draws every node and
//! edge whatever the zoom. The canvas keeps egui_graphs' graph type and display traits (the
//! shapes in [`shapes`]), draws only what is on screen, and repaints only on input.

pub mod detail;
pub mod shapes;

use std::collections::HashSet;

use egui::{
    Color32, ColorImage, Modifiers, Pos2, Rect, Response, Sense, Stroke, StrokeKind, TextureHandle,
    TextureOptions, Ui, Vec2,
};
use egui_graphs::{DisplayEdge, DisplayNode, DrawContext, MetadataFrame, SettingsStyle};
use petgraph::stable_graph::{EdgeIndex, NodeIndex};

use crate::app::layout::{GraphLayout, NODE_HEIGHT};
use crate::model::qdq::QdqStructure;
use crate::model::{Graph, NodeId};
pub use shapes::{
    Emphasis, NodeLook, OpNode, TensorEdge, ViewGraph, state_fill, state_text, text_on,
};

/// Height of a graph input's or output's pill.
const TERMINAL_HEIGHT: f32 = 22.0;
/// Zoom limits.
const MIN_ZOOM: f32 = 0.01;
const MAX_ZOOM: f32 = 4.0;
/// Largest side of the minimap in points.
const MINIMAP_SIDE: f32 = 180.0;

/// What the pointer is over.
#[derive(Debug, Clone, PartialEq)]
pub enum Hover {
    /// A node box.
    Node(NodeId),
    /// A tensor edge.
    Edge {
        /// The tensor's name.
        tensor: String,
    },
    /// A graph input or output.
    Terminal {
        /// The tensor's name.
        tensor: String,
        /// True for an input.
        input: bool,
    },
}

/// A graph input or output as the view draws it.
#[derive(Debug, Clone)]
struct TerminalView {
    /// The pill in layout coordinates.
    rect: Rect,
    name: String,
    input: bool,
    /// The linked boxes, the tag of a Q/DQ pair on the link and its detour.
    links: Vec<(NodeIndex<u32>, Option<String>, Option<f32>)>,
}

/// What happened in the view this frame, for the studio to act on.
#[derive(Debug)]
pub struct CanvasEvents {
    /// The view's response (tooltips, context menu).
    pub response: Response,
    /// A node was clicked, with the modifiers held.
    pub clicked: Option<(NodeId, Modifiers)>,
    /// Empty space was clicked (clears the selection).
    pub clicked_empty: bool,
    /// A node was double-clicked (zoom to it).
    pub double_clicked: Option<NodeId>,
    /// What the pointer is over.
    pub hovered: Option<Hover>,
}

/// The graph view's state: the graph to draw and where the camera is.
pub struct GraphCanvas {
    graph: ViewGraph,
    /// View index of each model node (`None` for folded Constant nodes).
    index: Vec<Option<NodeIndex<u32>>>,
    zoom: f32,
    /// Screen offset of the layout origin from the view's top-left corner.
    pan: Vec2,
    /// Extent of the layout in layout units.
    bounds: Rect,
    /// Where the opening view looks: the first nodes in graph order (the input's end).
    start: Rect,
    /// The view rect of the last frame (for fit and centre requests between frames).
    last_rect: Option<Rect>,
    /// A camera move to apply at the next frame, once the view's size is known.
    pending: Option<CameraRequest>,
    style: SettingsStyle,
    /// The node the context menu was opened on.
    context_node: Option<NodeId>,
    /// The node under the pointer.
    hovered: Option<NodeIndex<u32>>,
    minimap: Option<TextureHandle>,
    minimap_dirty: bool,
    terminals: Vec<TerminalView>,
}

/// A camera move asked for before the view knew its size.
#[derive(Debug, Clone)]
enum CameraRequest {
    /// The opening view: the top of the graph, as wide as fits.
    Initial,
    /// The whole graph.
    Fit,
    /// These nodes, zoomed to fit them.
    Nodes(Vec<NodeId>),
    /// Centre this node, keeping the zoom.
    Centre(NodeId),
}

impl std::fmt::Debug for GraphCanvas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphCanvas")
            .field("nodes", &self.graph.node_count())
            .field("zoom", &self.zoom)
            .finish_non_exhaustive()
    }
}

/// The tag of the Q/DQ pair folded into a link to the reader of `tensor` (`u8`, `i8` …).
fn pair_tag(qdq: &QdqStructure, tensor: &str) -> Option<String> {
    qdq.read_of(tensor).map(|r| r.params.short_type())
}

/// The tag of `node`'s quantized weight: the first quantized constant it reads past its
/// first input (`W i8`, `W i8/ch` per channel, `W i4/b32` block-wise).
fn weight_tag(qdq: &QdqStructure, node: &crate::model::Node) -> Option<String> {
    let (_, read) = qdq
        .quantized_inputs(node)
        .find(|(i, r)| *i > 0 && r.constant)?;
    let p = &read.params;
    let granularity = match (p.per_channel(), p.block_size) {
        (false, _) => String::new(),
        (true, Some(b)) => format!("/b{b}"),
        (true, None) => "/ch".to_owned(),
    };
    Some(format!("W {}{granularity}", p.short_type()))
}

impl GraphCanvas {
    /// Builds the view of `graph` at the positions of `layout`; `flagged` nodes get a warning
    /// badge (dangling inputs, cycles); the Q/DQ pairs of `qdq` are tags on their edges and
    /// a node's quantized weight a tag on its box.
    pub fn new(
        graph: &Graph,
        layout: &GraphLayout,
        qdq: &QdqStructure,
        details: &[Option<String>],
        flagged: &HashSet<NodeId>,
    ) -> Self {
        let mut view = ViewGraph::new();
        let mut index = vec![None; graph.nodes().len()];
        let mut bounds = Rect::NOTHING;
        for (i, node) in graph.nodes().iter().enumerate() {
            let Some(Some((x, y))) = layout.positions.get(i) else {
                continue;
            };
            let width = layout.widths.get(i).copied().unwrap_or(56.0);
            let size = Vec2::new(width, NODE_HEIGHT);
            let centre = Pos2::new(*x, *y);
            bounds = bounds.union(Rect::from_center_size(centre, size));
            let payload = OpNode {
                id: node.id,
                op_type: node.op_type.clone(),
                name: node.name.clone(),
                size,
                look: NodeLook {
                    flagged: flagged.contains(&node.id),
                    ..NodeLook::default()
                },
                badge: weight_tag(qdq, node),
                detail: details.get(i).cloned().flatten(),
            };
            let idx = view.add_node_custom(payload, |n| {
                n.set_location(centre);
                n.set_label(node.name.clone());
            });
            index[i] = Some(idx);
        }
        let mut add_edges = |edges: &[crate::app::layout::LayoutEdge], cycle: bool| {
            for e in edges {
                if let (Some(Some(a)), Some(Some(b))) = (index.get(e.from.0), index.get(e.to.0)) {
                    view.add_edge(
                        *a,
                        *b,
                        TensorEdge {
                            tensor: e.tensor.clone(),
                            cycle,
                            emphasised: false,
                            dimmed: false,
                            badge: pair_tag(qdq, &e.tensor),
                            detour: e.detour,
                        },
                    );
                }
            }
        };
        add_edges(&layout.edges, false);
        add_edges(&layout.cycle_edges, true);
        let terminals: Vec<TerminalView> = layout
            .terminals
            .iter()
            .map(|t| TerminalView {
                rect: Rect::from_center_size(
                    Pos2::new(t.centre.0, t.centre.1),
                    Vec2::new(t.width, TERMINAL_HEIGHT),
                ),
                name: t.name.clone(),
                input: t.input,
                links: t
                    .links
                    .iter()
                    .filter_map(|link| {
                        let idx = index.get(link.node.0).copied().flatten()?;
                        let tag = pair_tag(qdq, &link.tensor);
                        Some((idx, tag, link.detour))
                    })
                    .collect(),
            })
            .collect();
        for t in &terminals {
            bounds = bounds.union(t.rect);
        }
        if bounds == Rect::NOTHING {
            bounds = Rect::from_min_size(Pos2::ZERO, Vec2::splat(100.0));
        }
        let start = graph
            .topological_order()
            .iter()
            .filter_map(|id| index.get(id.0).copied().flatten())
            .filter_map(|idx| view.node(idx).map(|n| n.display().rect()))
            .take(24)
            .fold(Rect::NOTHING, Rect::union);
        // The inputs above the first nodes are where a reader starts.
        let start = terminals
            .iter()
            .filter(|t| t.input && start.x_range().intersects(t.rect.x_range()))
            .fold(start, |r, t| r.union(t.rect));
        let start = if start == Rect::NOTHING {
            bounds
        } else {
            start
        };
        GraphCanvas {
            graph: view,
            index,
            zoom: 1.0,
            pan: Vec2::ZERO,
            bounds,
            start,
            last_rect: None,
            pending: Some(CameraRequest::Initial),
            style: SettingsStyle::new(),
            context_node: None,
            hovered: None,
            minimap: None,
            minimap_dirty: true,
            terminals,
        }
    }

    /// Number of boxes drawn.
    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    /// The tags drawn on edges: (the tensor the consumer reads, the tag), for tests and
    /// tooltips.
    pub fn edge_tags(&self) -> Vec<(String, String)> {
        self.graph
            .edges_iter()
            .filter_map(|(_, e)| {
                let payload = e.payload();
                Some((payload.tensor.clone(), payload.badge.clone()?))
            })
            .collect()
    }

    /// The tag drawn on `node`'s box (its quantized weight), if any.
    pub fn node_tag(&self, node: NodeId) -> Option<String> {
        let idx = (*self.index.get(node.0)?)?;
        self.graph.node(idx)?.payload().badge.clone()
    }

    /// The current zoom (1 = layout units are points).
    pub fn zoom(&self) -> f32 {
        self.zoom
    }

    /// The camera: zoom and the layout origin's offset from the view's corner.
    pub fn camera(&self) -> (f32, Vec2) {
        (self.zoom, self.pan)
    }

    /// Moves the camera (a view kept in step with another); a pending move is dropped.
    pub fn set_camera(&mut self, (zoom, pan): (f32, Vec2)) {
        self.zoom = zoom.clamp(MIN_ZOOM, MAX_ZOOM);
        self.pan = pan;
        self.pending = None;
    }

    /// Sets every node's look and the selection, and marks the edges touching the selection.
    pub fn restyle(&mut self, looks: &[NodeLook], selected: &HashSet<NodeId>) {
        let any_selected = !selected.is_empty();
        let indices: Vec<NodeIndex<u32>> = self.graph.g().node_indices().collect();
        for idx in &indices {
            if let Some(node) = self.graph.node_mut(*idx) {
                let id = node.payload().id;
                let look = looks.get(id.0).copied().unwrap_or(node.payload().look);
                let is_selected = selected.contains(&id);
                if node.payload().look == look && node.selected() == is_selected {
                    // Unchanged: skip the props copy (two strings a node).
                    continue;
                }
                // The minimap shows fill colours only: redraw it when one changes.
                self.minimap_dirty |= node.payload().look.fill != look.fill;
                node.payload_mut().look = look;
                node.set_selected(is_selected);
                let props = node.props().clone();
                node.display_mut().update(&props);
            }
        }
        let edges: Vec<EdgeIndex<u32>> = self.graph.g().edge_indices().collect();
        for e in edges {
            let Some((a, b)) = self.graph.edge_endpoints(e) else {
                continue;
            };
            let touches = [a, b].iter().any(|n| {
                self.graph
                    .node(*n)
                    .is_some_and(|n| selected.contains(&n.payload().id))
            });
            if let Some(edge) = self.graph.edge_mut(e) {
                edge.payload_mut().emphasised = touches;
                edge.payload_mut().dimmed = any_selected && !touches;
                let props = edge.props().clone();
                edge.display_mut().update(&props);
            }
        }
    }

    /// Shows the whole graph at the next frame.
    pub fn fit(&mut self) {
        self.pending = Some(CameraRequest::Fit);
    }

    /// Zooms to fit `nodes` at the next frame (keeps the view when none are laid out).
    pub fn zoom_to(&mut self, nodes: &[NodeId]) {
        if !nodes.is_empty() {
            self.pending = Some(CameraRequest::Nodes(nodes.to_vec()));
        }
    }

    /// Centres `node` at the next frame, keeping the zoom (raised to a readable level).
    pub fn centre_on(&mut self, node: NodeId) {
        self.pending = Some(CameraRequest::Centre(node));
    }

    /// Pans by `delta` points.
    pub fn pan_by(&mut self, delta: Vec2) {
        self.pan += delta;
    }

    /// Zooms by `factor` about the view's centre.
    pub fn zoom_by(&mut self, factor: f32) {
        if let Some(rect) = self.last_rect {
            self.zoom_about(factor, rect.center(), rect);
        }
    }

    /// Where the view was drawn in the last frame.
    pub fn view_rect(&self) -> Option<Rect> {
        self.last_rect
    }

    /// The node the context menu was opened on.
    pub fn context_node(&self) -> Option<NodeId> {
        self.context_node
    }

    /// Where `node`'s box is on screen (after the last frame), e.g. for tests that click it.
    pub fn screen_rect_of(&self, node: NodeId) -> Option<Rect> {
        let rect = self.last_rect?;
        let b = self.node_box(node)?;
        Some(Rect::from_min_max(
            self.to_screen(rect, b.min),
            self.to_screen(rect, b.max),
        ))
    }

    fn node_box(&self, node: NodeId) -> Option<Rect> {
        let idx = (*self.index.get(node.0)?)?;
        Some(self.graph.node(idx)?.display().rect())
    }

    fn to_screen(&self, rect: Rect, p: Pos2) -> Pos2 {
        rect.min + self.pan + p.to_vec2() * self.zoom
    }

    fn to_canvas(&self, rect: Rect, p: Pos2) -> Pos2 {
        ((p - rect.min - self.pan) / self.zoom).to_pos2()
    }

    fn zoom_about(&mut self, factor: f32, anchor: Pos2, rect: Rect) {
        let before = self.to_canvas(rect, anchor);
        self.zoom = (self.zoom * factor).clamp(MIN_ZOOM, MAX_ZOOM);
        self.pan = anchor - rect.min - before.to_vec2() * self.zoom;
    }

    fn fit_zoom(&self, rect: Rect, target: Rect) -> f32 {
        let margin = 40.0;
        ((rect.width() - margin) / target.width().max(1.0))
            .min((rect.height() - margin) / target.height().max(1.0))
            .clamp(MIN_ZOOM, MAX_ZOOM)
    }

    fn look_at(&mut self, rect: Rect, target: Rect, zoom: f32) {
        self.zoom = zoom.clamp(MIN_ZOOM, MAX_ZOOM);
        self.pan = rect.size() / 2.0 - target.center().to_vec2() * self.zoom;
    }

    fn apply_pending(&mut self, rect: Rect) {
        let Some(request) = self.pending.take() else {
            return;
        };
        match request {
            CameraRequest::Initial => {
                // Readable boxes at the top of the graph, as Netron opens; a graph that fits
                // entirely at a readable zoom is shown whole.
                let fit = self.fit_zoom(rect, self.bounds);
                if fit >= 0.6 {
                    self.look_at(rect, self.bounds, fit.min(1.2));
                } else {
                    let zoom = ((rect.width() - 40.0) / self.bounds.width()).clamp(0.8, 1.0);
                    self.zoom = zoom;
                    // The first rows go left of where the minimap will stand (bottom right),
                    // centred in that room when they fit it, else from its left edge.
                    let room = if rect.width() >= 3.0 * MINIMAP_SIDE {
                        rect.width() - MINIMAP_SIDE - 24.0
                    } else {
                        rect.width()
                    };
                    let x = if self.start.width() * zoom + 40.0 <= room {
                        room / 2.0 - self.start.center().x * zoom
                    } else {
                        20.0 - self.start.min.x * zoom
                    };
                    self.pan = Vec2::new(x, 20.0 - self.start.min.y * zoom);
                }
            }
            CameraRequest::Fit => {
                let zoom = self.fit_zoom(rect, self.bounds).min(1.2);
                self.look_at(rect, self.bounds, zoom);
            }
            CameraRequest::Nodes(nodes) => {
                let target = nodes
                    .iter()
                    .filter_map(|n| self.node_box(*n))
                    .fold(Rect::NOTHING, Rect::union);
                if target != Rect::NOTHING {
                    let zoom = self.fit_zoom(rect, target.expand(40.0)).min(1.5);
                    self.look_at(rect, target, zoom);
                }
            }
            CameraRequest::Centre(node) => {
                if let Some(target) = self.node_box(node) {
                    let zoom = self.zoom.max(0.8);
                    self.look_at(rect, target, zoom);
                }
            }
        }
    }

    fn node_at(&self, canvas: Pos2) -> Option<NodeIndex<u32>> {
        // Topmost first: later nodes are drawn over earlier ones.
        self.graph
            .nodes_iter()
            .filter(|(_, n)| n.display().is_inside(canvas))
            .map(|(i, _)| i)
            .last()
    }

    fn terminal_at(&self, canvas: Pos2) -> Option<Hover> {
        self.terminals
            .iter()
            .find(|t| t.rect.contains(canvas))
            .map(|t| Hover::Terminal {
                tensor: t.name.clone(),
                input: t.input,
            })
    }

    fn edge_at(&self, canvas: Pos2) -> Option<EdgeIndex<u32>> {
        let tolerance = 4.0 / self.zoom;
        self.graph.edges_iter().find_map(|(i, _)| {
            let (a, b) = self.graph.edge_endpoints(i)?;
            let (a, b) = (self.graph.node(a)?, self.graph.node(b)?);
            let span = a
                .display()
                .rect()
                .union(b.display().rect())
                .expand(tolerance);
            if !span.contains(canvas) {
                return None;
            }
            let detour = self.graph.edge(i)?.payload().detour;
            let path = shapes::edge_path(a.display(), b.display(), detour);
            (shapes::distance_to_path(&path, canvas) < tolerance).then_some(i)
        })
    }

    /// Draws the view into the remaining space of `ui` and handles navigation.
    pub fn show(&mut self, ui: &mut Ui) -> CanvasEvents {
        let rect = ui.available_rect_before_wrap();
        let response = ui.allocate_rect(rect, Sense::click_and_drag());
        // A view that changed size (a panel resized, the side view opened) keeps what was in
        // its middle in the middle.
        if let Some(before) = self.last_rect {
            self.pan += (rect.size() - before.size()) / 2.0;
        }
        self.last_rect = Some(rect);
        self.apply_pending(rect);

        // Navigation: drag pans, scroll pans, Ctrl+scroll / pinch zooms about the pointer.
        if response.dragged_by(egui::PointerButton::Primary)
            || response.dragged_by(egui::PointerButton::Middle)
        {
            self.pan += response.drag_delta();
        }
        if response.hovered() {
            let (scroll, zoom_delta, pointer) =
                ui.input(|i| (i.smooth_scroll_delta, i.zoom_delta(), i.pointer.hover_pos()));
            if zoom_delta != 1.0 {
                self.zoom_about(zoom_delta, pointer.unwrap_or(rect.center()), rect);
            } else if scroll != Vec2::ZERO {
                self.pan += scroll;
            }
        }

        // Hit testing.
        let pointer = response.hover_pos();
        let hovered_node = pointer.and_then(|p| self.node_at(self.to_canvas(rect, p)));
        let hovered = match hovered_node {
            Some(i) => self.graph.node(i).map(|n| Hover::Node(n.payload().id)),
            None => pointer.filter(|_| !response.dragged()).and_then(|p| {
                let at = self.to_canvas(rect, p);
                self.terminal_at(at).or_else(|| {
                    self.edge_at(at)
                        .and_then(|e| self.graph.edge(e))
                        .map(|e| Hover::Edge {
                            tensor: e.payload().tensor.clone(),
                        })
                })
            }),
        };
        let node_id = |i: NodeIndex<u32>| self.graph.node(i).map(|n| n.payload().id);
        let modifiers = ui.input(|i| i.modifiers);
        let mut clicked = None;
        let mut clicked_empty = false;
        if response.clicked() {
            match hovered_node.and_then(node_id) {
                Some(id) => clicked = Some((id, modifiers)),
                None => clicked_empty = true,
            }
        }
        let double_clicked = if response.double_clicked() {
            hovered_node.and_then(node_id)
        } else {
            None
        };
        if response.secondary_clicked() {
            self.context_node = hovered_node.and_then(node_id);
        }
        if hovered_node != self.hovered {
            for (idx, on) in [(self.hovered, false), (hovered_node, true)] {
                if let Some(node) = idx.and_then(|i| self.graph.node_mut(i)) {
                    node.set_hovered(on);
                    let props = node.props().clone();
                    node.display_mut().update(&props);
                }
            }
            self.hovered = hovered_node;
        }

        self.draw(ui, rect);
        self.minimap(ui, rect);

        CanvasEvents {
            response,
            clicked,
            clicked_empty,
            double_clicked,
            hovered,
        }
    }

    fn draw(&mut self, ui: &Ui, rect: Rect) {
        let painter = ui.painter_at(rect);
        painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
        let mut meta = MetadataFrame::new(None);
        meta.zoom = self.zoom;
        meta.pan = rect.min.to_vec2() + self.pan;
        let visible = Rect::from_min_max(
            self.to_canvas(rect, rect.min),
            self.to_canvas(rect, rect.max),
        )
        .expand(20.0);
        let context = DrawContext {
            ctx: ui.ctx(),
            painter: &painter,
            style: &self.style,
            is_directed: true,
            meta: &meta,
        };
        let mut shapes = Vec::new();
        let g = self.graph.g();
        for e in g.edge_indices() {
            let Some((a, b)) = g.edge_endpoints(e) else {
                continue;
            };
            let (Some(start), Some(end), Some(edge)) =
                (g.node_weight(a), g.node_weight(b), g.edge_weight(e))
            else {
                continue;
            };
            let span = start.display().rect().union(end.display().rect());
            if !span.intersects(visible) {
                continue;
            }
            let mut link = edge.display().clone();
            shapes.extend(link.shapes(start, end, &context));
        }
        painter.extend(shapes);
        self.draw_terminals(&context, visible);
        // Plain nodes first, emphasised ones on top.
        let mut on_top = Vec::new();
        let bound = petgraph::visit::NodeIndexable::node_bound(g);
        let mut shapes = Vec::new();
        for idx in (0..bound).map(NodeIndex::new) {
            let Some(node) = self.graph.node_mut(idx) else {
                continue;
            };
            if !node.display().rect().intersects(visible) {
                continue;
            }
            let emphasised = node.selected()
                || node.hovered()
                || matches!(
                    node.payload().look.emphasis,
                    Emphasis::Match | Emphasis::CurrentMatch | Emphasis::Neighbour
                );
            let drawn = node.display_mut().shapes(&context);
            if emphasised {
                on_top.extend(drawn);
            } else {
                shapes.extend(drawn);
            }
        }
        painter.extend(shapes);
        painter.extend(on_top);
    }

    /// The graph's inputs and outputs: a pill each, linked to the boxes that read or write
    /// them.
    fn draw_terminals(&self, ctx: &DrawContext, visible: Rect) {
        let mut out = Vec::new();
        for t in &self.terminals {
            for (idx, tag, detour) in &t.links {
                let Some(node) = self.graph.node(*idx) else {
                    continue;
                };
                let boxed = node.display().rect();
                if !boxed.union(t.rect).intersects(visible) {
                    continue;
                }
                let (from, to) = if t.input {
                    (t.rect.center_bottom(), boxed.center_top())
                } else {
                    (boxed.center_bottom(), t.rect.center_top())
                };
                out.extend(shapes::link_shapes(ctx, from, to, *detour, tag.as_deref()));
            }
            if t.rect.intersects(visible) {
                out.extend(shapes::terminal_shapes(ctx, t.rect, &t.name, t.input));
            }
        }
        ctx.painter.extend(out);
    }

    /// The overview in the bottom-right corner when the graph does not fit the view; click or
    /// drag in it to move there.
    fn minimap(&mut self, ui: &mut Ui, rect: Rect) {
        let whole = self.fit_zoom(rect, self.bounds);
        if self.zoom <= whole * 1.05 || rect.width() < 3.0 * MINIMAP_SIDE {
            return;
        }
        let scale = MINIMAP_SIDE / self.bounds.width().max(self.bounds.height());
        let size = (self.bounds.size() * scale).max(Vec2::splat(24.0));
        let map = Rect::from_min_size(rect.max - size - Vec2::splat(12.0), size);
        if self.minimap_dirty || self.minimap.is_none() {
            let image = self.minimap_image(size, ui.visuals().dark_mode);
            self.minimap = Some(ui.ctx().load_texture(
                "graph-minimap",
                image,
                TextureOptions::LINEAR,
            ));
            self.minimap_dirty = false;
        }
        let painter = ui.painter_at(rect);
        painter.rect(
            map.expand(3.0),
            4.0,
            ui.visuals().window_fill.gamma_multiply(0.92),
            ui.visuals().window_stroke,
            StrokeKind::Outside,
        );
        if let Some(texture) = &self.minimap {
            painter.image(
                texture.id(),
                map,
                Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0)),
                Color32::WHITE,
            );
        }
        let to_map = |p: Pos2| map.min + (p - self.bounds.min) * scale;
        let view = Rect::from_min_max(
            to_map(self.to_canvas(rect, rect.min)),
            to_map(self.to_canvas(rect, rect.max)),
        )
        .intersect(map.expand(2.0));
        painter.rect_stroke(
            view,
            0.0,
            Stroke::new(1.5, ui.visuals().selection.stroke.color),
            StrokeKind::Inside,
        );
        let response = ui.interact(map, ui.id().with("graph-minimap"), Sense::click_and_drag());
        if let Some(p) = response
            .interact_pointer_pos()
            .filter(|_| response.is_pointer_button_down_on() || response.clicked())
        {
            let target = self.bounds.min + (p - map.min) / scale;
            self.pan = rect.size() / 2.0 - target.to_vec2() * self.zoom;
        }
    }

    fn minimap_image(&self, size: Vec2, dark: bool) -> ColorImage {
        let (w, h) = (size.x.ceil() as usize, size.y.ceil() as usize);
        let background = if dark {
            Color32::from_gray(30)
        } else {
            Color32::from_gray(245)
        };
        let mut image = ColorImage::new([w, h], vec![background; w * h]);
        let sx = w as f32 / self.bounds.width().max(1.0);
        let sy = h as f32 / self.bounds.height().max(1.0);
        for (_, node) in self.graph.nodes_iter() {
            let r = node.display().rect();
            let x0 = (((r.min.x - self.bounds.min.x) * sx) as usize).min(w - 1);
            let x1 = (((r.max.x - self.bounds.min.x) * sx).ceil() as usize).clamp(x0 + 1, w);
            let y0 = (((r.min.y - self.bounds.min.y) * sy) as usize).min(h - 1);
            let y1 = (((r.max.y - self.bounds.min.y) * sy).ceil() as usize).clamp(y0 + 1, h);
            let colour = node.payload().look.fill;
            for y in y0..y1 {
                for x in x0..x1 {
                    image.pixels[y * w + x] = colour;
                }
            }
        }
        image
    }
}
