//! The layered top-to-bottom layout of a model's graph for the studio's graph view.
//!
//! Constant nodes are folded into their consumers, as Netron does (initializers are not nodes
//! at all): otherwise hundreds of one-edge vertices pull the layout sideways. In a quantized
//! model the Q/DQ pairs are folded too ([`QdqStructure`]): an edge then runs from the producer
//! of the quantized tensor to its consumer, and the view draws the pair as a badge on it. Positions come
//! from `rust-sugiyama` (layering, crossing minimisation, coordinate assignment: a library of
//! the field; only the folding and the packing of disconnected parts are ours). Large graphs
//! take seconds, so the studio runs this as a job.

use std::collections::{BTreeMap, HashMap};

use crate::model::ops;
use crate::model::qdq::QdqStructure;
use crate::model::{Graph, NodeId};

/// Vertical distance between layers and horizontal spacing between boxes, in layout units
/// (the view's points at zoom 1).
const SPACING: f64 = 28.0;
/// Height of a node box: its op type, a detail line and (zoomed in) its name.
pub const NODE_HEIGHT: f32 = 34.0;
/// Gap between disconnected parts placed side by side.
const PART_GAP: f32 = 60.0;

/// Width of a node's box: room for its op type and its detail line (see
/// [`crate::app::canvas::detail`]).
pub fn node_width(op_type: &str, detail: Option<&str>) -> f32 {
    let op = op_type.chars().count() as f32 * 7.5 + 24.0;
    let detail = detail.map_or(0.0, |d| d.chars().count() as f32 * 5.4 + 16.0);
    op.max(detail).max(56.0)
}

/// An edge of the laid-out graph: a tensor from one node to another.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutEdge {
    /// The producer.
    pub from: NodeId,
    /// The consumer.
    pub to: NodeId,
    /// The tensor's name: the one the consumer reads (a folded DequantizeLinear's output when
    /// the tensor is quantized on the way).
    pub tensor: String,
    /// Where the edge runs down when a straight curve would cross boxes between its ends (a
    /// residual connection skipping layers): this x, right of every box in the way.
    pub detour: Option<f32>,
}

/// Where every node goes.
#[derive(Debug, Clone, Default)]
pub struct GraphLayout {
    /// Centre of each node's box, by node id; `None` for folded Constant nodes.
    pub positions: Vec<Option<(f32, f32)>>,
    /// The edges drawn (tensors between two laid-out nodes).
    pub edges: Vec<LayoutEdge>,
    /// Extent of the whole layout.
    pub size: (f32, f32),
    /// Edges left out to break cycles (a valid ONNX graph has none; a broken one is shown
    /// anyway, with these flagged).
    pub cycle_edges: Vec<LayoutEdge>,
    /// True when the graph was too big for crossing minimisation and got the simple layered
    /// layout (see [`SIMPLE_LAYOUT_ABOVE`]).
    pub simplified: bool,
    /// The graph's inputs (above their first consumer) and outputs (below their producer).
    pub terminals: Vec<Terminal>,
    /// Width of each node's box, by node id.
    pub widths: Vec<f32>,
}

/// A graph input or output, drawn as a pill linked to the nodes that read it or the node
/// that writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Terminal {
    /// The tensor's name.
    pub name: String,
    /// True for an input, false for an output.
    pub input: bool,
    /// Centre of its pill.
    pub centre: (f32, f32),
    /// Width of its pill.
    pub width: f32,
    /// The drawn nodes it links to.
    pub links: Vec<TerminalLink>,
}

/// A link between a terminal and a box.
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalLink {
    /// The box.
    pub node: NodeId,
    /// The tensor name the box reads or writes (a folded DequantizeLinear's output when the
    /// input is quantized on the way).
    pub tensor: String,
    /// Where it runs down when a straight curve would cross boxes (see [`LayoutEdge::detour`]).
    pub detour: Option<f32>,
}

/// Width of a terminal's pill: room for its name, up to [`MAX_TERMINAL_CHARS`].
pub fn terminal_width(name: &str) -> f32 {
    (name.chars().count().min(MAX_TERMINAL_CHARS) as f32 * 6.5 + 20.0).max(48.0)
}

/// Longest name a terminal's pill makes room for (longer ones are elided).
pub const MAX_TERMINAL_CHARS: usize = 28;

