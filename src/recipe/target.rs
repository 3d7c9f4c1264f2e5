//! Deployment targets: one choice that sets everything the runtime a QDQ model is made for
//! decides about it (placement, activation and weight types and their symmetry, per-channel
//! weights, the scale form, the saturation guard), and says what it set.
//!
//! A target is written into the recipe (`target = "tensorrt"`), so the recipe, never the
//! machine that quantizes, decides the model: the same recipe makes the same bytes anywhere.
//! Each target holds each of its settings either as its *default* (the runtime also runs
//! other choices: a recipe may say otherwise) or as *required* (the runtime runs nothing
//! else, or runs it wrong: a recipe that says otherwise is refused with one line naming the
//! setting and the targets to choose from). The settings are kept as recipe keys and TOML
//! values, so that one table serves applying a target, filling a hand-written recipe that
//! names one, and checking a recipe against it. Where each rule comes from: the README's
//! *Deployment targets*.

use serde::{Deserialize, Serialize};

use super::{QuantMode, Recipe};
use crate::runtime::EpSpec;

/// Where the quantized model will run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// ONNX Runtime's CPU provider on what its own default assumes: x86 with VNNI or AMX
    /// (Intel since 2019, AMD since Zen 4) or ARM, whose integer kernels do not saturate.
    Cpu,
    /// ONNX Runtime's CPU provider on x86 without VNNI (AVX2 only): u8×s8 pairs add in 16 bits
    /// and saturate, so the weights those kernels read get 7 bits.
    CpuAvx2,
    /// TensorRT, directly or through ONNX Runtime's TensorRT provider (CUDA runs the same
    /// model): symmetric int8, Q/DQ on the inputs of compute ops (ModelOpt's rules).
    Tensorrt,
    /// DirectML (Windows GPUs and NPUs through ONNX Runtime).
    Directml,
    /// OpenVINO through ONNX Runtime's OpenVINO provider.
    Openvino,
    /// AMD Ryzen AI NPUs (Vitis AI): XINT8, symmetric int8 with power-of-two scales.
    Npu,
    /// Qualcomm NPUs through ONNX Runtime's QNN provider (HTP): 16-bit activations, 8-bit
    /// weights.
    Qnn,
}

/// How firmly a target holds one of its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The target's choice; the runtime also runs others, so a recipe may say otherwise.
    Default,
    /// The runtime runs nothing else (or runs it wrong): a recipe that says otherwise is
    /// refused.
    Required,
}

/// One recipe setting a target makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The recipe key (`activation_type`, `saturation_guard`, ...).
    pub key: &'static str,
    /// The value the target writes, as the recipe's TOML holds it.
    pub value: toml::Value,
    /// Further values a [`Binding::Required`] setting accepts (`pow2` beside `pow2_mse`).
    pub also: Vec<toml::Value>,
    /// Whether a recipe may say otherwise.
    pub binding: Binding,
    /// The value as users read it (`int8`, `pow2_mse or pow2`).
    pub shown: &'static str,
    /// Why the target sets it (the runtime's rule, in a few words).
    pub why: &'static str,
}

impl Setting {
    fn new(key: &'static str, value: toml::Value, shown: &'static str, why: &'static str) -> Self {
        Setting {
            key,
            value,
            also: Vec::new(),
            binding: Binding::Default,
            shown,
            why,
        }
    }

    fn text(key: &'static str, value: &'static str, why: &'static str) -> Self {
        Setting::new(key, toml::Value::String(value.to_owned()), value, why)
    }

    fn flag(key: &'static str, value: bool, why: &'static str) -> Self {
        let shown = if value { "true" } else { "false" };
        Setting::new(key, toml::Value::Boolean(value), shown, why)
    }

    fn required(mut self) -> Self {
        self.binding = Binding::Required;
        self
    }

    /// True when `value` is one this setting accepts.
    pub fn accepts(&self, value: &toml::Value) -> bool {
        *value == self.value || self.also.contains(value)
    }
}

