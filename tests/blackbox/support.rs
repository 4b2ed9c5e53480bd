//! Black-box test support: real `switchboard` processes on random ports, a fresh database per
//! test (a SQLite file in a temporary directory, or a PostgreSQL database created and dropped),
//! and the admin tools run as processes with `--json`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Declares a test `name(Backend)` once per backend: `name::sqlite` and `name::postgres`.
/// The PostgreSQL variant is skipped (reported as ignored, never as passed) when
/// `SWITCHBOARD_TEST_POSTGRES_URL` is unset.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            fn sqlite() {
                $crate::support::run_async(2, super::$name($crate::support::Backend::Sqlite))
            }
            fn postgres() {
                if $crate::support::postgres_url().is_none() {
                    $crate::support::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set");
                }
                $crate::support::run_async(2, super::$name($crate::support::Backend::Postgres))
            }
            switchboard_testkit::register!("sqlite", sqlite);
            switchboard_testkit::register!("postgres", postgres);
        }
    )* };
}

/// Declares tests that are `async fn name()` (they choose their backends themselves), run on
/// a runtime of `threads` workers.
#[macro_export]
macro_rules! async_tests {
    ($threads:literal; $($name:ident),* $(,)?) => { $(
        const _: () = {
            fn run() {
                $crate::support::run_async($threads, $name())
            }
            switchboard_testkit::register!(stringify!($name), run);
        };
    )* };
}

/// Declares tests that are plain `fn name()`.
#[macro_export]
macro_rules! sync_tests {
    ($($name:ident),* $(,)?) => { $(
        switchboard_testkit::register!(stringify!($name), $name);
    )* };
}

/// Runs one test's future on a multi-threaded runtime of its own (as `#[tokio::test]` does).
pub fn run_async(threads: usize, test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(test)
}