/// The drawn nodes linked to each graph input and output, and where their pills go: an input
/// one layer above its topmost reader, an output one layer below its producer; pills on the
/// same row are pushed apart so none overlap.
fn place_terminals(
    graph: &Graph,
    qdq: &QdqStructure,
    positions: &[Option<(f32, f32)>],
) -> Vec<Terminal> {
    let step = NODE_HEIGHT + SPACING as f32;
    let at = |id: NodeId| positions.get(id.0).copied().flatten();
    let mut terminals = Vec::new();
    for name in graph.inputs() {
        let links: Vec<TerminalLink> = graph
            .nodes()
            .iter()
            .filter(|n| at(n.id).is_some())
            .flat_map(|n| {
                n.inputs
                    .iter()
                    .filter(|t| qdq.source_of(t) == name.as_str())
                    .map(move |t| TerminalLink {
                        node: n.id,
                        tensor: t.clone(),
                        detour: None,
                    })
            })
            .collect();
        let anchors: Vec<(f32, f32)> = links.iter().filter_map(|l| at(l.node)).collect();
        let Some(top) = anchors.iter().map(|p| p.1).reduce(f32::min) else {
            continue;
        };
        let x = anchors.iter().map(|p| p.0).sum::<f32>() / anchors.len() as f32;
        terminals.push(Terminal {
            name: name.clone(),
            input: true,
            centre: (x, top - step),
            width: terminal_width(name),
            links,
        });
    }
    for name in graph.outputs() {
        let source = qdq.source_of(name);
        let producer = graph
            .tensor(name)
            .and_then(|t| t.producer)
            .filter(|&p| at(p).is_some())
            .or_else(|| graph.tensor(source).and_then(|t| t.producer));
        let Some((producer, (x, y))) = producer.and_then(|p| at(p).map(|xy| (p, xy))) else {
            continue;
        };
        terminals.push(Terminal {
            name: name.clone(),
            input: false,
            centre: (x, y + step),
            width: terminal_width(name),
            links: vec![TerminalLink {
                node: producer,
                tensor: name.clone(),
                detour: None,
            }],
        });
    }
    spread(&mut terminals);
    terminals
}

/// Pushes pills on one row apart, left to right, so that none overlaps the next.
fn spread(terminals: &mut [Terminal]) {
    let mut order: Vec<usize> = (0..terminals.len()).collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (terminals[a].centre, terminals[b].centre);
        pa.1.total_cmp(&pb.1).then(pa.0.total_cmp(&pb.0))
    });
    for pair in order.windows(2) {
        let (a, b) = (&terminals[pair[0]], &terminals[pair[1]]);
        if a.centre.1 != b.centre.1 {
            continue;
        }
        let least = a.centre.0 + (a.width + b.width) / 2.0 + SPACING as f32 / 2.0;
        if b.centre.0 < least {
            terminals[pair[1]].centre.0 = least;
        }
    }
}

/// Each node's box width (by node id): its op type and its line of `details`.
fn box_widths(graph: &Graph, details: &[Option<String>]) -> Vec<f32> {
    graph
        .nodes()
        .iter()
        .map(|n| node_width(&n.op_type, details.get(n.id.0).and_then(|d| d.as_deref())))
        .collect()
}

/// The edges between drawn nodes (through folded Q/DQ pairs), and apart from them the
/// edges that close a cycle (a valid ONNX graph has none).
fn graph_edges(graph: &Graph, qdq: &QdqStructure) -> (Vec<LayoutEdge>, Vec<LayoutEdge>) {
    let folded = |id: NodeId| is_folded(graph, qdq, id);
    // Rank of each node in topological order: an edge that goes backwards closes a cycle.
    let mut rank = vec![usize::MAX; graph.nodes().len()];
    for (i, &id) in graph.topological_order().iter().enumerate() {
        rank[id.0] = i;
    }
    let mut edges = Vec::new();
    let mut cycle_edges = Vec::new();
    for node in graph.nodes() {
        let to = node.id;
        if folded(to) {
            continue;
        }
        for input in &node.inputs {
            let source = qdq.source_of(input);
            let Some(from) = graph.tensor(source).and_then(|t| t.producer) else {
                continue;
            };
            if folded(from) || from == to {
                continue;
            }
            let edge = LayoutEdge {
                from,
                to,
                tensor: input.clone(),
                detour: None,
            };
            if rank[from.0] < rank[to.0] && rank[to.0] != usize::MAX {
                edges.push(edge);
            } else {
                cycle_edges.push(edge);
            }
        }
    }
    (edges, cycle_edges)
}

