//! The studio's responsiveness, measured in a headless harness (egui_kittest) on the real
//! `Studio`: open-to-first-frame of the PP-OCR det model, frame times while a 5,000-node model
//! is laid out in its job, frame times while panning it (UI pass plus tessellation: what the
//! CPU does per frame before the GPU), and the same for a 50,000-node model.
//!
//! The quantization loop too: frame times while calibration runs in its job (the bundled
//! sample and PP-OCR det on CPU), and the time from "quantize & compare" to the first frame
//! showing the updated heat map.
//!
//! Run on demand: `cargo bench --bench studio` (release build). The PP-OCR det model is taken
//! from the test cache (`cargo test` fetches it); without it that line is skipped.
//!
//! `cargo bench --bench studio -- --large FOLDER` instead takes the studio through a large
//! model (`FOLDER/model.onnx` with its external data, calibration data `FOLDER/calib.npz`):
//! open, calibrate, quantize & compare, printing each step's time and peak RSS against the
//! bound the CLI meets (1.2 × weight bytes + 1 GiB). `benches/large_model` runs it.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use egui::{Event, Modifiers, PointerButton, Pos2};
use egui_kittest::Harness;
use qdq_studio::app::command::Command;
use qdq_studio::app::command::{RecipeCommand, ViewCommand, WorkCommand};
use qdq_studio::app::{Settings, Source, Studio, StudioOptions};

#[path = "../common/mod.rs"]
mod common;

fn harness() -> Harness<'static, Studio> {
    let studio = Studio::new(
        StudioOptions {
            native_dialogs: false,
            probe_runtime: false,
        },
        Settings::default(),
    );
    Harness::builder()
        .with_size(egui::vec2(1440.0, 900.0))
        .build_ui_state(|ui, studio: &mut Studio| studio.ui(ui), studio)
}

/// One frame: the UI pass and the tessellation of what it painted.
fn frame(h: &mut Harness<'_, Studio>) -> Duration {
    let started = Instant::now();
    h.step();
    let output = h.output().clone();
    let ctx = h.ctx.clone();
    let _ = ctx.tessellate(output.shapes, output.pixels_per_point);
    started.elapsed()
}

/// Opens `source`, stepping frames while the job runs; returns (time to first frame with the
/// model, the slowest frame while the job ran).
fn open(h: &mut Harness<'_, Studio>, source: Source) -> (Duration, Duration) {
    h.state_mut().open(source);
    let mut slowest = Duration::ZERO;
    while h.state().is_busy() {
        slowest = slowest.max(frame(h));
        std::thread::sleep(Duration::from_millis(2));
    }
    frame(h);
    let first = h.state().metrics().open_to_first_frame.unwrap_or_default();
    (first, slowest)
}

struct Stats {
    median: f64,
    p95: f64,
    max: f64,
}

fn stats(mut times: Vec<Duration>) -> Stats {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Stats {
        median: ms(times[times.len() / 2]),
        p95: ms(times[times.len() * 95 / 100]),
        max: ms(*times.last().unwrap_or(&Duration::ZERO)),
    }
}

/// Drags the graph across the view for `frames` frames.
fn pan(h: &mut Harness<'_, Studio>, frames: usize) -> Stats {
    let start = Pos2::new(700.0, 450.0);
    h.event(Event::PointerMoved(start));
    h.event(Event::PointerButton {
        pos: start,
        button: PointerButton::Primary,
        pressed: true,
        modifiers: Modifiers::NONE,
    });
    frame(h);
    let mut times = Vec::with_capacity(frames);
    for i in 0..frames {
        let t = i as f32 / frames as f32 * std::f32::consts::TAU;
        let pos = start + egui::vec2(200.0 * t.cos(), 150.0 * t.sin());
        h.event(Event::PointerMoved(pos));
        times.push(frame(h));
    }
    h.event(Event::PointerButton {
        pos: start,
        button: PointerButton::Primary,
        pressed: false,
        modifiers: Modifiers::NONE,
    });
    frame(h);
    stats(times)
}

