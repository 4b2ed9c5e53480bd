//! Issue 30: a full disk is a state, not a crash loop. The database lives on a small real
//! filesystem (a tmpfs mounted for the test: the SQLite file, or a PostgreSQL tablespace holding
//! the test database); the test fills it, sees writes refused with 507 `storage_full` and the
//! instance not ready, frees the space, and sees writes and readiness come back without a
//! restart, the failed send's retry with the same `Idempotency-Key` included. Skipped with a
//! notice where the machine cannot mount a filesystem (not root, no tmpfs).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{Backend, Resp, Server, TestEnv, skip};

both_backends!(a_full_disk_is_507_and_writes_resume_without_a_restart);

const SEND: &str = "/api/v1/integrations/messages";

/// A tmpfs of a given size, unmounted (lazily) when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size_kib` KiB, owned by `owner` (uid, gid) when given.
    fn mount(size_kib: u64, owner: Option<(u32, u32)>) -> Result<SmallDisk, String> {
        let path = std::env::temp_dir().join(format!("sb-small-disk-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        let mut options = format!("size={size_kib}k,mode=0700");
        if let Some((uid, gid)) = owner {
            options.push_str(&format!(",uid={uid},gid={gid}"));
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&path);
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk { path })
    }

    fn filler(&self) -> PathBuf {
        self.path.join("filler")
    }

    /// Fills the filesystem to the last byte.
    fn fill(&self) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler())
            .unwrap();
        for size in [1 << 20, 64 << 10, 4 << 10, 512, 1] {
            let chunk = vec![0u8; size];
            while f.write_all(&chunk).is_ok() {}
        }
        let _ = f.flush();
    }

    /// Frees what [`SmallDisk::fill`] took.
    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// The uid and gid of the local `postgres` user (the server's, when it runs on this machine).
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.starts_with("postgres:"))?;
    let mut fields = line.split(':').skip(2);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// A tablespace on `dir` holding the test's database (moved there while nothing is connected);
/// dropped (in a thread of its own, as `TestEnv` drops its database) once the database is gone.
struct Tablespace {
    admin_url: String,
    name: String,
}

impl Tablespace {
    async fn create(env: &TestEnv, dir: &Path) -> Result<Tablespace, String> {
        use sqlx::Connection;
        let admin_url = crate::support::postgres_url().unwrap();
        let name = format!("sbts_{}", uuid::Uuid::new_v4().simple());
        let database = url::Url::parse(&env.database_url).unwrap().path()[1..].to_owned();
        let mut conn = sqlx::PgConnection::connect(&admin_url)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(&format!(
            "CREATE TABLESPACE {name} LOCATION '{}'",
            dir.display()
        ))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("CREATE TABLESPACE (is PostgreSQL on this machine?): {e}"))?;
        let space = Tablespace { admin_url, name };
        sqlx::query(&format!(
            "ALTER DATABASE \"{database}\" SET TABLESPACE {}",
            space.name
        ))
        .execute(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
        Ok(space)
    }
}