/// Lays `graph` out where `reference` placed the nodes of the same name (a float model beside
/// its QDQ model: the same picture twice). A node the reference lacks (a BatchNormalization
/// the QDQ model has folded) goes beside its first placed producer, else at the origin.
pub fn layout_like(
    graph: &Graph,
    qdq: &QdqStructure,
    details: &[Option<String>],
    reference: &HashMap<&str, (f32, f32)>,
) -> GraphLayout {
    let widths = box_widths(graph, details);
    let (edges, cycle_edges) = graph_edges(graph, qdq);
    let mut positions: Vec<Option<(f32, f32)>> = vec![None; graph.nodes().len()];
    for node in graph.nodes() {
        if !is_folded(graph, qdq, node.id) {
            positions[node.id.0] = reference.get(node.name.as_str()).copied();
        }
    }
    let step = SPACING as f32 + NODE_HEIGHT;
    // Each node's producers, indexed once: a model with few names in common would otherwise
    // scan every edge for each of its nodes.
    let mut producers: Vec<Vec<NodeId>> = vec![Vec::new(); graph.nodes().len()];
    for e in &edges {
        producers[e.to.0].push(e.from);
    }
    for &id in graph.topological_order() {
        if positions[id.0].is_some() || is_folded(graph, qdq, id) {
            continue;
        }
        let beside_producer = producers[id.0]
            .iter()
            .find_map(|p| positions[p.0])
            .map(|(x, y)| (x + widths[id.0] + SPACING as f32, y + step / 2.0));
        positions[id.0] = beside_producer.or(Some((0.0, 0.0)));
    }
    let size = positions
        .iter()
        .flatten()
        .fold((0f32, 0f32), |(w, h), &(x, y)| {
            (w.max(x), h.max(y + NODE_HEIGHT))
        });
    let placed = Placed {
        positions,
        size,
        simplified: false,
    };
    finish(graph, qdq, placed, widths, (edges, cycle_edges))
}

/// Where the nodes went, before the graph's inputs and outputs are placed around them.
struct Placed {
    positions: Vec<Option<(f32, f32)>>,
    size: (f32, f32),
    simplified: bool,
}

/// The layout of `placed` nodes (of `widths`) with `edges` and cycle edges: the graph's
/// inputs and outputs placed around them, and every link routed past the boxes it would cross.
fn finish(
    graph: &Graph,
    qdq: &QdqStructure,
    placed: Placed,
    widths: Vec<f32>,
    (mut edges, cycle_edges): (Vec<LayoutEdge>, Vec<LayoutEdge>),
) -> GraphLayout {
    let Placed {
        positions,
        size,
        simplified,
    } = placed;
    let mut terminals = place_terminals(graph, qdq, &positions);
    Router::new(&positions, &widths).route(&mut edges, &mut terminals, &positions);
    GraphLayout {
        positions,
        edges,
        size,
        cycle_edges,
        simplified,
        terminals,
        widths,
    }
}

/// Above this many drawn nodes the layout is the simple one: layers by longest path, one
/// barycentre pass to order each layer. Crossing minimisation is super-linear and a
/// 50,000-node graph would keep the user waiting for minutes.
pub const SIMPLE_LAYOUT_ABOVE: usize = 10_000;

/// The layout library failed on this graph.
#[derive(Debug, thiserror::Error)]
#[error("the graph could not be laid out: {0}")]
pub struct LayoutError(String);

