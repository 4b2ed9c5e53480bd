//! The layers inside the service, checked on the source tree: a module may use the layers
//! below it, never one above. (Between the crates the crate graph enforces it: the domain
//! cannot name the store, the store cannot name the service.)
//!
//! ```text
//! cli ──► http ──► ops ──► views, webhooks, providers, media ──► url_safety ──► store, domain
//! ```
//!
//! * `src/ops` must not use `crate::http` or `crate::cli`;
//! * `src/providers` must not use `crate::http`, `crate::ops`, `crate::cli`, `crate::webhooks`
//!   or the store crate;
//! * `src/webhooks` must not use `crate::http`, `crate::ops` or `crate::cli`;
//! * `src/media` must not use `crate::http`, `crate::ops`, `crate::cli`, `crate::providers`,
//!   `crate::webhooks` or the store crate;
//! * `src/url_safety` uses none of the layers that connect out (nor the store);
//! * `src/views` must not use `crate::http`, `crate::ops` or `crate::cli`;
//! * `src/http` must not use `crate::cli`;
//! * `src/trace` (trace context and span export) uses none of the layers that make spans;
//! * no two sibling modules use each other, directly or round a longer circle, anywhere in the
//!   workspace (`ops::sending` and `ops::templates`, `app` and `webhooks`, the store's
//!   `shared::*`, ...);
//! * `src/http` builds no effects of a change (`Effects`, `NewEvent`): the use case in `ops`
//!   that makes a change describes what it causes.
//!
//! The scan reads every `.rs` file under `src/`, drops comments, strings and character
//! literals, and resolves each path that starts with `crate::`, `super::` or `self::` (also
//! inside `use crate::{...}` groups) to the top-level module it names; the store crate is
//! matched by its name, `switchboard_store`.

use std::path::{Path, PathBuf};

/// The layers each layer must not use.
const RULES: &[(&str, &[&str])] = &[
    ("ops", &["http", "cli"]),
    (
        "providers",
        &["http", "ops", "cli", "webhooks", "switchboard_store"],
    ),
    ("webhooks", &["http", "ops", "cli"]),
    // Media fetching sits beside the providers: URL safety below it, no store, no use case.
    (
        "media",
        &[
            "http",
            "ops",
            "cli",
            "providers",
            "webhooks",
            "switchboard_store",
        ],
    ),
    // The outbound URL rules sit under everything that connects out.
    (
        "url_safety",
        &[
            "http",
            "ops",
            "cli",
            "webhooks",
            "providers",
            "media",
            "views",
            "switchboard_store",
        ],
    ),
    ("views", &["http", "ops", "cli"]),
    ("http", &["cli"]),
    // Trace context and span export sit under everything that makes spans.
    (
        "trace",
        &["http", "ops", "cli", "webhooks", "providers", "views"],
    ),
];

#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    text: String,
    line: usize,
}

/// Identifiers and punctuation of Rust source, without comments, strings and char literals.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                // Block comments nest.
                let mut depth = 0;
                loop {
                    if i >= chars.len() {
                        break;
                    }
                    if chars[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(&chars, i + 1, 0, &mut line),
            'r' if at(i + 1) == '"' || (at(i + 1) == '#' && matches!(at(i + 2), '"' | '#')) => {
                let mut hashes = 0;
                let mut j = i + 1;
                while at(j) == '#' {
                    hashes += 1;
                    j += 1;
                }
                i = skip_string(&chars, j + 1, hashes, &mut line);
            }
            'b' if at(i + 1) == '"' => i = skip_string(&chars, i + 2, 0, &mut line),
            'b' if at(i + 1) == 'r' && matches!(at(i + 2), '"' | '#') => {
                let mut hashes = 0;
                let mut j = i + 2;
                while at(j) == '#' {
                    hashes += 1;
                    j += 1;
                }
                i = skip_string(&chars, j + 1, hashes, &mut line);
            }
            '\'' => {
                // A char literal ('a', '\n', '\u{1F600}', b'x' handled above as `b` then this)
                // or a lifetime ('a): a literal closes within a few characters.
                if at(i + 1) == '\\' {
                    let mut j = i + 3; // after the backslash and the escaped character
                    while j < chars.len() && chars[j] != '\'' {
                        j += 1;
                    }
                    i = j + 1;
                } else if at(i + 2) == '\'' {
                    i += 3;
                } else {
                    i += 1; // a lifetime: its name follows as an identifier
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Token {
                    text: chars[start..i].iter().collect(),
                    line,
                });
            }
            ':' if at(i + 1) == ':' => {
                out.push(Token {
                    text: "::".into(),
                    line,
                });
                i += 2;
            }
            c => {
                out.push(Token {
                    text: c.to_string(),
                    line,
                });
                i += 1;
            }
        }
    }
    out
}