/// A range method as the recipe's TOML holds it (`{ method = "..." }`).
fn method(name: &str) -> toml::Value {
    let mut table = toml::Table::new();
    table.insert("method".to_owned(), toml::Value::String(name.to_owned()));
    toml::Value::Table(table)
}

impl Target {
    /// Every target, in the order the faces list them.
    pub const ALL: [Target; 7] = [
        Target::Cpu,
        Target::CpuAvx2,
        Target::Tensorrt,
        Target::Directml,
        Target::Openvino,
        Target::Npu,
        Target::Qnn,
    ];

    /// The target's name (the CLI's and the recipe's).
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::CpuAvx2 => "cpu-avx2",
            Target::Tensorrt => "tensorrt",
            Target::Directml => "directml",
            Target::Openvino => "openvino",
            Target::Npu => "npu",
            Target::Qnn => "qnn",
        }
    }

    /// Parses a name (`_` for `-`, any case; `trt` and `dml` as the EPs are spelled).
    pub fn parse(name: &str) -> Option<Target> {
        let name = name.trim().to_ascii_lowercase().replace('_', "-");
        match name.as_str() {
            "trt" => Some(Target::Tensorrt),
            "dml" => Some(Target::Directml),
            "ov" => Some(Target::Openvino),
            other => Target::ALL.into_iter().find(|t| t.name() == other),
        }
    }

    /// Every target's name, comma-separated, for messages.
    pub fn choices() -> String {
        Target::ALL.map(Target::name).join(", ")
    }

    /// What the target is, in one line (the studio's list and `--help`).
    pub fn describe(self) -> &'static str {
        match self {
            Target::Cpu => {
                "ONNX Runtime CPU on x86 with VNNI/AMX (Intel since 2019, AMD since Zen 4) or ARM: 8-bit weights"
            }
            Target::CpuAvx2 => {
                "ONNX Runtime CPU on x86 without VNNI: 7-bit weights where u8×s8 pairs can saturate"
            }
            Target::Tensorrt => {
                "TensorRT (and ONNX Runtime CUDA/TensorRT): symmetric int8, Q/DQ on compute-op inputs"
            }
            Target::Directml => "DirectML (Windows GPUs and NPUs): uint8 activations, int8 weights",
            Target::Openvino => {
                "OpenVINO: uint8 activations, symmetric int8 per-channel weights, fused by its compiler"
            }
            Target::Npu => {
                "AMD Ryzen AI NPU (XINT8): symmetric int8, power-of-two scales, per-tensor weights"
            }
            Target::Qnn => "Qualcomm QNN (HTP): 16-bit activations, 8-bit weights (A16W8)",
        }
    }

    /// The target a calibration provider stands for (CPU → `cpu`, CUDA and TensorRT →
    /// `tensorrt`, DirectML → `directml`, OpenVINO → `openvino`); `cpu` for the rest.
    pub fn for_execution_provider(ep: &EpSpec) -> Target {
        match ep {
            EpSpec::Cuda(_) | EpSpec::TensorRt(_) => Target::Tensorrt,
            EpSpec::DirectMl(_) => Target::Directml,
            EpSpec::OpenVino(_) => Target::Openvino,
            EpSpec::Cpu | EpSpec::CoreMl => Target::Cpu,
        }
    }

    /// The target a run on `eps` gets without one named: the first provider's (`cpu` for
    /// none).
    pub fn for_execution_providers(eps: &[EpSpec]) -> Target {
        eps.first()
            .map_or(Target::Cpu, Target::for_execution_provider)
    }

    /// The execution provider `compare` measures the model's latency on for this target
    /// (the NPUs' providers are not in this build: their models are timed on the CPU).
    pub fn latency_ep(self) -> EpSpec {
        match self {
            Target::Cpu | Target::CpuAvx2 | Target::Npu | Target::Qnn => EpSpec::Cpu,
            Target::Tensorrt => EpSpec::TensorRt(0),
            Target::Directml => EpSpec::DirectMl(0),
            Target::Openvino => EpSpec::OpenVino("CPU".to_owned()),
        }
    }

    /// The execution provider placement is tuned for speed on (`--tune_latency`); `None` for
    /// the NPUs, whose providers (Vitis AI, QNN) this build cannot run: timing their models on
    /// another provider would tune them for the wrong kernels.
    pub fn tuning_ep(self) -> Option<EpSpec> {
        match self {
            Target::Npu | Target::Qnn => None,
            other => Some(other.latency_ep()),
        }
    }

    /// The settings the target makes for a recipe of `mode`. Integer types, symmetry,
    /// per-channel weights, scale form and the saturation guard are int8 settings: fp8 and
    /// int4 fix their own types.
    pub fn settings(self, mode: QuantMode) -> Vec<Setting> {
        let mut settings = vec![self.placement()];
        if mode == QuantMode::Int4 {
            settings.push(self.int4_output());
        }
        if mode == QuantMode::Int8 {
            settings.extend(self.integer_settings());
            settings.push(self.guard());
            if self == Target::CpuAvx2 {
                settings.push(Setting::text(
                    "saturation_guard_scope",
                    "integer_kernels_and_saturating_pairs",
                    "every int8 weight the u8×s8 kernels read where its pairs can overflow",
                ));
            }
        }
        settings
    }

    fn placement(self) -> Setting {
        match self {
            Target::Tensorrt => Setting::text(
                "placement",
                "tensorrt",
                "Q/DQ on the inputs of compute ops, none on outputs (ModelOpt's TensorRT rules)",
            ),
            _ => Setting::text(
                "placement",
                "ort",
                "ONNX Runtime's QDQ placement: ops with integer kernels and the ops that pass a scale on",
            ),
        }
    }

    /// The int4 weights' form: ONNX Runtime's MatMulNBits where its int4 kernels run (the form
    /// onnxruntime-genai loads), the opset-21 DQ form, which any runtime reads, elsewhere.
    fn int4_output(self) -> Setting {
        match self {
            Target::Cpu | Target::CpuAvx2 | Target::Directml | Target::Tensorrt => Setting::text(
                "int4_output",
                "matmulnbits",
                "ONNX Runtime's int4 kernels on CPU, DirectML and CUDA (onnxruntime-genai's form)",
            ),
            _ => Setting::text(
                "int4_output",
                "dq",
                "opset-21 block-wise DequantizeLinear, which any runtime reads",
            ),
        }
    }

    /// The saturation guard: on only where u8×s8 pairs can overflow (x86 without VNNI).
    fn guard(self) -> Setting {
        if self == Target::CpuAvx2 {
            Setting::flag(
                "saturation_guard",
                true,
                "AVX2 kernels add u8×s8 pairs in 16 bits and saturate: 7-bit weights where they can",
            )
            .required()
        } else {
            let why = match self {
                Target::Cpu => {
                    "VNNI, AMX and ARM kernels do not saturate: 8-bit weights (cpu-avx2 for x86 without VNNI)"
                }
                _ => "its integer kernels do not saturate: 8-bit weights",
            };
            Setting::flag("saturation_guard", false, why).required()
        }
    }

    /// Activation and weight types, symmetry, per-channel weights and the scale form.
    fn integer_settings(self) -> Vec<Setting> {
        match self {
            Target::Cpu | Target::CpuAvx2 | Target::Directml | Target::Openvino => {
                ort_integer_settings()
            }
            Target::Tensorrt => vec![
                Setting::text(
                    "activation_type",
                    "int8",
                    "TensorRT runs int8 with zero point 0 only",
                )
                .required(),
                Setting::flag(
                    "symmetric_activations",
                    true,
                    "TensorRT runs int8 with zero point 0 only",
                )
                .required(),
                Setting::text("weight_type", "int8", "TensorRT's int8 weights").required(),
                Setting::flag(
                    "symmetric_weights",
                    true,
                    "TensorRT runs int8 with zero point 0 only",
                )
                .required(),
                Setting::flag(
                    "per_channel",
                    true,
                    "one scale per output channel, TensorRT's default for weights",
                ),
            ],
            Target::Npu => npu_settings(),
            Target::Qnn => vec![
                Setting::text(
                    "activation_type",
                    "uint16",
                    "QNN HTP's A16W8: 16-bit activations keep what 8 bits lose",
                ),
                Setting::flag(
                    "symmetric_activations",
                    false,
                    "asymmetric activations, ONNX Runtime's QNN default",
                ),
                Setting::text(
                    "weight_type",
                    "uint8",
                    "8-bit weights, ONNX Runtime's QNN default (uint8)",
                ),
                Setting::flag(
                    "symmetric_weights",
                    false,
                    "unsigned weights are asymmetric in ONNX Runtime's QNN config",
                ),
                Setting::flag(
                    "per_channel",
                    false,
                    "per-tensor weights, ONNX Runtime's QNN default",
                ),
            ],
        }
    }
}