pub fn postgres_url() -> Option<String> {
    std::env::var("SWITCHBOARD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// `SWITCHBOARD_TEST_RETENTION_PARTITIONS=true`: every PostgreSQL test server partitions its
/// webhook tables for retention (`SWITCHBOARD_RETENTION_PARTITIONS`), so the whole suite runs on
/// that shape of the tables.
pub fn partitioned_suite() -> bool {
    std::env::var("SWITCHBOARD_TEST_RETENTION_PARTITIONS").is_ok_and(|v| v == "true")
}

pub fn redis_url() -> Option<String> {
    std::env::var("SWITCHBOARD_TEST_REDIS_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// A fresh database and the settings every process of one test shares.
pub struct TestEnv {
    pub backend: Backend,
    pub dir: tempfile::TempDir,
    pub database_url: String,
    pub master_key: String,
    pg_database: Option<(String, String)>,
}

impl TestEnv {
    pub async fn new(backend: Backend) -> TestEnv {
        let dir = tempfile::tempdir().expect("temporary directory");
        let master_key = hex_key();
        match backend {
            Backend::Sqlite => TestEnv {
                backend,
                database_url: format!("sqlite://{}", dir.path().join("switchboard.db").display()),
                dir,
                master_key,
                pg_database: None,
            },
            Backend::Postgres => {
                let admin_url = postgres_url().expect("SWITCHBOARD_TEST_POSTGRES_URL");
                let name = format!("sbtest_{}", uuid::Uuid::new_v4().simple());
                create_pg_database(&admin_url, &name).await;
                let mut url =
                    url::Url::parse(&admin_url).expect("SWITCHBOARD_TEST_POSTGRES_URL is a URL");
                url.set_path(&name);
                TestEnv {
                    backend,
                    database_url: url.to_string(),
                    dir,
                    master_key,
                    pg_database: Some((admin_url, name)),
                }
            }
        }
    }

    /// The environment of every process of this test (on top of a cleaned parent environment).
    pub fn base_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("SWITCHBOARD_DATABASE_URL".into(), self.database_url.clone()),
            ("SWITCHBOARD_MASTER_KEY".into(), self.master_key.clone()),
            ("SWITCHBOARD_LISTEN".into(), "127.0.0.1:0".into()),
            ("SWITCHBOARD_LOG_FORMAT".into(), "json".into()),
            // Most tests send several messages to one recipient at once; the pacing tests set
            // the interval they check.
            ("SWITCHBOARD_RECIPIENT_INTERVAL".into(), "0s".into()),
            // Test servers share one PostgreSQL server (100 connections) with each other and
            // with the suite's own pools: with the default 16 per server, the suite peaked at
            // 70 client connections on a quiet machine. Eight each leaves headroom for a slow
            // one; a test that needs more sets its own.
            ("SWITCHBOARD_DATABASE_MAX_CONNECTIONS".into(), "8".into()),
        ];
        // The whole suite on partitioned webhook tables (retention by partition), on request.
        if self.backend == Backend::Postgres && partitioned_suite() {
            env.push(("SWITCHBOARD_RETENTION_PARTITIONS".into(), "true".into()));
        }
        env
    }

    fn command(&self, extra: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(BIN);
        for (k, _) in std::env::vars() {
            if k.starts_with("SWITCHBOARD_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in self.base_env() {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.current_dir(self.dir.path());
        cmd.kill_on_drop(true);
        cmd
    }

    /// Runs `switchboard admin ARGS --json`; panics unless it succeeds; returns the JSON object.
    pub async fn admin(&self, args: &[&str]) -> Value {
        let out = self.admin_raw(args).await;
        assert!(out.success, "admin {args:?} failed: {}", out.stderr);
        let lines: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "admin {args:?} must print exactly one line of JSON, got {:?}",
            out.stdout
        );
        serde_json::from_str(lines[0])
            .unwrap_or_else(|e| panic!("admin {args:?} printed invalid JSON ({e}): {}", out.stdout))
    }

    /// Runs `switchboard admin ARGS --json` and returns what happened.
    pub async fn admin_raw(&self, args: &[&str]) -> CommandOutput {
        let mut full = vec!["admin"];
        full.extend_from_slice(args);
        full.push("--json");
        self.run(&full, &[]).await
    }

    /// Runs `switchboard ARGS` with extra environment.
    pub async fn run(&self, args: &[&str], env: &[(&str, &str)]) -> CommandOutput {
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            self.command(env).args(args).output(),
        )
        .await
        .unwrap_or_else(|_| panic!("switchboard {args:?} did not finish in 60 s"))
        .expect("run switchboard");
        CommandOutput {
            success: out.status.success(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts `switchboard serve` with extra environment and waits until it listens.
    pub async fn start(&self, env: &[(&str, &str)]) -> Server {
        self.start_with_args(&["serve"], env).await
    }

    pub async fn start_with_args(&self, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = self
            .command(env)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchboard serve");
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = logs.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut printed = String::new();
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                printed.push_str(&line);
                printed.push('\n');
                if let Some(addr) = line.strip_prefix("switchboard listening on ") {
                    return Some(addr.trim().to_owned());
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(base) = base else {
            let _ = child.start_kill();
            let _ = child.wait().await;
            panic!(
                "switchboard serve did not start.\nstdout:\n{printed}\nstderr:\n{}",
                logs.lock().unwrap()
            );
        };
        let stdout_sink = Arc::new(Mutex::new(printed));
        let sink = stdout_sink.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Server {
            child,
            base,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            logs,
            stdout: stdout_sink,
        }
    }

    /// An organization with an active default sandbox channel and a wildcard key.
    pub async fn seed(&self) -> Seed {
        // Tests seed several organizations of one name (`--force`: a repeated name is refused).
        let org = self
            .admin(&["org", "create", "--name", "Acme", "--force"])
            .await;
        let org_id = org["id"].as_i64().unwrap();
        let channel = self
            .admin(&[
                "channel",
                "create",
                "--org",
                &org_id.to_string(),
                "--type",
                "sandbox",
                "--name",
                "Sandbox",
                "--default",
            ])
            .await;
        let key = self
            .admin(&[
                "key",
                "create",
                "--org",
                &org_id.to_string(),
                "--scopes",
                "*",
            ])
            .await;
        Seed {
            org_id,
            channel_id: channel["id"].as_i64().unwrap(),
            key: key["key"].as_str().unwrap().to_owned(),
            key_id: key["id"].as_i64().unwrap(),
        }
    }

    /// A key for `org_id` with the given scopes (comma-separated, or `*`).
    pub async fn key(&self, org_id: i64, scopes: &str) -> String {
        let key = self
            .admin(&[
                "key",
                "create",
                "--org",
                &org_id.to_string(),
                "--scopes",
                scopes,
            ])
            .await;
        key["key"].as_str().unwrap().to_owned()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Some((admin_url, name)) = self.pg_database.take() {
            // Drop on a fresh runtime in another thread: this may run inside a runtime.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    use sqlx::Connection;
                    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url).await {
                        let _ = sqlx::query(&format!(
                            "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                        ))
                        .execute(&mut conn)
                        .await;
                    }
                });
            })
            .join();
        }
    }
}

async fn create_pg_database(admin_url: &str, name: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin_url)
        .await
        .expect("connect to SWITCHBOARD_TEST_POSTGRES_URL");
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut conn)
        .await
        .expect("create test database");
}

pub fn hex_key() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{a}{b}")
}

