//! The catalogue's `emitted` flags are true to the code: every catalogue event name that the
//! code writes (a string literal in `src/` or the domain and store crates, outside the
//! catalogue itself) is in `catalogue::EMITTED`, and every name in `EMITTED` is written
//! somewhere (a literal or, for the names the dispatcher and the test operation use, their
//! constant). A new event that is not added to `EMITTED` fails here, as does a stale entry.

use std::path::{Path, PathBuf};

use switchboard_domain::webhooks::catalogue::{self, EMITTED};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// String literals on code lines (comments skipped) of `source`, up to its unit tests (a
/// `#[cfg(test)]` module, which the code base keeps at the end of a file).
fn literals(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(start) = rest.find('"') {
            let after = &rest[start + 1..];
            let Some(end) = after.find('"') else { break };
            found.push((n + 1, after[..end].to_owned()));
            rest = &after[end + 1..];
        }
    }
    found
}

#[test]
fn emitted_events_match_the_code() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates/domain/src", "crates/store/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut written = std::collections::BTreeSet::new();
    let mut missing = Vec::new();
    for file in &files {
        if file.ends_with("webhooks/catalogue.rs") || file.to_string_lossy().contains("bin/bench") {
            continue;
        }
        let source = std::fs::read_to_string(file).unwrap();
        for (line, lit) in literals(&source) {
            if catalogue::is_event(&lit) {
                written.insert(lit.clone());
                if !catalogue::is_emitted(&lit) {
                    missing.push(format!("{}:{line}: {lit}", file.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these catalogue events are written but not in catalogue::EMITTED:\n{}",
        missing.join("\n")
    );
    // Written through constants rather than literals.
    for name in [
        catalogue::INTEGRATION_TEST,
        catalogue::WEBHOOK_DELIVERY_FAILED,
        catalogue::WEBHOOK_ENDPOINT_DISABLED,
    ] {
        written.insert(name.to_owned());
    }
    let stale: Vec<&&str> = EMITTED.iter().filter(|n| !written.contains(**n)).collect();
    assert!(
        stale.is_empty(),
        "catalogue::EMITTED lists events no code writes: {stale:?}"
    );
}
