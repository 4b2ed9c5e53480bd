//! Starting and seeding a `switchboard` server for a benchmark run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The server binary: given, or `switchboard` beside this binary (built by `cargo build --release`).
pub fn server_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    let me = std::env::current_exe()?;
    let sibling = me.with_file_name("switchboard");
    if !sibling.exists() {
        eprintln!("building the server: cargo build --release --bin switchboard");
        let status = std::process::Command::new("cargo")
            .args(["build", "--release", "--bin", "switchboard"])
            .status()?;
        if !status.success() {
            bail!("cargo build --release --bin switchboard failed");
        }
    }
    Ok(sibling)
}

/// A temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let p = std::env::temp_dir().join(format!(
            "switchboard-bench-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Leaves the directory in place.
    fn keep(self) {
        let _ = std::mem::ManuallyDrop::new(self);
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh database for one run.
pub struct Database {
    pub url: String,
    pub master_key: String,
    pub dir: TempDir,
    pg: Option<(String, String)>,
}

impl Database {
    pub async fn create(backend: Backend, postgres_url: &str) -> anyhow::Result<Database> {
        let dir = TempDir::new()?;
        let master_key = switchboard::crypto::MasterKey::generate().to_hex();
        match backend {
            Backend::Sqlite => Ok(Database {
                url: format!("sqlite://{}", dir.path().join("bench.db").display()),
                master_key,
                dir,
                pg: None,
            }),
            Backend::Postgres => {
                use sqlx::Connection;
                let name = format!("sbbench_{}", uuid::Uuid::new_v4().simple());
                let mut c = sqlx::PgConnection::connect(postgres_url)
                    .await
                    .context("connect to PostgreSQL (--postgres-url)")?;
                sqlx::query(&format!("CREATE DATABASE \"{name}\""))
                    .execute(&mut c)
                    .await?;
                let mut url = url::Url::parse(postgres_url)?;
                url.set_path(&name);
                Ok(Database {
                    url: url.to_string(),
                    master_key,
                    dir,
                    pg: Some((postgres_url.to_owned(), name)),
                })
            }
        }
    }

    /// Keeps the database (neither dropped nor removed) and returns its URL.
    pub fn keep(self) -> String {
        let Database { url, dir, pg, .. } = self;
        if pg.is_none() {
            // The SQLite file lives in the directory.
            dir.keep();
        }
        url
    }

    pub async fn drop_database(self) {
        if let Some((admin, name)) = &self.pg {
            use sqlx::Connection;
            if let Ok(mut c) = sqlx::PgConnection::connect(admin).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&mut c)
                    .await;
            }
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("SWITCHBOARD_DATABASE_URL", self.url.clone()),
            ("SWITCHBOARD_MASTER_KEY", self.master_key.clone()),
            ("SWITCHBOARD_LISTEN", "127.0.0.1:0".into()),
            ("SWITCHBOARD_LOG", "warn".into()),
            ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true".into()),
            ("SWITCHBOARD_RATE_LIMIT_READS", "1000000".into()),
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "1000000".into()),
            ("SWITCHBOARD_RATE_LIMIT_TESTS", "1000000".into()),
            // 8 endpoints x 8 = the global 64 attempts in flight, the plain client's concurrency.
            ("SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY", "8".into()),
        ]
    }

    fn command(&self, bin: &Path) -> Command {
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars() {
            if k.starts_with("SWITCHBOARD_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(self.env())
            .current_dir(self.dir.path())
            .kill_on_drop(true);
        cmd
    }

    pub async fn admin(&self, bin: &Path, args: &[&str]) -> anyhow::Result<Value> {
        let out = self
            .command(bin)
            .arg("admin")
            .args(args)
            .arg("--json")
            .output()
            .await?;
        if !out.status.success() {
            bail!("admin {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

pub struct Seed {
    pub key: String,
    pub contact_uuid: Option<String>,
    pub phone: String,
}

/// One organization, a default sandbox channel, a wildcard key and a contact.
pub async fn seed(bin: &Path, db: &Database) -> anyhow::Result<Seed> {
    let org = db.admin(bin, &["org", "create", "--name", "Bench"]).await?;
    let org_id = org["id"].to_string();
    db.admin(
        bin,
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "Sandbox",
            "--default",
        ],
    )
    .await?;
    let key = db
        .admin(bin, &["key", "create", "--org", &org_id, "--scopes", "*"])
        .await?;
    let phone = "+4915112345678".to_owned();
    let contact = db
        .admin(
            bin,
            &[
                "contact", "create", "--org", &org_id, "--phone", &phone, "--name", "Bench",
            ],
        )
        .await
        .ok();
    Ok(Seed {
        key: key["key"].as_str().unwrap_or_default().to_owned(),
        contact_uuid: contact.and_then(|c| c["uuid"].as_str().map(str::to_owned)),
        phone,
    })
}

pub struct Server {
    child: Child,
    pub base: String,
    pub startup: Duration,
}

impl Server {
    /// Starts the server and measures the time until it accepts requests.
    pub async fn start(bin: &Path, db: &Database) -> anyhow::Result<Server> {
        Server::start_with(bin, db, &[]).await
    }

    /// [`Server::start`] with extra environment variables.
    pub async fn start_with(
        bin: &Path,
        db: &Database,
        env: &[(&str, String)],
    ) -> anyhow::Result<Server> {
        let started = Instant::now();
        let mut child = db
            .command(bin)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .arg("serve")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line.strip_prefix("switchboard listening on ") {
                    return Some(addr.trim().to_owned());
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .context("the server did not start")?;
        let startup = started.elapsed();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Server {
            child,
            base,
            startup,
        })
    }

    /// Kills the server and waits until it has exited (its database files are released).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn status_field(&self, field: &str) -> Option<f64> {
        let pid = self.child.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    }

    /// Resident memory now, in MiB.
    pub fn rss_mb(&self) -> Option<f64> {
        self.status_field("VmRSS:")
    }

    /// Peak resident memory so far, in MiB.
    pub fn peak_rss_mb(&self) -> Option<f64> {
        self.status_field("VmHWM:")
    }

    /// Creates a webhook endpoint; `None` when the server has no webhook endpoints.
    pub async fn create_endpoint(
        &self,
        client: &reqwest::Client,
        key: &str,
        url: &str,
        events: &[&str],
    ) -> Option<Value> {
        let resp = client
            .post(self.url("/api/v1/integrations/webhook-endpoints"))
            .bearer_auth(key)
            .json(&serde_json::json!({ "name": "bench", "url": url, "events": events }))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.json().await.ok()
    }
}