impl Drop for Tablespace {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&url).await {
                    let _ = sqlx::query(&format!("DROP TABLESPACE IF EXISTS {name}"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// The test's database on a small disk. Fields drop in this order: the database, then its
/// tablespace, then the filesystem.
struct OnSmallDisk {
    env: TestEnv,
    _tablespace: Option<Tablespace>,
    disk: SmallDisk,
}

async fn send(server: &Server, key: &str, idempotency_key: &str) -> Resp {
    server
        .post_with(
            SEND,
            key,
            &json!({"phone": "+4915123456789", "message": "x".repeat(2000)}),
            &[("Idempotency-Key", idempotency_key)],
        )
        .await
}

async fn ready(server: &Server) -> u16 {
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .status
        .as_u16()
}

/// The value of a metric's series (its full name with labels, as scraped).
async fn metric(server: &Server, series: &str) -> Option<f64> {
    let text = server.call(Method::GET, "/metrics", None, None).await.text;
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

async fn eventually(deadline: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f().await {
        assert!(Instant::now() < end, "{what} within {deadline:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn a_full_disk_is_507_and_writes_resume_without_a_restart(backend: Backend) {
    let mut env = TestEnv::new(backend).await;
    let owner = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => match postgres_user() {
            Some(o) => Some(o),
            None => skip("no local postgres user owns a tablespace directory here"),
        },
    };
    let disk = match SmallDisk::mount(32 * 1024, owner) {
        Ok(d) => d,
        Err(e) => skip(&format!("cannot mount a small filesystem: {e}")),
    };
    let tablespace = match backend {
        Backend::Sqlite => {
            env.database_url = format!("sqlite://{}", disk.path.join("switchboard.db").display());
            None
        }
        Backend::Postgres => match Tablespace::create(&env, &disk.path).await {
            Ok(t) => Some(t),
            Err(e) => skip(&format!("cannot put the database on a small disk: {e}")),
        },
    };
    let placed = OnSmallDisk {
        env,
        _tablespace: tablespace,
        disk,
    };
    let (env, disk) = (&placed.env, &placed.disk);
    let seed = env.seed().await;
    let mut server = env
        .start(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "100000")])
        .await;
    send(&server, &seed.key, "before").await.expect(201);
    assert_eq!(ready(&server).await, 200);

    disk.fill();
    // Writes fail once what they need no longer fits (PostgreSQL first fills the free room of
    // its pages): the send is refused with 507 and nothing else.
    let mut failed = None;
    for i in 0..500 {
        let key = format!("full-{i}");
        let r = send(&server, &seed.key, &key).await;
        if r.status.as_u16() != 201 {
            failed = Some((key, r));
            break;
        }
    }
    let (failed_key, r) = failed.expect("a send fails once the disk is full");
    r.expect_error(507, "storage_full");
    // Another kind of write: the same.
    let endpoint =
        json!({"name": "crm", "url": "https://example.com/hook", "events": ["message.sent"]});
    let r = server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &seed.key,
            &endpoint,
        )
        .await;
    if r.status.as_u16() != 201 {
        r.expect_error(507, "storage_full");
    }
    // Operators see why: not ready, an error logged, a metric.
    assert_eq!(ready(&server).await, 503, "not ready while writes fail");
    assert_eq!(
        metric(&server, "switchboard_storage_writable").await,
        Some(0.0)
    );
    let full = metric(&server, "switchboard_storage_errors_total{kind=\"full\"}").await;
    assert!(full.is_some_and(|n| n >= 1.0), "{full:?}");
    let logs = server.logs();
    let logged = logs.lines().any(|l| {
        let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
        v["level"] == "ERROR" && l.contains("storage is full")
    });
    assert!(logged, "an error line says why: {logs}");
    // reads still work
    server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);

    disk.free();
    // Without a restart: ready again, and the failed send's retry with its key succeeds (its
    // claim was released; a retry that comes before the release is told to wait).
    eventually(Duration::from_secs(30), "ready again", async || {
        ready(&server).await == 200
    })
    .await;
    let mut retry = send(&server, &seed.key, &failed_key).await;
    let end = Instant::now() + Duration::from_secs(30);
    while retry.status.as_u16() == 409 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(200)).await;
        retry = send(&server, &seed.key, &failed_key).await;
    }
    let retry = retry.expect(201);
    let replay = send(&server, &seed.key, &failed_key).await.expect(201);
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_eq!(
        replay.body["message"]["uuid"],
        retry.body["message"]["uuid"]
    );
    send(&server, &seed.key, "after").await.expect(201);
    server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &seed.key,
            &endpoint,
        )
        .await
        .expect(201);
    assert_eq!(
        metric(&server, "switchboard_storage_writable").await,
        Some(1.0)
    );
    let logs = server.logs();
    assert!(!logs.contains("non-zero transaction depth"), "{logs}");
    assert!(!logs.contains("panicked"), "{logs}");
    server.kill().await;
}
