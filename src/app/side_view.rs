//! The float model and its QDQ model side by side: the other model of the pair (the last
//! comparison's QDQ model beside a float model, the chosen float model beside a quantized
//! one) drawn at the open model's positions, node for node by name, with the same colours
//! (state or heat map), the same selection and the same camera.

use std::collections::{HashMap, HashSet};

use egui::Vec2;

use crate::app::canvas::detail::node_details;
use crate::app::canvas::{GraphCanvas, NodeLook};
use crate::app::layout::{self, GraphLayout};
use crate::model::{Graph, Model, NodeId};

/// The other model of the pair as the second view draws it.
pub struct SideView {
    /// What it is ("QDQ model of the last comparison", "float model").
    pub label: String,
    /// Its graph index.
    pub graph: Graph,
    /// Its view.
    pub canvas: GraphCanvas,
    /// For each of its nodes (by id), the open model's node of the same name.
    pub to_doc: Vec<Option<NodeId>>,
    /// The open model's node ids to this graph's, by name.
    from_doc: HashMap<NodeId, NodeId>,
    /// Identity of the model it was built from, to rebuild when that changes.
    pub source: usize,
    /// The camera both views had after the last frame.
    camera: Option<(f32, Vec2)>,
}

impl std::fmt::Debug for SideView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideView")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl SideView {
    /// The view of `model` laid out like the open model (`doc_graph` at `doc_layout`).
    pub fn build(
        model: &Model,
        label: String,
        source: usize,
        doc_graph: &Graph,
        doc_layout: &GraphLayout,
    ) -> SideView {
        let graph = Graph::build(model);
        let qdq = crate::quant::ops::qdq_structure(model, &graph);
        let details = node_details(model, &graph, &qdq);
        let reference: HashMap<&str, (f32, f32)> = doc_graph
            .nodes()
            .iter()
            .filter_map(|n| Some((n.name.as_str(), doc_layout.positions.get(n.id.0).copied()??)))
            .collect();
        let layout = layout::layout_like(&graph, &qdq, &details, &reference);
        let canvas = GraphCanvas::new(&graph, &layout, &qdq, &details, &HashSet::new());
        let to_doc: Vec<Option<NodeId>> = graph
            .nodes()
            .iter()
            .map(|n| doc_graph.node_by_name(&n.name).map(|d| d.id))
            .collect();
        let from_doc = to_doc
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (d, NodeId(i))))
            .collect();
        SideView {
            label,
            graph,
            canvas,
            to_doc,
            from_doc,
            source,
            camera: None,
        }
    }

    /// Gives each node the look of the open model's node of the same name (a node the open
    /// model lacks keeps `plain`) and marks the same selection.
    pub fn restyle(&mut self, doc_looks: &[NodeLook], selected: &HashSet<NodeId>, plain: NodeLook) {
        let looks: Vec<NodeLook> = self
            .to_doc
            .iter()
            .map(|d| d.and_then(|d| doc_looks.get(d.0).copied()).unwrap_or(plain))
            .collect();
        let selected: HashSet<NodeId> = selected
            .iter()
            .filter_map(|d| self.from_doc.get(d).copied())
            .collect();
        self.canvas.restyle(&looks, &selected);
    }

    /// Keeps both views on one camera: the one the user moved this frame leads.
    pub fn sync(&mut self, main: &mut GraphCanvas) {
        let (m, s) = (main.camera(), self.canvas.camera());
        match self.camera {
            Some(last) if s != last && m == last => main.set_camera(s),
            _ => self.canvas.set_camera(m),
        }
        self.camera = Some(main.camera());
    }
}