fn report(label: &str, s: &Stats) {
    println!(
        "{label}: frame median {:.2} ms, p95 {:.2} ms, max {:.2} ms",
        s.median, s.p95, s.max
    );
}

/// The det model where the tests keep it.
fn det_model() -> Option<PathBuf> {
    let path = qdq_studio::runtime::default_cache_dir()
        .ok()?
        .join("test-models")
        .join("rapidocr-1.4.4")
        .join("ch_PP-OCRv4_det_infer.onnx");
    path.exists().then_some(path)
}

/// Runs `command`'s task, stepping frames (every 5 ms, as a window polls) until it is done;
/// the frame times meanwhile and the task's duration.
fn run_task(h: &mut Harness<'_, Studio>, command: Command) -> (Stats, Duration) {
    let started = Instant::now();
    h.state_mut().push(command);
    frame(h);
    let mut times = Vec::new();
    let mut last_stage = String::new();
    let trace = std::env::var_os("QDQ_STUDIO_BENCH_TRACE").is_some();
    while h.state().document().is_some_and(|d| d.work.busy()) {
        times.push(frame(h));
        if trace {
            let stage = h
                .state()
                .document()
                .and_then(|d| {
                    d.work
                        .task
                        .running()?
                        .progress
                        .as_ref()
                        .map(|p| p.stage.clone())
                })
                .unwrap_or_default();
            if stage != last_stage {
                println!(
                    "  {:7.1} s  {stage}  (RSS now {:.2} GiB, peak {:.2} GiB)",
                    started.elapsed().as_secs_f64(),
                    rss_now() as f64 / f64::from(1u32 << 30),
                    peak_rss() as f64 / f64::from(1u32 << 30)
                );
                last_stage = stage;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = started.elapsed();
    frame(h);
    assert!(
        h.state().notices().is_empty(),
        "the task failed: {:?}",
        h.state().notices()
    );
    if times.is_empty() {
        times.push(Duration::ZERO);
    }
    (stats(times), took)
}

/// The stage timings of the last quantize & compare.
fn compare_timings(h: &Harness<'_, Studio>) -> qdq_studio::workflow::compare::CompareTimings {
    h.state()
        .document()
        .and_then(|d| d.work.results.comparison.as_ref().map(|c| c.timings))
        .unwrap_or_default()
}

/// Calibrates the open model on the CPU, then quantizes and compares, reporting frame times
/// during calibration and the time to the updated heat map.
fn quantization_loop(h: &mut Harness<'_, Studio>, label: &str) {
    let (frames, took) = run_task(h, Command::Work(WorkCommand::Calibrate));
    let samples = h
        .state()
        .document()
        .and_then(|d| d.work.results.stats.as_ref().map(|s| s.info.samples))
        .unwrap_or(0);
    println!(
        "{label}: calibration of {samples} samples took {:.1} s; UI frames meanwhile ({} frames): median {:.2} ms, p95 {:.2} ms, max {:.2} ms",
        took.as_secs_f64(),
        (took.as_secs_f64() / 0.005) as usize,
        frames.median,
        frames.p95,
        frames.max
    );
    let (_, took) = run_task(h, Command::Work(WorkCommand::QuantizeCompare));
    frame(h);
    let heat = h.state().metrics().compare_to_heat_map.unwrap_or_default();
    let timings = compare_timings(h);
    println!(
        "{label}: quantize & compare to updated heat map {:.0} ms (task {:.0} ms: quantize {:.0}, float reference {:.0}, outputs {:.0}, tensors {:.0}, latency {:.0})",
        heat.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e3,
        timings.quantize_ms,
        timings.reference_ms,
        timings.outputs_ms,
        timings.tensors_ms,
        timings.latency_ms
    );
    // Again after a change of exclusions: the float reference is reused.
    h.state_mut()
        .push(Command::Recipe(RecipeCommand::SetOpType {
            op_type: "Add".to_owned(),
            quantize: false,
        }));
    frame(h);
    run_task(h, Command::Work(WorkCommand::QuantizeCompare));
    frame(h);
    let heat = h.state().metrics().compare_to_heat_map.unwrap_or_default();
    println!(
        "{label}: re-run after excluding Add: to updated heat map {:.0} ms",
        heat.as_secs_f64() * 1e3
    );
}

/// Frames that each carry one recipe change (an op type unchecked, then checked again): the
/// quantizer's plan is explained again and every box restyled.
fn recipe_changes(h: &mut Harness<'_, Studio>, frames: usize) -> Stats {
    let op_type = h
        .state()
        .document()
        .and_then(|d| d.planned.plan.op_types.keys().next().cloned())
        .unwrap_or_default();
    let times = (0..frames)
        .map(|i| {
            h.state_mut()
                .push(Command::Recipe(RecipeCommand::SetOpType {
                    op_type: op_type.clone(),
                    quantize: i % 2 == 1,
                }));
            frame(h)
        })
        .collect();
    stats(times)
}

/// A `/proc/self/status` line's value in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// This process's peak resident memory so far, in bytes.
fn peak_rss() -> u64 {
    status_bytes("VmHWM")
}

/// This process's resident memory now, in bytes.
fn rss_now() -> u64 {
    status_bytes("VmRSS")
}

/// Starts a new peak-RSS measurement (Linux: writing 5 to `clear_refs` resets `VmHWM`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Opens, calibrates and quantizes & compares the large model in `folder`, printing each
/// step's time and peak RSS; exits non-zero when a step passes the memory bound.
fn large_model(folder: &std::path::Path) {
    let model = folder.join("model.onnx");
    let weights: u64 = std::fs::read_dir(folder)
        .expect("the model's folder")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("model.onnx_data")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    let limit = 1.2 * weights as f64 + f64::from(1u32 << 30);
    let gib = |b: f64| b / f64::from(1u32 << 30);
    let mut h = harness();
    let mut missed = 0;
    let mut step = |name: &str, took: Duration| {
        let peak = peak_rss() as f64;
        let met = peak <= limit;
        missed += usize::from(!met);
        println!(
            "studio {name}: {:.1} s, peak RSS {:.2} GiB (target <= {:.2} GiB: {})",
            took.as_secs_f64(),
            gib(peak),
            gib(limit),
            if met { "met" } else { "MISSED" }
        );
        reset_peak_rss();
    };
    reset_peak_rss();
    let started = Instant::now();
    open(&mut h, Source::File(model));
    step("open", started.elapsed());
    if let Some(doc) = h.state_mut().document_mut() {
        doc.work.settings.calibration =
            qdq_studio::app::work::data::DataChoice::file(folder.join("calib.npz"));
        doc.work.settings.batch_size = 1;
    }
    let (_, took) = run_task(&mut h, Command::Work(WorkCommand::Calibrate));
    step("calibrate", took);
    let (_, took) = run_task(&mut h, Command::Work(WorkCommand::QuantizeCompare));
    step("quantize & compare", took);
    let timings = compare_timings(&h);
    println!(
        "studio quantize & compare stages: quantize {:.1} s, float reference {:.1} s, outputs {:.1} s, tensors {:.1} s",
        timings.quantize_ms / 1e3,
        timings.reference_ms / 1e3,
        timings.outputs_ms / 1e3,
        timings.tensors_ms / 1e3
    );
    let out = tempfile::tempdir().expect("a temporary folder");
    let saved = out.path().join("model.int8.onnx");
    h.state_mut()
        .push(Command::Work(WorkCommand::SaveQuantizedDialog));
    frame(&mut h);
    if let Some(dialog) = h
        .state_mut()
        .document_mut()
        .and_then(|d| d.view.panel.save_dialog.as_mut())
    {
        dialog.path = saved.display().to_string();
        dialog.external_data = true;
    }
    let (_, took) = run_task(&mut h, Command::Work(WorkCommand::SaveQuantized));
    assert!(saved.exists(), "the studio saved nothing");
    step("save", took);
    // Another recipe: the float reference, activations and latency are reused.
    h.state_mut()
        .push(Command::Recipe(RecipeCommand::SetOpType {
            op_type: "Add".to_owned(),
            quantize: false,
        }));
    frame(&mut h);
    let (_, took) = run_task(&mut h, Command::Work(WorkCommand::QuantizeCompare));
    step("quantize & compare again, Add excluded", took);
    if missed > 0 {
        std::process::exit(1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--large") {
        let folder = args.get(i + 1).expect("--large FOLDER");
        large_model(std::path::Path::new(folder));
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    {
        let mut h = harness();
        open(&mut h, Source::Sample);
        quantization_loop(
            &mut h,
            "sample (PP-OCR cls, 32 calibration / 16 evaluation samples)",
        );
    }
    if let Some(path) = det_model() {
        let mut h = harness();
        open(&mut h, Source::File(path));
        if let Some(doc) = h.state_mut().document_mut() {
            doc.work.settings.calibration.shapes = "x:1x3x640x640".to_owned();
            doc.work.settings.calibration.random_samples = 16;
            doc.work.settings.measure_latency = true;
        }
        quantization_loop(&mut h, "PP-OCR det (16 random 640×640 samples)");
    }
    match det_model() {
        Some(path) => {
            let mut h = harness();
            let (first, slowest) = open(&mut h, Source::File(path));
            let doc = h.state().document().expect("det opened");
            println!(
                "PP-OCR det ({} nodes, {} drawn): open to first frame {:.0} ms (read {:.0} ms, index {:.0} ms, layout {:.0} ms); slowest frame during the job {:.1} ms",
                doc.opened.graph.nodes().len(),
                doc.view.canvas.node_count(),
                first.as_secs_f64() * 1e3,
                doc.opened.timings.read.as_secs_f64() * 1e3,
                doc.opened.timings.index.as_secs_f64() * 1e3,
                doc.opened.timings.layout.as_secs_f64() * 1e3,
                slowest.as_secs_f64() * 1e3
            );
            report("PP-OCR det, panning", &pan(&mut h, 120));
        }
        None => println!("PP-OCR det: not in the cache (run `cargo test` once), skipped"),
    }
    for nodes in [5_000, 50_000] {
        let path = dir.path().join(format!("synthetic_{nodes}.onnx"));
        let bytes = common::synthetic(nodes).to_bytes().expect("encodes");
        std::fs::write(&path, bytes).expect("written");
        let mut h = harness();
        let (first, slowest) = open(&mut h, Source::File(path));
        let doc = h.state().document().expect("opened");
        println!(
            "synthetic {} nodes: open to first frame {:.0} ms (layout {:.0} ms{}), slowest frame while the job ran {:.1} ms",
            doc.view.canvas.node_count(),
            first.as_secs_f64() * 1e3,
            doc.opened.timings.layout.as_secs_f64() * 1e3,
            if doc.opened.layout.simplified {
                ", simplified"
            } else {
                ""
            },
            slowest.as_secs_f64() * 1e3
        );
        report(
            &format!("synthetic {nodes}, panning at the opening zoom"),
            &pan(&mut h, 120),
        );
        report(
            &format!("synthetic {nodes}, a recipe change (re-plan, restyle) per frame"),
            &recipe_changes(&mut h, 20),
        );
        h.state_mut().apply(Command::View(ViewCommand::Fit));
        frame(&mut h);
        let zoom = h.state().document().map_or(0.0, |d| d.view.canvas.zoom());
        report(
            &format!("synthetic {nodes}, panning with the whole graph in view (zoom {zoom:.3})"),
            &pan(&mut h, 120),
        );
    }
}