/// Lays `graph` out top to bottom, with the nodes of `qdq`'s Q/DQ pairs folded into edges;
/// each box is as wide as its op type and its line of `details` (by node id, may be empty).
pub fn layout(
    graph: &Graph,
    qdq: &QdqStructure,
    details: &[Option<String>],
) -> Result<GraphLayout, LayoutError> {
    let nodes = graph.nodes();
    let widths = box_widths(graph, details);
    let folded = |id: NodeId| is_folded(graph, qdq, id);
    let (edges, cycle_edges) = graph_edges(graph, qdq);
    let drawn = (0..nodes.len()).filter(|&i| !folded(NodeId(i))).count();
    if drawn > SIMPLE_LAYOUT_ABOVE {
        return Ok(simple_layout(graph, qdq, widths, edges, cycle_edges));
    }
    // The library numbers vertices by insertion order whatever ids it is given: use compact
    // indices and map them back.
    let laid_out: Vec<usize> = (0..nodes.len()).filter(|&i| !folded(NodeId(i))).collect();
    let mut compact = vec![u32::MAX; nodes.len()];
    for (k, &i) in laid_out.iter().enumerate() {
        compact[i] = k as u32;
    }
    let vertices: Vec<(u32, (f64, f64))> = laid_out
        .iter()
        .map(|&i| (compact[i], (f64::from(widths[i]), f64::from(NODE_HEIGHT))))
        .collect();
    let mut pairs: Vec<(u32, u32)> = edges
        .iter()
        .map(|e| (compact[e.from.0], compact[e.to.0]))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let config = rust_sugiyama::configure::Config {
        vertex_spacing: SPACING,
        ..Default::default()
    };
    // The library asserts on inputs it cannot handle; a model is user input, so a panic in
    // it becomes an error here instead of taking the studio down.
    let parts = std::panic::catch_unwind(|| {
        rust_sugiyama::from_vertices_and_edges(&vertices, &pairs, &config)
    })
    .map_err(|e| {
        LayoutError(
            e.downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the layout library failed".to_owned()),
        )
    })?;
    let mut positions = vec![None; nodes.len()];
    // Parts side by side, biggest first (the main network on the left), tops aligned.
    let mut parts = parts;
    parts.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
    let (mut x_offset, mut height) = (0f32, 0f32);
    for (part, _, _) in parts {
        let (min_x, max_x, min_y, max_y) = part.iter().fold(
            (
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ),
            |(a, b, c, d), &(k, (x, y))| {
                let width = laid_out.get(k).map_or(56.0, |&i| widths[i]);
                let half = f64::from(width) / 2.0;
                (a.min(x - half), b.max(x + half), c.min(y), d.max(y))
            },
        );
        for (k, (x, y)) in part {
            if let Some(slot) = laid_out.get(k).and_then(|&id| positions.get_mut(id)) {
                *slot = Some(((x - min_x) as f32 + x_offset, (y - min_y) as f32));
            }
        }
        x_offset += (max_x - min_x) as f32 + PART_GAP;
        height = height.max((max_y - min_y) as f32 + NODE_HEIGHT);
    }
    let placed = Placed {
        positions,
        size: ((x_offset - PART_GAP).max(0.0), height),
        simplified: false,
    };
    Ok(finish(graph, qdq, placed, widths, (edges, cycle_edges)))
}

/// The layout for very large graphs: each node on the layer of its longest path from an
/// input, each layer ordered once by the mean position of its producers. Linear time.
fn simple_layout(
    graph: &Graph,
    qdq: &QdqStructure,
    widths: Vec<f32>,
    edges: Vec<LayoutEdge>,
    cycle_edges: Vec<LayoutEdge>,
) -> GraphLayout {
    let nodes = graph.nodes();
    let mut producers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for e in &edges {
        producers[e.to.0].push(e.from.0);
    }
    let mut depth = vec![0usize; nodes.len()];
    for &id in graph.topological_order() {
        depth[id.0] = producers[id.0]
            .iter()
            .map(|&p| depth[p] + 1)
            .max()
            .unwrap_or(0);
    }
    let drawn: Vec<usize> = (0..nodes.len())
        .filter(|&i| !is_folded(graph, qdq, NodeId(i)))
        .collect();
    let layers = drawn.iter().map(|&i| depth[i]).max().map_or(0, |d| d + 1);
    let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for &i in &drawn {
        by_layer[depth[i]].push(i);
    }
    let mut positions = vec![None; nodes.len()];
    let mut width = 0f32;
    for (layer, members) in by_layer.iter_mut().enumerate() {
        let key = |i: usize| -> f32 {
            let xs: Vec<f32> = producers[i]
                .iter()
                .filter_map(|&p| positions[p].map(|(x, _): (f32, f32)| x))
                .collect();
            if xs.is_empty() {
                i as f32
            } else {
                xs.iter().sum::<f32>() / xs.len() as f32
            }
        };
        let mut keyed: Vec<(f32, usize)> = members.iter().map(|&i| (key(i), i)).collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        let y = layer as f32 * (NODE_HEIGHT + SPACING as f32) + NODE_HEIGHT / 2.0;
        let mut x = 0f32;
        for (_, i) in keyed {
            let w = widths[i];
            positions[i] = Some((x + w / 2.0, y));
            x += w + SPACING as f32;
        }
        width = width.max(x);
    }
    let placed = Placed {
        positions,
        size: (width, layers as f32 * (NODE_HEIGHT + SPACING as f32)),
        simplified: true,
    };
    finish(graph, qdq, placed, widths, (edges, cycle_edges))
}