/// ONNX Runtime's `quantize_static` defaults, which its CPU, DirectML and OpenVINO providers
/// all fuse: uint8 asymmetric activations, int8 symmetric per-channel weights.
fn ort_integer_settings() -> Vec<Setting> {
    vec![
        Setting::text(
            "activation_type",
            "uint8",
            "uint8 activations, ONNX Runtime's default",
        ),
        Setting::flag(
            "symmetric_activations",
            false,
            "asymmetric activations use the whole uint8 range",
        ),
        Setting::text(
            "weight_type",
            "int8",
            "int8 weights, ONNX Runtime's default",
        ),
        Setting::flag(
            "symmetric_weights",
            true,
            "symmetric int8 weights (zero point 0)",
        ),
        Setting::flag(
            "per_channel",
            true,
            "one scale per output channel of each weight",
        ),
    ]
}

/// XINT8 (Vitis AI / Quark): symmetric int8 everywhere, power-of-two scales (the NPU
/// rescales by shifts), MinMSE ranges, per-tensor weights.
fn npu_settings() -> Vec<Setting> {
    let why_int8 = "the NPU runs symmetric int8 (XINT8)";
    let mut activations = Setting::new(
        "calibration_method",
        method("power_of_two_mse"),
        "pow2_mse",
        "power-of-two activation scales (the NPU rescales by shifts); least squared error, as XINT8's MinMSE",
    )
    .required();
    activations.also.push(method("power_of_two_non_overflow"));
    activations.shown = "pow2_mse (or pow2)";
    vec![
        Setting::text("activation_type", "int8", why_int8).required(),
        Setting::flag("symmetric_activations", true, why_int8).required(),
        Setting::text("weight_type", "int8", why_int8).required(),
        Setting::flag("symmetric_weights", true, why_int8).required(),
        Setting::flag("per_channel", false, "per-tensor weights, as XINT8"),
        activations,
        Setting::text(
            "weight_range",
            "pow2",
            "power-of-two weight scales (the NPU rescales by shifts)",
        )
        .required(),
    ]
}