pub struct Seed {
    pub org_id: i64,
    pub channel_id: i64,
    pub key: String,
    pub key_id: i64,
}

pub struct CommandOutput {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A running `switchboard serve`.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub client: reqwest::Client,
    logs: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status and returns self, printing the body on failure.
    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }

    /// Asserts an error response: status, code, and the conventions' body shape.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Resp {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        assert_eq!(
            self.body["error"]["code"], code,
            "unexpected code; body: {}",
            self.text
        );
        assert!(
            self.body["error"]["message"].is_string(),
            "error without message: {}",
            self.text
        );
        assert!(
            self.body["error"]["request_id"].is_string(),
            "error without request_id: {}",
            self.text
        );
        // A replay returns the stored body as it was: its request_id is the first request's.
        if self.header("idempotency-replayed").is_none() {
            assert_eq!(
                self.body["error"]["request_id"].as_str(),
                self.header("x-request-id"),
                "the body's request_id matches X-Request-Id"
            );
        }
        self
    }
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request with an optional bearer key and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Resp {
        let mut req = self.client.request(method, self.url(path));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        Self::read(req.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str, key: &str) -> Resp {
        self.call(Method::GET, path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: &Value) -> Resp {
        self.call(Method::POST, path, Some(key), Some(body)).await
    }

    /// A POST with extra headers (for example `Idempotency-Key`).
    pub async fn post_with(
        &self,
        path: &str,
        key: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = self.client.post(self.url(path)).bearer_auth(key).json(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::read(req.send().await.expect("request")).await
    }

    pub async fn read(resp: reqwest::Response) -> Resp {
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    /// Everything the server wrote to standard error so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Everything the server wrote to standard output so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// SIGKILL, no cleanup.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM, then waits for the exit; returns the exit status code.
    pub async fn terminate(&mut self) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("server exits after SIGTERM")
            .ok()
            .and_then(|s| s.code())
    }
}

/// Small helper: a map of headers for assertions.
pub fn header_map(resp: &Resp) -> HashMap<String, String> {
    resp.headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Ends a test that this machine cannot run (`reason`: what is missing); the harness reports
/// it as ignored with the reason, never as passed, and `.ci/run` fails on any skip.
pub fn skip(reason: &str) -> ! {
    switchboard_testkit::skip(reason)
}

/// Skips the test unless `program` is on the `PATH`.
pub fn need_program(program: &str, install: &str) {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|dir| dir.join(program).is_file()));
    if !on_path {
        skip(&format!("`{program}` is not installed ({install})"));
    }
}

/// Skips the test unless `path` exists (a tool or library the test drives).
pub fn need_path(path: &std::path::Path, install: &str) {
    if !path.exists() {
        skip(&format!("{} is missing ({install})", path.display()));
    }
}