/// Finds detours for links whose straight curve would cross boxes on the rows between their
/// ends: an x right of those boxes, where the link runs down instead (residual connections
/// in a deep network otherwise run through every box they skip).
struct Router {
    /// Each row of boxes (by y), as x extents sorted left to right.
    rows: BTreeMap<i64, Vec<(f32, f32)>>,
}

impl Router {
    fn new(positions: &[Option<(f32, f32)>], widths: &[f32]) -> Self {
        let mut rows: BTreeMap<i64, Vec<(f32, f32)>> = BTreeMap::new();
        for (i, p) in positions.iter().enumerate() {
            if let Some((x, y)) = p {
                let half = widths.get(i).copied().unwrap_or(56.0) / 2.0;
                rows.entry(row_key(*y))
                    .or_default()
                    .push((x - half, x + half));
            }
        }
        for row in rows.values_mut() {
            row.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Router { rows }
    }

    /// The detour of a link from a box (or pill) centred at `a` down to one centred at `b`.
    fn detour(&self, a: (f32, f32), b: (f32, f32)) -> Option<f32> {
        if row_key(b.1) <= row_key(a.1) + 1 {
            return None; // adjacent rows (or a cycle): nothing in between
        }
        let between = || {
            self.rows
                .range(row_key(a.1) + 1..row_key(b.1))
                .map(|(_, r)| r)
        };
        let band = (a.0.min(b.0) - 2.0, a.0.max(b.0) + 2.0);
        let mut x = between()
            .filter_map(|row| rightmost_in(row, band))
            .reduce(f32::max)?;
        // Past the boxes in the way; then past any box the vertical run itself would cross.
        x += SPACING as f32 / 2.0;
        for _ in 0..16 {
            let Some(right) = between()
                .filter_map(|row| rightmost_in(row, (x - 4.0, x + 4.0)))
                .reduce(f32::max)
            else {
                break;
            };
            x = right + SPACING as f32 / 2.0;
        }
        Some(x)
    }

    /// Routes every edge and every terminal link.
    fn route(
        &self,
        edges: &mut [LayoutEdge],
        terminals: &mut [Terminal],
        positions: &[Option<(f32, f32)>],
    ) {
        let at = |id: NodeId| positions.get(id.0).copied().flatten();
        for edge in edges.iter_mut() {
            if let (Some(a), Some(b)) = (at(edge.from), at(edge.to)) {
                edge.detour = self.detour(a, b);
            }
        }
        for t in terminals.iter_mut() {
            for link in &mut t.links {
                let Some(node) = at(link.node) else {
                    continue;
                };
                let (a, b) = if t.input {
                    (t.centre, node)
                } else {
                    (node, t.centre)
                };
                link.detour = self.detour(a, b);
            }
        }
    }
}

/// A row's key: its y to the nearest point.
fn row_key(y: f32) -> i64 {
    y.round() as i64
}

/// The right edge of the rightmost box of `row` (sorted extents) overlapping `band`.
fn rightmost_in(row: &[(f32, f32)], band: (f32, f32)) -> Option<f32> {
    let first = row.partition_point(|&(_, right)| right < band.0);
    row[first..]
        .iter()
        .take_while(|&&(left, _)| left <= band.1)
        .map(|&(_, right)| right)
        .reduce(f32::max)
}

/// True when `node` is not drawn as a box: a Constant (folded into its consumers) or a node of
/// a folded Q/DQ pair.
pub fn is_folded(graph: &Graph, qdq: &QdqStructure, node: NodeId) -> bool {
    graph.node(node).op_type == ops::CONSTANT || qdq.is_folded(node)
}

/// Index from node id to its neighbours in the layout, for emphasising a selection.
pub fn neighbours(layout: &GraphLayout) -> HashMap<NodeId, Vec<NodeId>> {
    let mut out: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for e in &layout.edges {
        out.entry(e.from).or_default().push(e.to);
        out.entry(e.to).or_default().push(e.from);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};

    #[test]
    fn layers_go_top_down_constants_fold_and_parts_sit_side_by_side() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        b.input("z", DataType::Float32, &[1, 4]);
        b.node("Constant", &[], &["c"]).name("const").attr_tensor(
            "value",
            &TensorArray::Float32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1, 4]))),
        );
        b.node("Add", &["x", "c"], &["a"]).name("add");
        b.node("Relu", &["a"], &["r"]).name("relu");
        b.node("Sigmoid", &["a"], &["s"]).name("sigmoid");
        b.node("Mul", &["r", "s"], &["y"]).name("mul");
        b.node("Neg", &["z"], &["w"]).name("separate");
        b.output("y", DataType::Float32, &[1, 4]);
        b.output("w", DataType::Float32, &[1, 4]);
        let graph = Graph::build(&b.build());
        let l = layout(&graph, &QdqStructure::default(), &[]).unwrap();
        let pos = |name: &str| {
            let id = graph.nodes().iter().position(|n| n.name == name).unwrap();
            l.positions[id]
        };
        assert_eq!(pos("const"), None, "the Constant is folded into the Add");
        for e in &l.edges {
            let (a, b) = (l.positions[e.from.0].unwrap(), l.positions[e.to.0].unwrap());
            assert!(a.1 < b.1, "{} flows downwards", e.tensor);
        }
        assert_eq!(l.edges.len(), 4);
        let (relu, sigmoid) = (pos("relu").unwrap(), pos("sigmoid").unwrap());
        assert_eq!(relu.1, sigmoid.1, "parallel branches share a layer");
        assert!((relu.0 - sigmoid.0).abs() > 40.0, "and do not overlap");
        // The disconnected Neg sits to the right of the main part.
        let max_main = ["add", "relu", "sigmoid", "mul"]
            .iter()
            .map(|n| pos(n).unwrap().0)
            .fold(f32::MIN, f32::max);
        assert!(pos("separate").unwrap().0 > max_main);
        assert!(l.cycle_edges.is_empty());
        assert!(l.size.0 > 0.0 && l.size.1 >= 3.0 * NODE_HEIGHT);
        assert_eq!(neighbours(&l)[&NodeId(4)].len(), 2, "mul has two inputs");
        // The inputs sit above their readers, the outputs below their producers, apart.
        let terminal = |name: &str| l.terminals.iter().find(|t| t.name == name).unwrap();
        let (x, z, y, w) = (terminal("x"), terminal("z"), terminal("y"), terminal("w"));
        assert!(x.input && z.input && !y.input && !w.input);
        let linked = |t: &Terminal| -> Vec<(NodeId, String)> {
            t.links.iter().map(|l| (l.node, l.tensor.clone())).collect()
        };
        assert_eq!(linked(x), [(NodeId(1), "x".to_owned())]);
        assert!(x.centre.1 < pos("add").unwrap().1);
        assert_eq!(linked(y), [(NodeId(4), "y".to_owned())]);
        assert!(y.centre.1 > pos("mul").unwrap().1);
        assert!(w.centre.1 > pos("separate").unwrap().1);
        let rows: Vec<&Terminal> = l
            .terminals
            .iter()
            .filter(|t| t.centre.1 == x.centre.1)
            .collect();
        for (a, b) in rows.iter().zip(rows.iter().skip(1)) {
            assert!(
                (a.centre.0 - b.centre.0).abs() >= (a.width + b.width) / 2.0,
                "pills overlap"
            );
        }
    }

    #[test]
    fn a_quantized_input_links_through_its_folded_pair() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        b.initializer(
            "s",
            TensorArray::Float32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 0.1)),
        );
        b.node("QuantizeLinear", &["x", "s"], &["x_q"]).name("q");
        b.node("DequantizeLinear", &["x_q", "s"], &["x_dq"])
            .name("dq");
        b.node("Relu", &["x_dq"], &["y"]).name("relu");
        b.output("y", DataType::Float32, &[1, 4]);
        let model = b.build();
        let graph = Graph::build(&model);
        let qdq = QdqStructure::read(&model, &graph, |_, _| true);
        let l = layout(&graph, &qdq, &[]).unwrap();
        let relu = graph.node_by_name("relu").unwrap().id;
        assert_eq!(
            l.positions.iter().filter(|p| p.is_some()).count(),
            1,
            "only the Relu"
        );
        let x = l.terminals.iter().find(|t| t.input).unwrap();
        assert_eq!(x.links.len(), 1);
        assert_eq!(
            (x.links[0].node, x.links[0].tensor.as_str()),
            (relu, "x_dq"),
            "read through the pair"
        );
    }

    #[test]
    fn a_very_large_graph_gets_the_linear_layered_layout() {
        // A chain with a side branch every 100 nodes, past the crossing-minimisation limit.
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        let mut current = "x".to_owned();
        for i in 0..SIMPLE_LAYOUT_ABOVE + 10 {
            let out = format!("t{i}");
            if i % 100 == 0 {
                b.node("Neg", &[&current], &[&format!("{out}_side")]);
                b.node("Add", &[&current, &format!("{out}_side")], &[&out]);
            } else {
                b.node("Relu", &[&current], &[&out]);
            }
            current = out;
        }
        b.output(&current, DataType::Float32, &[1, 4]);
        let graph = Graph::build(&b.build());
        let l = layout(&graph, &QdqStructure::default(), &[]).unwrap();
        assert!(l.simplified);
        assert!(l.positions.iter().all(Option::is_some));
        for e in &l.edges {
            let (a, b) = (l.positions[e.from.0].unwrap(), l.positions[e.to.0].unwrap());
            assert!(a.1 < b.1, "{} flows downwards", e.tensor);
        }
        assert!(
            l.size.1 > SIMPLE_LAYOUT_ABOVE as f32 * NODE_HEIGHT,
            "one layer per step"
        );
        // The residual edges (into each Add, past its Neg) run beside the boxes they skip;
        // the first reads the graph input.
        let detoured = l.edges.iter().filter(|e| e.detour.is_some()).count();
        assert_eq!(detoured, (SIMPLE_LAYOUT_ABOVE + 10) / 100);
        let input = l.terminals.iter().find(|t| t.input).unwrap();
        assert_eq!(input.links.len(), 2, "the first Neg and Add");
        assert_eq!(input.links.iter().filter(|k| k.detour.is_some()).count(), 1);
        assert_no_edge_crosses_a_box(&l);
    }

    /// Every edge's vertical run (its detour, or the band between its ends) misses every box
    /// on the rows between its ends.
    fn assert_no_edge_crosses_a_box(l: &GraphLayout) {
        let boxes: Vec<(f32, f32, f32)> = l
            .positions
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.map(|(x, y)| (x - l.widths[i] / 2.0, x + l.widths[i] / 2.0, y)))
            .collect();
        /// A link's ends, detour and tensor.
        type Link<'a> = ((f32, f32), (f32, f32), Option<f32>, &'a str);
        let mut links: Vec<Link> = l
            .edges
            .iter()
            .map(|e| {
                let (a, b) = (l.positions[e.from.0].unwrap(), l.positions[e.to.0].unwrap());
                (a, b, e.detour, e.tensor.as_str())
            })
            .collect();
        for t in &l.terminals {
            for k in &t.links {
                let node = l.positions[k.node.0].unwrap();
                let (a, b) = if t.input {
                    (t.centre, node)
                } else {
                    (node, t.centre)
                };
                links.push((a, b, k.detour, t.name.as_str()));
            }
        }
        for (a, b, detour, tensor) in links {
            let (lo, hi) = match detour {
                Some(x) => (x, x),
                None => (a.0.min(b.0), a.0.max(b.0)),
            };
            for &(left, right, y) in &boxes {
                if y > a.1 + 1.0 && y < b.1 - 1.0 {
                    assert!(
                        right < lo || left > hi,
                        "{tensor} crosses the box at ({left}..{right}, {y})"
                    );
                }
            }
        }
    }
}
