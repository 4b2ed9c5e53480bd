//! The `curl` examples of the README and of `docs/*.md` run as written against a demo server
//! (`serve --demo`): every `sh` block that talks to `http://127.0.0.1:8080` runs in bash, file by
//! file and in order, with only the server's address and the placeholders a reader fills in
//! (`KEY=sbk_...`, `EP=...`, `CHANNEL_UUID=...`) replaced; each `curl` must get a 2xx. A block can
//! be skipped only with a visible reason: `<!-- readme-test: skip (why) -->` or
//! `<!-- doc-test: skip (why) -->` on the line before it.

use std::path::PathBuf;
use std::time::Duration;

use crate::both_backends;
use crate::receivers::Receiver;
use crate::support::{Backend, TestEnv};

both_backends!(the_readme_examples_run_against_the_demo);

struct Block {
    file: String,
    line: usize,
    text: String,
    skip: Option<String>,
}

/// The README and every document under `docs/`, README first, then by name.
fn documents() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    std::iter::once(root.join("README.md"))
        .chain(docs)
        .map(|p| {
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The `sh` blocks of a document that talk to the demo's address.
fn demo_blocks(file: &str, readme: &str) -> Vec<Block> {
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
                let before = before.trim();
                let skip = before
                    .strip_prefix("<!-- readme-test: skip")
                    .or_else(|| before.strip_prefix("<!-- doc-test: skip"))
                    .map(|r| r.trim_end_matches("-->").trim().to_owned());
                out.push(Block {
                    file: file.to_owned(),
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
    // The examples are shell scripts for a reader's machine.
    for program in ["bash", "curl", "openssl", "sed"] {
        crate::support::need_program(
            program,
            "the examples' shell tools; .ci/run's machine has them",
        );
    }
    let blocks: Vec<Block> = documents()
        .iter()
        .flat_map(|(file, text)| demo_blocks(file, text))
        .collect();
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
    // The WhatsApp channel the callback rehearsal of docs/production.md posts to.
    let rehearsal = env
        .admin(&[
            "channel",
            "create",
            "--org",
            "1",
            "--type",
            "whatsapp_cloud",
            "--name",
            "Rehearsal",
            "--provider-config",
            r#"{"phone_number_id": "1098765432", "app_secret": "rehearsal-secret"}"#,
        ])
        .await;
    let channel_uuid = rehearsal["uuid"].as_str().unwrap().to_owned();

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
                } else if l.starts_with("export CHANNEL_UUID=...") {
                    format!("export CHANNEL_UUID={channel_uuid}")
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
            "{} line {}:\n{script}\nstdout: {}\nstderr: {}",
            block.file,
            block.line,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(
        ran >= 10,
        "{ran} examples ran, {} skipped (lines {skipped:?})",
        skipped.len()
    );
    // The examples did what they say: the send created the contact the contacts example finds.
    let found = server
        .get("/api/v1/integrations/contacts?phone=%2B4915123456789", &key)
        .await
        .expect(200);
    assert_eq!(found.body["data"].as_array().unwrap().len(), 1);
    // ... and the signed callback of docs/production.md was received.
    let inbound = server
        .get("/api/v1/integrations/messages?direction=inbound", &key)
        .await
        .expect(200);
    assert!(
        inbound.text.contains("Hello from the rehearsal"),
        "{}",
        inbound.text
    );
}