/// Skips a string body from `i` (after the opening quote) to after its closing quote and
/// `hashes` hashes; counts lines.
fn skip_string(chars: &[char], mut i: usize, hashes: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' if hashes == 0 => i += 2,
            '"' if (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) => return i + 1 + hashes,
            '\n' => {
                *line += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

/// One path a file uses, resolved from the crate root (`["ops", "sending", "send"]`), or the
/// store crate (`["switchboard_store"]`), at a line.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    segments: Vec<String>,
    line: usize,
}

impl Reference {
    /// The top-level module (or the store crate) it names.
    fn target(&self) -> &str {
        self.segments.first().map(String::as_str).unwrap_or("")
    }

    fn path(&self) -> String {
        match self.target() {
            "switchboard_store" => self.segments.join("::"),
            _ => format!("crate::{}", self.segments.join("::")),
        }
    }
}

/// Every path a file at `module` (its path inside the crate, e.g. `["ops", "sending",
/// "plain"]`) uses through `crate::`, `super::` or `self::` (each element of a `use ...::{...}`
/// group on its own), and every use of the store crate.
fn references(source: &str, module: &[String]) -> Vec<Reference> {
    let toks = tokens(source);
    let text = |k: usize| toks.get(k).map(|t| t.text.as_str()).unwrap_or("");
    let mut out = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        let after_path = k > 0 && text(k - 1) == "::";
        match text(k) {
            "switchboard_store" if !after_path => out.push(Reference {
                segments: vec!["switchboard_store".into()],
                line: toks[k].line,
            }),
            "crate" | "super" | "self" if !after_path && text(k + 1) == "::" => {
                // Resolve the prefix (`crate::`, `super::super::`, `self::`) to a module path.
                let mut base: Vec<String> = match text(k) {
                    "crate" => Vec::new(),
                    _ => module.to_vec(),
                };
                // After `crate::` or `self::`; `super::` is counted below.
                let mut j = if text(k) == "super" { k } else { k + 2 };
                while text(j) == "super" && text(j + 1) == "::" {
                    base.pop();
                    j += 2;
                }
                // Braces after a path are a group in a `use`, a struct literal elsewhere.
                let in_use = k > 0 && text(k - 1) == "use";
                k = expand(&toks, j, base, in_use, &mut out);
                continue;
            }
            _ => {}
        }
        k += 1;
    }
    out
}