/// Why a recipe and its target disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    /// The recipe key that contradicts the target.
    pub key: &'static str,
    /// One line: the target, what it needs and why, what the recipe says, and the choices.
    pub message: String,
}

impl Recipe {
    /// The default recipe for `target`: [`Recipe::default`]'s choices with the target's
    /// settings on, and the target named.
    pub fn for_target(target: Target) -> Recipe {
        let mut recipe = Recipe::default();
        recipe.set_target(target);
        recipe
    }

    /// Names `target` and applies every setting it makes for the recipe's mode (its defaults
    /// too: choosing a target resets what it decides).
    pub fn set_target(&mut self, target: Target) {
        self.target = Some(target);
        self.apply_target_settings();
    }

    /// Whether the saturation guard may be switched: without a target, or under the CPU
    /// targets, which the guard is what tells apart; every other target's kernels never
    /// saturate.
    pub fn guard_switchable(&self) -> bool {
        matches!(self.target, None | Some(Target::Cpu | Target::CpuAvx2))
    }

    /// Switches the saturation guard. Under the CPU targets the recipe moves between `cpu`
    /// (8-bit weights) and `cpu-avx2` (7-bit where pairs can saturate); otherwise the guard
    /// itself is set (on, with the current scope), which another target then refuses as a
    /// contradiction.
    pub fn set_saturation_guard(&mut self, on: bool) {
        if matches!(self.target, Some(Target::Cpu | Target::CpuAvx2)) {
            self.set_target(if on { Target::CpuAvx2 } else { Target::Cpu });
            return;
        }
        self.saturation_guard = on;
        if on {
            self.saturation_guard_scope = super::GuardScope::default();
        }
    }

