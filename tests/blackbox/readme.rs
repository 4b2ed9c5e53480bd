//! The README's `curl` examples run as written against a demo server (`serve --demo`): every
//! `sh` block that talks to `http://127.0.0.1:8080` runs in bash, in order, with only the
//! server's address and the placeholders a reader fills in (`KEY=sbk_...`, `EP=...`) replaced;
//! each `curl` must get a 2xx. A block can be skipped only with a visible reason:
//! `<!-- readme-test: skip (why) -->` on the line before it.

use std::path::PathBuf;
use std::time::Duration;

use crate::both_backends;
use crate::receivers::Receiver;
use crate::support::{Backend, TestEnv};

both_backends!(the_readme_examples_run_against_the_demo);

struct Block {
    line: usize,
    text: String,
    skip: Option<String>,
}

/// The `sh` blocks of the README that talk to the demo's address.
fn demo_blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "```sh" {
            let start = i;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim_end() != "```" {
                body.push(lines[i]);
                i += 1;
            }
            let text = body.join("\n");
            if text.contains("127.0.0.1:8080") {
                let before = lines[..start]
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .copied()
                    .unwrap_or("");
                let skip = before
                    .trim()
                    .strip_prefix("<!-- readme-test: skip")
                    .map(|r| r.trim_end_matches("-->").trim().to_owned());
                out.push(Block {
                    line: start + 1,
                    text,
                    skip,
                });
            }
        }
        i += 1;
    }
    out
}

async fn the_readme_examples_run_against_the_demo(backend: Backend) {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let blocks = demo_blocks(&readme);
    let env = TestEnv::new(backend).await;
    let server = env.start_with_args(&["serve", "--demo"], &[]).await;
    let key = server
        .stdout()
        .split_whitespace()
        .find(|w| w.starts_with("sbk_"))
        .expect("the demo prints its key")
        .trim_end_matches('\'')
        .to_owned();
    // The endpoint the recovery example names (EP=...): a receiver on this machine.
    let rx = Receiver::start().await;
    let ep = server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &key,
            &serde_json::json!({"url": rx.url("/ep"), "events": ["message.*"]}),
        )
        .await
        .expect(201)
        .body["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let address = server.base.trim_start_matches("http://").to_owned();

    let mut ran = 0;
    let mut skipped = Vec::new();
    for block in &blocks {
        if let Some(reason) = &block.skip {
            assert!(
                reason.starts_with('(') && reason.len() > 10,
                "README line {}: a skipped example says why",
                block.line
            );
            skipped.push(block.line);
            continue;
        }
        // Placeholders the reader fills in; everything else as written.
        let script: Vec<String> = block
            .text
            .lines()
            .map(|l| {
                if l.starts_with("export KEY=sbk_...") {
                    format!("export KEY={key}")
                } else if l.starts_with("EP=...") {
                    format!("EP={ep}")
                } else {
                    l.replace("127.0.0.1:8080", &address)
                        .replace("curl -s", "curl --fail-with-body -s")
                }
            })
            .collect();
        let script = format!("set -euo pipefail\n{}\n", script.join("\n"));
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new("bash")
                .arg("-c")
                .arg(&script)
                .env("KEY", &key)
                .output(),
        )
        .await
        .expect("the example finishes")
        .expect("bash runs");
        assert!(
            out.status.success(),
            "README line {}:\n{script}\nstdout: {}\nstderr: {}",
            block.line,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(
        ran >= 5,
        "{ran} examples ran, {} skipped (lines {skipped:?})",
        skipped.len()
    );
    // The examples did what they say: the send created the contact the contacts example finds.
    let found = server
        .get("/api/v1/integrations/contacts?phone=%2B4915123456789", &key)
        .await
        .expect(200);
    assert_eq!(found.body["data"].as_array().unwrap().len(), 1);
}