/// Reads the path from token `j` on, below `base`, into `out` (in a `use`, a `{...}` group
/// gives one reference per element, nested groups too); returns the index after it.
fn expand(
    toks: &[Token],
    mut j: usize,
    base: Vec<String>,
    groups: bool,
    out: &mut Vec<Reference>,
) -> usize {
    let text = |k: usize| toks.get(k).map(|t| t.text.as_str()).unwrap_or("");
    let is_name = |k: usize| {
        let t = text(k);
        !t.is_empty() && t.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    let line = toks.get(j).map(|t| t.line).unwrap_or(0);
    let mut segments = base;
    while is_name(j) {
        segments.push(text(j).to_owned());
        if text(j + 1) == "::" {
            j += 2;
        } else {
            j += 1;
            break;
        }
    }
    if !groups || text(j) != "{" {
        if !segments.is_empty() {
            out.push(Reference { segments, line });
        }
        return j;
    }
    j += 1;
    while j < toks.len() && text(j) != "}" {
        match text(j) {
            "," => j += 1,
            "self" => {
                // `{self, ...}`: the group's own path.
                out.push(Reference {
                    segments: segments.clone(),
                    line: toks[j].line,
                });
                j += 1;
            }
            _ => {
                let before = j;
                j = expand(toks, j, segments.clone(), true, out);
                // Skip what follows an element (`as Alias`, `*`) up to its comma.
                while j < toks.len() && !matches!(text(j), "," | "}") {
                    j += 1;
                }
                if j == before {
                    j += 1;
                }
            }
        }
    }
    j + 1
}

/// A file's module path inside the crate: `src/ops/sending/plain.rs` is `ops::sending::plain`,
/// `src/ops/sending/mod.rs` is `ops::sending`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_owned());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every use of a layer above, as `file:line: ...` lines.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let module = module_path(src, &file);
        let Some(layer) = module.first() else {
            continue;
        };
        let Some((_, forbidden)) = RULES.iter().find(|(l, _)| l == layer) else {
            continue;
        };
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for r in references(&source, &module) {
            if forbidden.contains(&r.target()) {
                let what = match r.target() {
                    "switchboard_store" => "the store crate".to_owned(),
                    other => format!("crate::{other}, a layer above it"),
                };
                found.push(format!(
                    "{}:{}: `{}`: src/{layer} must not use {what}",
                    file.strip_prefix(src.parent().unwrap_or(src))
                        .unwrap_or(&file)
                        .display(),
                    r.line,
                    r.path(),
                ));
            }
        }
    }
    found
}

/// Whether `path` (from the crate root) is a module file under `src`.
fn is_module(src: &Path, path: &[String]) -> bool {
    let dir: PathBuf = path.iter().collect();
    src.join(&dir).with_extension("rs").is_file() || src.join(&dir).join("mod.rs").is_file()
}

/// Import cycles between sibling modules (`ops::sending` and `ops::templates`,
/// `http::messages::send` and `http::messages::requests`, ...) anywhere under `layers`: a use
/// from inside one sibling of anything inside another is an edge between the two.
fn cycles(src: &Path, layers: &[&str]) -> Vec<String> {
    use std::collections::BTreeMap;
    // parent module -> (from child -> (to child -> where))
    type Edges = BTreeMap<String, BTreeMap<String, String>>;
    let mut graphs: BTreeMap<Vec<String>, Edges> = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for file in files {
        let module = module_path(src, &file);
        if !module.first().is_some_and(|l| layers.contains(&l.as_str())) {
            continue;
        }
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for r in references(&source, &module) {
            let common = module
                .iter()
                .zip(&r.segments)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (module.get(common), r.segments.get(common)) else {
                continue;
            };
            if !is_module(src, &r.segments[..=common]) {
                continue;
            }
            let place = format!(
                "{}:{} uses {}",
                file.strip_prefix(src.parent().unwrap_or(src))
                    .unwrap_or(&file)
                    .display(),
                r.line,
                r.path()
            );
            graphs
                .entry(module[..common].to_vec())
                .or_default()
                .entry(from.clone())
                .or_default()
                .entry(to.clone())
                .or_insert(place);
        }
    }
    let mut found = Vec::new();
    let mut reported: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for (parent, edges) in &graphs {
        // Depth-first search for a path back to the start.
        fn back(
            edges: &Edges,
            start: &str,
            at: &str,
            trail: &mut Vec<String>,
            seen: &mut Vec<String>,
        ) -> bool {
            for next in edges.get(at).map(|m| m.keys()).into_iter().flatten() {
                if next == start {
                    trail.push(next.clone());
                    return true;
                }
                if seen.contains(next) {
                    continue;
                }
                seen.push(next.clone());
                trail.push(next.clone());
                if back(edges, start, next, trail, seen) {
                    return true;
                }
                trail.pop();
            }
            false
        }
        for start in edges.keys() {
            let mut trail = vec![start.clone()];
            if back(edges, start, start, &mut trail, &mut Vec::new()) {
                // Once per cycle, whichever module it is found from.
                let mut members = trail.clone();
                members.sort();
                members.dedup();
                if reported.contains(&(parent.clone(), members.clone())) {
                    continue;
                }
                reported.push((parent.clone(), members));
                let places: Vec<&str> = trail
                    .windows(2)
                    .map(|w| edges[&w[0]][&w[1]].as_str())
                    .collect();
                found.push(format!(
                    "crate::{}: {} ({})",
                    parent.join("::"),
                    trail.join(" -> "),
                    places.join("; ")
                ));
            }
        }
    }
    found
}