    /// Follows a change of execution provider from `from` to `to`: a recipe whose target is
    /// `from`'s takes `to`'s (one whose target the user chose keeps it). True when it changed.
    pub fn follow_execution_provider(&mut self, from: &EpSpec, to: &EpSpec) -> bool {
        let (old, new) = (
            Target::for_execution_provider(from),
            Target::for_execution_provider(to),
        );
        if old == new || self.target != Some(old) {
            return false;
        }
        self.set_target(new);
        true
    }

    /// Applies every setting the recipe's target makes for its mode (none without a target).
    pub(super) fn apply_target_settings(&mut self) {
        let Some(target) = self.target else {
            return;
        };
        let Ok(toml::Value::Table(mut table)) = toml::Value::try_from(&*self) else {
            return;
        };
        for setting in target.settings(self.mode) {
            table.insert(setting.key.to_owned(), setting.value);
        }
        if let Ok(applied) = toml::Value::Table(table).try_into::<Recipe>() {
            *self = applied;
        }
    }

    /// The recipe's settings that its target requires otherwise, one line each.
    pub fn target_contradictions(&self) -> Vec<Contradiction> {
        let Some(target) = self.target else {
            return Vec::new();
        };
        let Ok(toml::Value::Table(table)) = toml::Value::try_from(self) else {
            return Vec::new();
        };
        target
            .settings(self.mode)
            .into_iter()
            .filter(|s| s.binding == Binding::Required)
            .filter_map(|s| {
                let actual = table.get(s.key);
                if actual.is_some_and(|v| s.accepts(v)) {
                    return None;
                }
                let said = actual.map_or_else(|| "its default".to_owned(), shown_value);
                Some(Contradiction {
                    key: s.key,
                    message: format!(
                        "target \"{}\" needs {} = {} ({}), not {said}: drop the setting, or choose another target ({})",
                        target.name(),
                        s.key,
                        s.shown,
                        s.why,
                        Target::choices()
                    ),
                })
            })
            .collect()
    }

    /// What the recipe's target set, one line a setting (`activation_type = int8: why`), for
    /// the faces to show; empty without a target.
    pub fn target_lines(&self) -> Vec<String> {
        let Some(target) = self.target else {
            return Vec::new();
        };
        target
            .settings(self.mode)
            .iter()
            .map(|s| {
                let held = match s.binding {
                    Binding::Required => ", required",
                    Binding::Default => "",
                };
                format!("{} = {} ({}{held})", s.key, s.shown, s.why)
            })
            .collect()
    }
}

/// A TOML value as a recipe line shows it (`"uint8"`, `false`, `{ method = "mse" }`).
fn shown_value(value: &toml::Value) -> String {
    match value {
        toml::Value::Table(t) => t
            .get("method")
            .and_then(toml::Value::as_str)
            .map_or_else(|| value.to_string(), str::to_owned),
        other => other.to_string(),
    }
}

