//! The layers inside the service, checked on the source tree: a module may use the layers
//! below it, never one above. (Between the crates the crate graph enforces it: the domain
//! cannot name the store, the store cannot name the service.)
//!
//! ```text
//! cli ──► http ──► ops ──► views, webhooks, providers ──► store, domain
//! ```
//!
//! * `src/ops` must not use `crate::http` or `crate::cli`;
//! * `src/providers` must not use `crate::http`, `crate::ops`, `crate::cli` or the store crate;
//! * `src/webhooks` must not use `crate::http`, `crate::ops` or `crate::cli`;
//! * `src/views` must not use `crate::http`, `crate::ops` or `crate::cli`;
//! * `src/http` must not use `crate::cli`.
//!
//! The scan reads every `.rs` file under `src/`, drops comments, strings and character
//! literals, and resolves each path that starts with `crate::`, `super::` or `self::` (also
//! inside `use crate::{...}` groups) to the top-level module it names; the store crate is
//! matched by its name, `switchboard_store`.

use std::path::{Path, PathBuf};

/// The layers each layer must not use.
const RULES: &[(&str, &[&str])] = &[
    ("ops", &["http", "cli"]),
    ("providers", &["http", "ops", "cli", "switchboard_store"]),
    ("webhooks", &["http", "ops", "cli"]),
    ("views", &["http", "ops", "cli"]),
    ("http", &["cli"]),
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

/// One use of a top-level module (or of the store crate) at a line.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    target: String,
    path: String,
    line: usize,
}

/// Every top-level module a file at `module` (its path inside the crate, e.g. `["ops",
/// "sending", "plain"]`) names through `crate::`, `super::` or `self::`, and every use of the
/// store crate.
fn references(source: &str, module: &[String]) -> Vec<Reference> {
    let toks = tokens(source);
    let text = |k: usize| toks.get(k).map(|t| t.text.as_str()).unwrap_or("");
    let mut out = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        let after_path = k > 0 && text(k - 1) == "::";
        match text(k) {
            "switchboard_store" if !after_path => out.push(Reference {
                target: "switchboard_store".into(),
                path: "switchboard_store".into(),
                line: toks[k].line,
            }),
            "crate" | "super" | "self" if !after_path && text(k + 1) == "::" => {
                // Resolve the prefix (`crate::`, `super::super::`, `self::`) to a module path.
                let line = toks[k].line;
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
                let prefix = || {
                    let mut p = vec!["crate".to_owned()];
                    p.extend(base.iter().cloned());
                    p.join("::")
                };
                if let Some(first) = base.first() {
                    out.push(Reference {
                        target: first.clone(),
                        path: format!("{}::{}", prefix(), rest_of_path(&toks, j)),
                        line,
                    });
                } else if text(j) == "{" {
                    // `use crate::{a::b, c, d::{e, f}}`: the first segment of each element.
                    let mut depth = 0;
                    let mut expect_first = true;
                    j += 1;
                    while j < toks.len() {
                        match text(j) {
                            "{" => depth += 1,
                            "}" if depth == 0 => break,
                            "}" => depth -= 1,
                            "," if depth == 0 => expect_first = true,
                            name if expect_first && depth == 0 => {
                                expect_first = false;
                                out.push(Reference {
                                    target: name.to_owned(),
                                    path: format!("crate::{name}"),
                                    line: toks[j].line,
                                });
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                } else {
                    out.push(Reference {
                        target: text(j).to_owned(),
                        path: format!("crate::{}", rest_of_path(&toks, j)),
                        line,
                    });
                }
                k = j;
                continue;
            }
            _ => {}
        }
        k += 1;
    }
    out
}

/// The path from token `j` on: `a::b::c` (up to what is not a name or `::`).
fn rest_of_path(toks: &[Token], mut j: usize) -> String {
    let mut out = String::new();
    let mut want_name = true;
    while let Some(t) = toks.get(j) {
        let is_name = t.text.chars().all(|c| c.is_alphanumeric() || c == '_');
        match (want_name, is_name, t.text == "::") {
            (true, true, _) | (false, _, true) => out.push_str(&t.text),
            _ => break,
        }
        want_name = !want_name;
        j += 1;
    }
    out.trim_end_matches("::").to_owned()
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
            if forbidden.contains(&r.target.as_str()) {
                let what = match r.target.as_str() {
                    "switchboard_store" => "the store crate".to_owned(),
                    other => format!("crate::{other}, a layer above it"),
                };
                found.push(format!(
                    "{}:{}: `{}`: src/{layer} must not use {what}",
                    file.strip_prefix(src.parent().unwrap_or(src))
                        .unwrap_or(&file)
                        .display(),
                    r.line,
                    r.path,
                ));
            }
        }
    }
    found
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
        .map(|r| format!("{}@{}", r.target, r.line))
        .collect()
    };
    assert_eq!(ops("use crate::http::messages::send_error;"), ["http@1"]);
    let paths: Vec<String> = references("use crate::http::AppState as S;", &[])
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert_eq!(paths, ["crate::http::AppState"]);
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