/// Where `src/http` names what a change causes (events, log entries): ops describes the effects
/// of a change and writes them with it (the outbox), handlers call ops.
fn effects_in_http(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&src.join("http"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for t in tokens(&source) {
            // (`OrgEvent` is also what the organization log is read as: not a sign.)
            if matches!(t.text.as_str(), "Effects" | "NewEvent") {
                found.push(format!(
                    "{}:{}: `{}`: the effects of a change are ops's to describe",
                    file.strip_prefix(src.parent().unwrap_or(src))
                        .unwrap_or(&file)
                        .display(),
                    t.line,
                    t.text
                ));
            }
        }
    }
    found
}

#[test]
fn http_writes_no_events_of_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = effects_in_http(&src);
    assert!(
        found.is_empty(),
        "events built in http (see tests/architecture.rs):\n{}",
        found.join("\n")
    );
}

/// The top-level modules of a crate's `src` (files and folders; `lib.rs`/`main.rs` aside).
fn top_level_modules(src: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(src)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", src.display()))
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs")
                    .filter(|n| !matches!(*n, "lib" | "main"))
                    .map(str::to_owned)
            }
        })
        .collect();
    out.sort();
    out
}

/// No import circle between sibling modules anywhere in the workspace: the service (`app` and
/// `webhooks`, `cli::admin` and its `admin_*` modules, ...), the domain, the store (its
/// `shared::*` modules: completions below group commit, messages and the queue; the fan-out
/// and the chains below `write`, the webhook aggregates above it) and the test harness.
#[test]
fn no_import_cycles_in_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for src in [
        root.join("src"),
        root.join("crates/domain/src"),
        root.join("crates/store/src"),
        root.join("crates/testkit/src"),
    ] {
        let modules = top_level_modules(&src);
        let layers: Vec<&str> = modules.iter().map(String::as_str).collect();
        found.extend(cycles(&src, &layers));
    }
    assert!(
        found.is_empty(),
        "import cycles (see tests/architecture.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_is_found_wherever_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("store")).unwrap();
    std::fs::write(src.join("app.rs"), "use crate::worker::Job;").unwrap();
    std::fs::write(src.join("worker.rs"), "use crate::app::Runtime;").unwrap();
    std::fs::write(src.join("store/a.rs"), "use super::b::x;").unwrap();
    std::fs::write(src.join("store/b.rs"), "use super::c::y;").unwrap();
    std::fs::write(src.join("store/c.rs"), "use super::a::z;").unwrap();
    std::fs::write(src.join("store/mod.rs"), "pub mod a; pub mod b; pub mod c;").unwrap();
    let modules = top_level_modules(&src);
    let layers: Vec<&str> = modules.iter().map(String::as_str).collect();
    let found = cycles(&src, &layers);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found.iter().any(|c| c.contains("app -> worker -> app")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|c| c.contains("crate::store: a -> b -> c -> a")),
        "{found:#?}"
    );
}

