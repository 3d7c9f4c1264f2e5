//! The settings that made a QDQ model, as a short list of (label, value) rows: what a report
//! and the studio's Results show under "How it was made", so that a figure can be traced to
//! the recipe that produced it without opening the recipe file.

use super::{Int4Output, Placement, QuantMode, Recipe};

impl Recipe {
    /// The recipe in a few rows: target, types, ranges, placement, exclusions, techniques.
    pub fn summary(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![
            (
                "target",
                self.target.map_or_else(
                    || "none (the recipe's own settings)".to_owned(),
                    |t| t.name().to_owned(),
                ),
            ),
            ("mode", self.mode_line()),
        ];
        if self.mode != QuantMode::Int4 {
            rows.push(("activation ranges", self.calibration_method.label()));
            rows.push((
                "placement",
                format!(
                    "{}{}",
                    match self.placement {
                        Placement::Ort => "onnxruntime's QDQ placement",
                        Placement::Tensorrt => "TensorRT's (compute-op inputs only)",
                    },
                    if self.preprocessing.simplify {
                        ", on the simplified graph"
                    } else {
                        ""
                    }
                ),
            ));
        }
        rows.push(("excluded", self.exclusions_line()));
        rows.push(("techniques", self.techniques_line()));
        rows
    }

    /// The types, their symmetry and the weights' granularity in one line.
    fn mode_line(&self) -> String {
        let sym = |symmetric: bool| if symmetric { "symmetric" } else { "asymmetric" };
        match self.mode {
            QuantMode::Int4 => format!(
                "int4 weights ({}, blocks of {}, as {}), activations float",
                self.int4_method.name(),
                self.block_size,
                match self.int4_output {
                    Int4Output::Dq => "DequantizeLinear",
                    Int4Output::Matmulnbits => "MatMulNBits",
                }
            ),
            QuantMode::Int8 | QuantMode::Fp8 => format!(
                "activations {} {}, weights {} {} {}{}",
                self.activation_type.data_type(),
                sym(self.symmetric_activations),
                self.weight_type.data_type(),
                sym(self.symmetric_weights),
                if self.per_channel {
                    "per channel"
                } else {
                    "per tensor"
                },
                if self.saturation_guard {
                    ", saturation guard on"
                } else {
                    ""
                }
            ),
        }
    }

    /// The op types and nodes left in float by name, or "none".
    fn exclusions_line(&self) -> String {
        let mut parts = Vec::new();
        if !self.op_types_to_exclude.is_empty() {
            parts.push(format!("op types {}", self.op_types_to_exclude.join(", ")));
        }
        if !self.nodes_to_exclude.is_empty() {
            let shown: Vec<&str> = self
                .nodes_to_exclude
                .iter()
                .take(6)
                .map(String::as_str)
                .collect();
            let more = self.nodes_to_exclude.len() - shown.len();
            parts.push(format!(
                "{} node(s): {}{}",
                self.nodes_to_exclude.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join("; ")
        }
    }

    /// The accuracy techniques switched on, or "none".
    fn techniques_line(&self) -> String {
        let switches = [
            (self.preprocessing.equalize, "cross-layer equalization"),
            (self.smoothquant, "SmoothQuant"),
            (self.bias_correction, "bias correction"),
            (self.gptq, "GPTQ"),
            (self.layerwise_range, "layer-wise ranges"),
            (
                !self.weight_range.is_minmax(),
                "weight ranges by least error",
            ),
            (!self.node_precision.is_empty(), "mixed precision"),
        ];
        let on: Vec<&str> = switches
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| *name)
            .collect();
        if on.is_empty() {
            "none".to_owned()
        } else {
            on.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::recipe::{Recipe, Target};

    #[test]
    fn a_recipe_reads_as_its_target_types_and_exclusions() {
        let mut recipe = Recipe::for_target(Target::Cpu);
        recipe.nodes_to_exclude = (0..8).map(|i| format!("Conv_{i}")).collect();
        recipe.bias_correction = true;
        let rows = recipe.summary();
        let value = |label: &str| {
            rows.iter()
                .find(|(l, _)| *l == label)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(value("target"), "cpu");
        assert!(value("mode").contains("weights int8 symmetric per channel"));
        assert_eq!(
            value("excluded"),
            "8 node(s): Conv_0, Conv_1, Conv_2, Conv_3, Conv_4, Conv_5 and 2 more"
        );
        assert_eq!(value("techniques"), "bias correction");
        let legacy = Recipe::default();
        assert!(legacy.summary()[0].1.starts_with("none"));
    }
}