/// Fills a recipe's TOML table that names a target with the target's default recipe
/// ([`Recipe::for_target`], for the table's mode) wherever the table is silent, so that a
/// hand-written recipe of `target = "npu"` and nothing else is whole. Tables without a
/// target (recipes written before targets existed) are left as they are, so they reproduce
/// their model byte for byte. An unknown target is left for the parser to refuse.
pub(super) fn fill_from_target(table: &mut toml::Table) {
    let Some(target) = table
        .get("target")
        .and_then(toml::Value::as_str)
        .and_then(Target::parse)
    else {
        return;
    };
    let mode = table
        .get("mode")
        .cloned()
        .and_then(|m| m.try_into::<QuantMode>().ok())
        .unwrap_or(QuantMode::Int8);
    let mut base = Recipe::for_target(target);
    base.set_mode(mode);
    let Ok(toml::Value::Table(defaults)) = toml::Value::try_from(&base) else {
        return;
    };
    for (key, value) in defaults {
        table.entry(key).or_insert(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{Placement, QuantType, WeightRange};

    #[test]
    fn every_target_parses_by_its_name_and_the_eps_spellings() {
        for t in Target::ALL {
            assert_eq!(Target::parse(t.name()), Some(t));
            assert_eq!(
                Target::parse(&t.name().to_uppercase().replace('-', "_")),
                Some(t)
            );
        }
        assert_eq!(Target::parse("trt"), Some(Target::Tensorrt));
        assert_eq!(Target::parse("gpu"), None);
    }

    #[test]
    fn the_calibration_provider_picks_the_default_target() {
        let of = |ep: &str| Target::for_execution_provider(&EpSpec::parse(ep).unwrap());
        assert_eq!(of("cpu"), Target::Cpu);
        assert_eq!(of("cuda:1"), Target::Tensorrt);
        assert_eq!(of("trt"), Target::Tensorrt);
        assert_eq!(of("dml"), Target::Directml);
        assert_eq!(of("openvino:GPU"), Target::Openvino);
        // Tuning for speed runs on the target's own provider, which no NPU has here.
        assert_eq!(Target::Tensorrt.tuning_ep(), Some(EpSpec::TensorRt(0)));
        assert_eq!(Target::Npu.tuning_ep(), None);
        assert_eq!(Target::Qnn.tuning_ep(), None);
    }

    #[test]
    fn each_target_sets_its_runtimes_types_and_guard() {
        let cpu = Recipe::for_target(Target::Cpu);
        assert_eq!(cpu.target, Some(Target::Cpu));
        assert!(!cpu.saturation_guard);
        assert_eq!(
            (cpu.activation_type, cpu.weight_type),
            (QuantType::Uint8, QuantType::Int8)
        );
        assert!(Recipe::for_target(Target::CpuAvx2).saturation_guard);
        let trt = Recipe::for_target(Target::Tensorrt);
        assert_eq!(trt.placement, Placement::Tensorrt);
        assert!(trt.symmetric_activations && trt.activation_type == QuantType::Int8);
        let npu = Recipe::for_target(Target::Npu);
        assert_eq!(npu.weight_range, WeightRange::Pow2);
        assert!(!npu.per_channel && npu.symmetric_activations);
        assert_eq!(npu.calibration_method.name(), "pow2_mse");
        let qnn = Recipe::for_target(Target::Qnn);
        assert_eq!(qnn.activation_type, QuantType::Uint16);
        for t in Target::ALL {
            let recipe = Recipe::for_target(t);
            assert!(recipe.target_contradictions().is_empty(), "{t:?}");
            assert!(!recipe.target_lines().is_empty());
            // The recipe round-trips with its target.
            let text = recipe.to_toml();
            assert!(
                text.contains(&format!("target = \"{}\"", t.name())),
                "{text}"
            );
            assert_eq!(Recipe::from_toml(&text, "r.toml").unwrap(), recipe);
        }
    }

    #[test]
    fn the_guard_switch_moves_between_the_cpu_targets_and_the_target_follows_its_provider() {
        let mut recipe = Recipe::for_target(Target::Cpu);
        assert!(recipe.guard_switchable());
        recipe.set_saturation_guard(true);
        assert_eq!(recipe, Recipe::for_target(Target::CpuAvx2));
        recipe.set_saturation_guard(false);
        assert_eq!(recipe, Recipe::for_target(Target::Cpu));
        // Without a target the guard is the recipe's own; under TensorRT it contradicts.
        let mut legacy = Recipe {
            saturation_guard: false,
            ..Recipe::default()
        };
        legacy.set_saturation_guard(true);
        assert!(legacy.saturation_guard && legacy.guard_switchable());
        let mut trt = Recipe::for_target(Target::Tensorrt);
        assert!(!trt.guard_switchable());
        trt.set_saturation_guard(true);
        assert_eq!(trt.target_contradictions()[0].key, "saturation_guard");
        // Following the provider: only a target that was the old provider's moves.
        let (cpu, ov) = (EpSpec::Cpu, EpSpec::OpenVino("CPU".to_owned()));
        let mut followed = Recipe::for_target(Target::Cpu);
        assert!(followed.follow_execution_provider(&cpu, &ov));
        assert_eq!(followed, Recipe::for_target(Target::Openvino));
        let mut chosen = Recipe::for_target(Target::Npu);
        assert!(!chosen.follow_execution_provider(&cpu, &ov));
        assert_eq!(chosen.target, Some(Target::Npu));
        assert_eq!(Target::for_execution_providers(&[]), Target::Cpu);
        assert_eq!(
            Target::for_execution_providers(&[ov, cpu]),
            Target::Openvino
        );
    }

    #[test]
    fn a_required_setting_said_otherwise_is_one_line_with_the_choices() {
        let mut trt = Recipe::for_target(Target::Tensorrt);
        trt.activation_type = QuantType::Uint8;
        let found = trt.target_contradictions();
        assert_eq!(found.len(), 1, "{found:?}");
        let message = &found[0].message;
        assert!(message.contains("activation_type = int8"), "{message}");
        assert!(message.contains("not \"uint8\""), "{message}");
        assert!(message.contains(&Target::choices()), "{message}");
        // A default setting may be changed.
        let mut cpu = Recipe::for_target(Target::Cpu);
        cpu.per_channel = false;
        assert!(cpu.target_contradictions().is_empty());
        cpu.saturation_guard = true;
        assert_eq!(cpu.target_contradictions()[0].key, "saturation_guard");
        // pow2 is accepted beside pow2_mse on the NPU; minmax is not.
        let mut npu = Recipe::for_target(Target::Npu);
        npu.calibration_method = crate::calib::range::RangeMethod::PowerOfTwoNonOverflow;
        assert!(npu.target_contradictions().is_empty());
        npu.calibration_method = crate::calib::range::RangeMethod::Mse;
        let found = npu.target_contradictions();
        assert!(found[0].message.contains("not mse"), "{found:?}");
        npu.weight_range = WeightRange::Minmax;
        assert_eq!(npu.target_contradictions().len(), 2);
    }

    #[test]
    fn a_recipe_naming_only_its_target_is_whole_and_fixed_types_follow_the_mode() {
        let recipe = Recipe::from_toml("version = 1\ntarget = \"npu\"\n", "r.toml").unwrap();
        assert_eq!(recipe, Recipe::for_target(Target::Npu));
        let int4 = Recipe::from_toml("target = \"tensorrt\"\nmode = \"int4\"\n", "r.toml").unwrap();
        assert_eq!(int4.weight_type, QuantType::Int4);
        assert!(int4.target_contradictions().is_empty());
        // The int4 form follows the target: MatMulNBits where ONNX Runtime's int4 kernels
        // run, the DQ form elsewhere; int8 never keeps MatMulNBits.
        assert_eq!(int4.int4_output, crate::recipe::Int4Output::Matmulnbits);
        for (target, form) in [
            (Target::Cpu, crate::recipe::Int4Output::Matmulnbits),
            (Target::Directml, crate::recipe::Int4Output::Matmulnbits),
            (Target::Openvino, crate::recipe::Int4Output::Dq),
            (Target::Qnn, crate::recipe::Int4Output::Dq),
        ] {
            let mut recipe = Recipe::for_target(target);
            recipe.set_mode(QuantMode::Int4);
            assert_eq!(recipe.int4_output, form, "{target:?}");
            recipe.set_mode(QuantMode::Int8);
            assert_eq!(recipe.int4_output, crate::recipe::Int4Output::Dq);
        }
        let wrong = "target = \"tensorrt\"\nactivation_type = \"uint8\"\n";
        let err = Recipe::from_toml(wrong, "r.toml").unwrap_err().to_string();
        assert!(
            err.contains("r.toml line 2") && err.contains("tensorrt"),
            "{err}"
        );
        let unknown = Recipe::from_toml("target = \"tpu\"\n", "r.toml").unwrap_err();
        assert!(unknown.to_string().contains("tpu"), "{unknown}");
    }
}