#[test]
fn no_module_uses_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports across the layers (see tests/architecture.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_resolves_paths_and_skips_comments_and_strings() {
    let ops = |s: &str| -> Vec<String> {
        references(
            s,
            &["ops".to_owned(), "sending".to_owned(), "plain".to_owned()],
        )
        .into_iter()
        .map(|r| format!("{}@{}", r.target(), r.line))
        .collect()
    };
    assert_eq!(ops("use crate::http::messages::send_error;"), ["http@1"]);
    let paths = |s: &str, module: &[&str]| -> Vec<String> {
        let module: Vec<String> = module.iter().map(|m| m.to_string()).collect();
        references(s, &module).iter().map(Reference::path).collect()
    };
    assert_eq!(
        paths("use crate::http::AppState as S;", &[]),
        ["crate::http::AppState"]
    );
    assert_eq!(
        paths(
            "use super::{error::SendError, plain::{send, SendInput as I}, self};",
            &["ops", "sending", "flow"]
        ),
        [
            "crate::ops::sending::error::SendError",
            "crate::ops::sending::plain::send",
            "crate::ops::sending::plain::SendInput",
            "crate::ops::sending"
        ]
    );
    assert_eq!(
        paths("use crate::ops::{self, OpError};", &["cli", "admin"]),
        ["crate::ops", "crate::ops::OpError"]
    );
    assert_eq!(
        paths(
            "let c = crate::ops::Ctx { a: crate::http::x(), b: 1 };",
            &[]
        ),
        ["crate::ops::Ctx", "crate::http::x"]
    );
    assert_eq!(
        ops("use crate::{\n    views::messages::MessageOut,\n    cli::admin, store};"),
        ["views@2", "cli@3", "store@3"]
    );
    assert_eq!(
        ops("fn f() { crate::http::x(); let y = crate::ops::z; }"),
        ["http@1", "ops@1"]
    );
    assert_eq!(ops("use super::error::SendError;"), ["ops@1"]);
    assert_eq!(ops("use super::super::super::http::AppState;"), ["http@1"]);
    assert_eq!(ops("use self::inner::X;"), ["ops@1"]);
    assert_eq!(
        ops(
            "// crate::http::x\n/* crate::cli /* nested */ crate::http */\nlet s = \"crate::http\";"
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        ops("let s = r#\"crate::http \"quoted\"\"#; let c = '\"'; let q = '\\''; crate::cli::x"),
        ["cli@1"]
    );
    assert_eq!(
        ops("fn f<'a>(x: &'a str) -> &'a str { switchboard_store::Store; x }"),
        ["switchboard_store@1"]
    );
    // A path that merely ends in a layer's name is not a use of it.
    assert_eq!(
        ops("use switchboard_domain::webhooks::http;"),
        Vec::<String>::new()
    );
    #[rustfmt::skip]
    assert_eq!(
        ops("#[schema(value_type = Option<crate::http::messages::ConsentInput>)]"),
        ["http@1"]
    );
}

#[test]
fn module_paths_follow_the_files() {
    let src = Path::new("/x/src");
    assert_eq!(
        module_path(src, Path::new("/x/src/ops/sending/plain.rs")),
        ["ops", "sending", "plain"]
    );
    assert_eq!(
        module_path(src, Path::new("/x/src/ops/sending/mod.rs")),
        ["ops", "sending"]
    );
    assert!(module_path(src, Path::new("/x/src/lib.rs")).is_empty());
}

/// The most lines a production file may have (before its `#[cfg(test)]` part).
const MAX_FILE_LINES: usize = 650;
/// The most lines a production function may have, signature to closing brace.
const MAX_FN_LINES: usize = 120;

/// The files and functions allowed over the limits: generated or table-like code only, each
/// with why, at its size now (none may grow; one that shrinks must lower its cap here). Real
/// code over the limits is split instead (issue 33 emptied this list of it).
const OVERSIZED: &[(&str, usize)] = &[
    // Table-like: the configuration, one setting per line, each read and checked in place.
    ("src/config/mod.rs::from_sources", 144),
];

/// (name, lines) of every production file and function of `source` over the limits; a file is
/// `path`, a function `path::name`.
fn oversized(path: &str, source: &str) -> Vec<(String, usize)> {
    let toks = tokens(source);
    let text = |i: usize| toks.get(i).map_or("", |t| t.text.as_str());
    // Production code ends where its unit tests begin.
    let end = (0..toks.len())
        .find(|&i| {
            [text(i), text(i + 1), text(i + 2), text(i + 3), text(i + 4)]
                == ["#", "[", "cfg", "(", "test"]
        })
        .unwrap_or(toks.len());
    let mut out = Vec::new();
    let file_lines = if end < toks.len() {
        toks[end].line - 1
    } else {
        source.lines().count()
    };
    if file_lines > MAX_FILE_LINES {
        out.push((path.to_owned(), file_lines));
    }
    let mut i = 0;
    while i < end {
        let is_fn = text(i) == "fn" && text(i + 1).chars().all(|c| c.is_alphanumeric() || c == '_');
        if !is_fn || text(i + 1).is_empty() {
            i += 1;
            continue;
        }
        let start = toks[i].line;
        let name = text(i + 1).to_owned();
        // The body: the first `{` before any `;` (a declaration without a body has none).
        let mut j = i + 2;
        while j < end && text(j) != "{" && text(j) != ";" {
            j += 1;
        }
        if text(j) != "{" {
            i = j;
            continue;
        }
        let mut depth = 0;
        while j < end {
            match text(j) {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let lines = toks.get(j).map_or(start, |t| t.line) - start + 1;
        if lines > MAX_FN_LINES {
            out.push((format!("{path}::{name}"), lines));
        }
        // Functions inside this one are measured on their own too.
        i += 2;
    }
    out
}

#[test]
fn no_production_file_or_function_is_too_large() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        "src",
        "crates/domain/src",
        "crates/store/src",
        "crates/testkit/src",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    let mut measured = std::collections::HashMap::new();
    for file in files.iter().filter(|f| !f.ends_with("tests.rs")) {
        let path = file.strip_prefix(root).unwrap().display().to_string();
        let source = std::fs::read_to_string(file).unwrap();
        for (name, lines) in oversized(&path, &source) {
            match OVERSIZED.iter().find(|(n, _)| *n == name) {
                Some((_, cap)) if lines <= *cap => {}
                Some((_, cap)) => found.push(format!("{name}: {lines} lines, grew from {cap}")),
                None => found.push(format!(
                    "{name}: {lines} lines (files at most {MAX_FILE_LINES}, functions {MAX_FN_LINES})"
                )),
            }
            measured.insert(name, lines);
        }
    }
    // The list only shrinks: what got smaller lowers its cap, what is within the limits leaves.
    for (name, cap) in OVERSIZED {
        match measured.get(*name) {
            None => found.push(format!(
                "{name}: within the limits now; remove it from OVERSIZED"
            )),
            Some(lines) if lines < cap => found.push(format!(
                "{name}: {lines} lines now; lower its cap from {cap}"
            )),
            Some(_) => {}
        }
    }
    assert!(
        found.is_empty(),
        "too large (split it; see OVERSIZED in tests/architecture.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn sizes_are_measured_from_the_signature_to_the_closing_brace() {
    let long_body = "    x();\n".repeat(130);
    let source = format!(
        "fn short() {{\n    a();\n}}\n\ntrait T {{\n    fn declared(&self);\n}}\n\npub async fn long() {{\n{long_body}}}\n\n#[cfg(test)]\nmod tests {{\n    fn in_tests() {{\n{long_body}    }}\n}}\n"
    );
    assert_eq!(
        oversized("x.rs", &source),
        [("x.rs::long".to_owned(), 132)],
        "only the production function over the limit"
    );
}

/// The statuses of deliveries, endpoints and recoveries, quoted as SQL or Rust literals.
const STATUS_WORDS: &[&str] = &[
    "pending",
    "retrying",
    "delivered",
    "failed",
    "retries_exhausted",
    "active",
    "disabled",
    "running",
    "completed",
];

/// Quoted status words in the production part (before `#[cfg(test)]`) of a source file.
fn status_literals(path: &str, source: &str) -> Vec<String> {
    let production = source.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for (n, line) in production.lines().enumerate() {
        for word in STATUS_WORDS {
            if line.contains(&format!("'{word}'")) || line.contains(&format!("\"{word}\"")) {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

/// The webhook delivery rules live in the domain (`webhooks::delivery`, `webhooks::claim`):
/// the store's webhook SQL builds its status names, sets and `CASE`s from them, and writes
/// none as a literal.
#[test]
fn webhook_sql_names_no_status_of_its_own() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/store/src/shared");
    let dir = shared.join("webhooks");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() >= 5, "the webhook SQL moved: {}", dir.display());
    // The fan-out and the chains, below `write`, beside the aggregates.
    for file in ["fan_out.rs", "chains.rs", "webhook_sql.rs"] {
        assert!(shared.join(file).exists(), "the webhook SQL moved: {file}");
        files.push(shared.join(file));
    }
    let mut found = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        found.extend(status_literals(&file.display().to_string(), &source));
    }
    assert!(
        found.is_empty(),
        "status literals in the store's webhook SQL (use the domain's DeliveryStatus / \
         EndpointStatus sets and transitions, see shared/webhooks/mod.rs `sql`):\n{}",
        found.join("\n")
    );
    // The check finds what it looks for.
    assert_eq!(
        status_literals(
            "x.rs",
            "let q = \"WHERE status IN ('pending')\";\n#[cfg(test)]\n'failed'"
        )
        .len(),
        1
    );
}

/// The tables that the rows every send and delivery writes refer to without a foreign key on
/// PostgreSQL (migration 0053): the store disables, revokes or closes them, never deletes them.
const NEVER_DELETED: &[&str] = &[
    "organizations",
    "channels",
    "contacts",
    "conversations",
    "api_keys",
    "webhook_endpoints",
];

/// Each `DELETE FROM t` or `TRUNCATE [TABLE] t` of a table in [`NEVER_DELETED`], as `file:line`.
fn deletes_of_kept_rows(name: &str, source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let words: Vec<String> = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(|w| w.to_ascii_lowercase())
            .collect();
        for (i, w) in words.iter().enumerate() {
            let target = match (w.as_str(), words.get(i + 1).map(String::as_str)) {
                ("delete", Some("from")) => words.get(i + 2),
                ("truncate", Some("table")) => words.get(i + 2),
                ("truncate", _) => words.get(i + 1),
                _ => None,
            };
            if let Some(t) = target.filter(|t| NEVER_DELETED.contains(&t.as_str())) {
                found.push(format!("{name}:{}: deletes from {t}", n + 1));
            }
        }
    }
    found
}

#[test]
fn rows_referred_to_without_a_foreign_key_are_never_deleted() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in ["domain", "store"] {
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
    }
    let sql = root.join("crates/store/sql/postgres");
    for entry in std::fs::read_dir(&sql).unwrap_or_else(|e| panic!("{}: {e}", sql.display())) {
        files.push(entry.unwrap().path());
    }
    assert!(
        files.len() > 100,
        "the scan found too few files: {}",
        files.len()
    );
    let mut found = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        found.extend(deletes_of_kept_rows(&file.display().to_string(), &source));
    }
    assert!(
        found.is_empty(),
        "rows that messages, events, deliveries and idempotency records refer to without a \
         foreign key on PostgreSQL are deleted (migration 0053: disable, revoke or close them \
         instead, or bring the key back):\n{}",
        found.join("\n")
    );
    // The check finds what it looks for.
    let planted = "sqlx::query(\"DELETE FROM api_keys WHERE id = $1\")\n\
                   \"TRUNCATE TABLE webhook_endpoints\"\n\"delete from webhook_attempts\"";
    assert_eq!(deletes_of_kept_rows("x.rs", planted).len(), 2);
}
