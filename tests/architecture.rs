//! The engine's layers import only the layers below them, and never the faces: read from the
//! sources, so an upward import (an import loop in the making) fails here.

use std::path::{Path, PathBuf};

/// The engine's modules, lowest first; each may import only modules earlier in the list.
const LAYERS: &[&str] = &[
    "util", "jobs", "atomic", "model", "sample", "runtime", "calib", "recipe", "quant", "eval",
    "report", "workflow",
];

fn sources(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        files.extend(sources(&entry.unwrap().path()));
    }
    files
}

/// The `crate::X` modules the sources of `module` name.
fn imports(module: &str) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join(module);
    let root = if dir.is_dir() {
        dir
    } else {
        src.join(format!("{module}.rs"))
    };
    let mut found = Vec::new();
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("crate::") {
            let name: String = text[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module && !found.contains(&name) {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn engine_layers_import_only_the_layers_below_them() {
    let mut upward = Vec::new();
    for (level, module) in LAYERS.iter().enumerate() {
        let imported = imports(module);
        assert!(
            level == 0 || !imported.is_empty() || *module == "jobs",
            "{module}: no sources read"
        );
        for name in imported {
            let allowed = LAYERS[..level].contains(&name.as_str());
            if !allowed {
                upward.push(format!("{module} imports {name}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering: {upward:?}"
    );
}

/// The rooms of `eval`, lowest first; each may import only rooms earlier in the list.
const EVAL_ROOMS: &[&str] = &["simd", "compare", "tensor_error", "search"];

#[test]
fn eval_rooms_import_only_the_rooms_above_them() {
    let mut upward = Vec::new();
    for (level, room) in EVAL_ROOMS.iter().enumerate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/eval")
            .join(room);
        assert!(dir.is_dir(), "src/eval/{room} is missing");
        for file in sources(&dir) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = code_of(&text);
            for (at, _) in code.match_indices("crate::eval::") {
                let name: String = code[at + 13..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if name != *room && !EVAL_ROOMS[..level].contains(&name.as_str()) {
                    upward.push(format!("{} imports eval::{name}", file.display()));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against eval's rooms: {upward:?}"
    );
}

/// `text` up to its test module, without comments: what the file itself imports.
fn code_of(text: &str) -> String {
    let code = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |end| &text[..end]);
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_file_in_src_is_part_of_an_import_cycle() {
    let graph = ImportGraph::read();
    let cycles = graph.cycles();
    assert!(
        graph.files.len() > 100,
        "only {} files read",
        graph.files.len()
    );
    assert!(
        cycles.is_empty(),
        "{} import cycles among the files of src/ (a file may use the folders it is in; \
         any other loop is one): {cycles:#?}",
        cycles.len()
    );
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut graph = ImportGraph::default();
    for (file, imports) in [("a.rs", "b.rs"), ("b.rs", "c.rs"), ("c.rs", "a.rs")] {
        graph.files.push(file.to_owned());
        graph.edges.push((file.to_owned(), imports.to_owned()));
    }
    graph.files.push("d.rs".to_owned());
    graph.edges.push(("d.rs".to_owned(), "a.rs".to_owned()));
    assert_eq!(graph.cycles(), vec![vec!["a.rs", "b.rs", "c.rs"]]);
}

/// Which file of `src/` imports which, by the paths its code names (`use` trees and inline
/// `crate::`/`super::` paths, each resolved to the deepest module file it reaches). A file's
/// use of a folder it sits in (its ancestors' `mod.rs`) is left out: a module sees its parent
/// by Rust's own scoping, so every parent and child would otherwise be a loop.
#[derive(Default)]
struct ImportGraph {
    files: Vec<String>,
    edges: Vec<(String, String)>,
}

impl ImportGraph {
    fn read() -> Self {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut graph = ImportGraph::default();
        let files: Vec<String> = sources(&src)
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rs"))
            .map(|f| {
                f.strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/")
            })
            .collect();
        for file in &files {
            let text = std::fs::read_to_string(src.join(file)).unwrap();
            let module = module_of(file);
            for path in named_paths(&code_of(&text), &module) {
                let Some(target) = resolve(&files, &path) else {
                    continue;
                };
                let ancestor = (0..module.len())
                    .any(|k| file_of(&files, &module[..k]) == Some(target.clone()));
                if target != *file
                    && !ancestor
                    && !graph.edges.contains(&(file.clone(), target.clone()))
                {
                    graph.edges.push((file.clone(), target));
                }
            }
        }
        graph.files = files;
        graph
    }

    /// Every set of files that import each other in a loop (strongly connected, more than
    /// one file), each sorted, found by Tarjan's algorithm.
    fn cycles(&self) -> Vec<Vec<String>> {
        let index_of = |f: &str| self.files.iter().position(|x| x == f);
        let next: Vec<Vec<usize>> = (0..self.files.len())
            .map(|i| {
                self.edges
                    .iter()
                    .filter(|(from, _)| *from == self.files[i])
                    .filter_map(|(_, to)| index_of(to))
                    .collect()
            })
            .collect();
        let mut tarjan = Tarjan {
            next: &next,
            index: vec![None; next.len()],
            low: vec![0; next.len()],
            stack: Vec::new(),
            on_stack: vec![false; next.len()],
            counter: 0,
            found: Vec::new(),
        };
        for v in 0..next.len() {
            if tarjan.index[v].is_none() {
                tarjan.visit(v);
            }
        }
        let mut cycles: Vec<Vec<String>> = tarjan
            .found
            .into_iter()
            .map(|c| {
                let mut names: Vec<String> = c.into_iter().map(|i| self.files[i].clone()).collect();
                names.sort();
                names
            })
            .collect();
        cycles.sort();
        cycles
    }
}

struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    stack: Vec<usize>,
    on_stack: Vec<bool>,
    counter: usize,
    found: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.counter);
        self.low[v] = self.counter;
        self.counter += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.next[v] {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                self.found.push(component);
            }
        }
    }
}

/// The module path of a file under `src/`: `eval/compare/mod.rs` is `[eval, compare]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file that holds module `module`, if one does.
fn file_of(files: &[String], module: &[String]) -> Option<String> {
    if module.is_empty() {
        return Some("lib.rs".to_owned());
    }
    let base = module.join("/");
    [format!("{base}.rs"), format!("{base}/mod.rs")]
        .into_iter()
        .find(|f| files.contains(f))
}

/// The deepest module file along `path` (a path's tail names items inside it).
fn resolve(files: &[String], path: &[String]) -> Option<String> {
    (0..=path.len())
        .rev()
        .find_map(|k| file_of(files, &path[..k]))
}

/// Every module path `code` (the file of `module`) names, made absolute: `use` trees
/// expanded, inline `crate::`/`super::` paths, and paths through its child modules.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let children: Vec<&str> = code
        .lines()
        .filter_map(|l| {
            let l = l
                .trim()
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            l.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    let mut paths = Vec::new();
    for tree in use_trees(code) {
        paths.extend(expand(&tree));
    }
    let mut rest = code;
    while let Some(at) = rest.find(['c', 's']) {
        let tail = &rest[at..];
        let boundary = at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if boundary && (tail.starts_with("crate::") || tail.starts_with("super::")) {
            let path: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            rest = &tail[path.len()..];
            paths.push(path);
        } else {
            rest = &tail[1..];
        }
    }
    paths
        .iter()
        .filter_map(|p| absolute(p, module, &children))
        .collect()
}

/// The trees of every `use` declaration in `code` (one that opens a line).
fn use_trees(code: &str) -> Vec<String> {
    let mut trees = Vec::new();
    for (at, _) in code.match_indices("use ") {
        let line = code[..at].rsplit('\n').next().unwrap_or("").trim();
        if !matches!(line, "" | "pub" | "pub(crate)" | "pub(super)") {
            continue;
        }
        if let Some(end) = code[at..].find(';') {
            trees.push(
                code[at + 4..at + end]
                    .split_whitespace()
                    .collect::<String>(),
            );
        }
    }
    trees
}

/// A `use` tree's paths: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.split("as").next().unwrap_or(tree).to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
    let inner = &tree[open + 1..close];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(expand)
        .map(|p| {
            if prefix.is_empty() {
                p
            } else {
                format!("{prefix}::{p}")
            }
        })
        .collect()
}

/// `path` as a module path from the crate's root, or `None` for another crate's.
fn absolute(path: &str, module: &[String], children: &[&str]) -> Option<Vec<String>> {
    let segments: Vec<&str> = path
        .split("::")
        .filter(|s| !s.is_empty() && *s != "self")
        .collect();
    let first = *segments.first()?;
    let mut base: Vec<String> = match first {
        "crate" => Vec::new(),
        "super" => module.to_vec(),
        child if children.contains(&child) => module.to_vec(),
        _ => return None,
    };
    let mut rest = &segments[..];
    if first == "crate" {
        rest = &rest[1..];
    }
    while rest.first() == Some(&"super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().map(|s| s.to_string()));
    Some(base)
}

/// ONNX op types a matching might name, beside every name of the op table.
const MORE_OP_TYPES: &str = "Abs Acos Acosh And ArgMax ArgMin Asin Atan AveragePool \
    BatchNormalization BitShift Cast Ceil Celu Clip Compress Concat Constant ConstantOfShape \
    Conv ConvInteger ConvTranspose Cos CumSum DepthToSpace DequantizeLinear Det Div Dropout \
    Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor GRU Gather GatherElements GatherND \
    Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GridSample \
    GroupNormalization HardSigmoid HardSwish Hardmax Identity If InstanceNormalization IsInf \
    IsNaN LRN LSTM LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax Loop \
    LpNormalization MatMul MatMulInteger Max MaxPool Mean Min Mish Mod Mul Neg \
    NonMaxSuppression NonZero Not OneHot Or PRelu Pad Pow QLinearConv QLinearMatMul \
    QuantizeLinear RNN Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceMax ReduceMean \
    ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize Round ScatterElements \
    ScatterND Selu Shape Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign \
    SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh Tile TopK Transpose Trilu Unsqueeze \
    Upsample Where Xor Scan ReduceLogSumExp";

/// The op type names the scan looks for: the op table's and [`MORE_OP_TYPES`].
fn op_type_names() -> Vec<String> {
    let names = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model/ops/names.rs");
    let text = std::fs::read_to_string(names).unwrap();
    let mut found: Vec<String> = text
        .lines()
        .filter_map(|l| {
            l.split("= \"")
                .nth(1)?
                .strip_suffix("\";")
                .map(String::from)
        })
        .collect();
    assert!(found.len() > 50, "the op table's names were not read");
    found.extend(MORE_OP_TYPES.split_whitespace().map(String::from));
    found
}

/// The quoted words of `code` that name op types.
fn op_literals<'a>(code: &'a str, names: &[String]) -> Vec<&'a str> {
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|word| names.iter().any(|n| n == word))
        .collect()
}

/// The lines of `code` where an op type is matched by its name: compared (`==`, `!=`), a
/// pattern (`"Conv" =>`, `"A" | "B"`, `matches!`) or an entry of a constant list. Building a
/// node names its op, and is no match.
fn op_name_matches(code: &str, names: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_list = false;
    for line in code.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        if op_literals(code, names).is_empty() {
            in_list = in_list && !code.starts_with(']');
            if code.starts_with("const ") || code.starts_with("pub const ") {
                in_list = code.ends_with('[');
            }
            continue;
        }
        let constant = ["const ", "pub const ", "pub(crate) const ", "static "]
            .iter()
            .any(|p| code.starts_with(p));
        let compared = code.contains("==") || code.contains("!=");
        let pattern = code.split("=>").count() > 1
            && !op_literals(code.split("=>").next().unwrap_or(""), names).is_empty();
        let alternative =
            code.starts_with('|') || code.contains("\" |") || code.contains("matches!(");
        if in_list || constant || compared || pattern || alternative {
            found.push(code.to_owned());
        }
        if constant {
            in_list = code.ends_with('[');
        }
    }
    found
}

#[test]
fn op_types_are_matched_through_the_op_table_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let names = op_type_names();
    let mut matched = Vec::new();
    for file in sources(&src) {
        if file.starts_with(src.join("model/ops")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text
            .find("#[cfg(test)]\nmod tests")
            .map_or(text.as_str(), |end| &text[..end]);
        for line in op_name_matches(code, &names) {
            matched.push(format!("{}: {line}", file.display()));
        }
    }
    assert!(
        matched.is_empty(),
        "op types matched by name outside src/model/ops (name them with model::ops' \
         constants, or look their facts up in its table): {matched:#?}"
    );
}

#[test]
fn the_op_name_scan_finds_matches_and_passes_builders() {
    let names = op_type_names();
    let code = "if node.op_type == \"Conv\" {}\n\
        \"Gemm\" if trans_b => 1,\n\
        const LIST: &[&str] = &[\n    \"Relu\",\n];\n\
        matches!(op, \"Add\" | \"Sub\")\n\
        b.node(\"MatMul\", &[\"x\", \"w\"], &[\"y\"]);\n\
        let label = \"Conv\";";
    let found = op_name_matches(code, &names);
    assert_eq!(found.len(), 4, "{found:#?}");
}
