//! Process wiring: open the database, check the master key, build the HTTP state, run the
//! server and the background tasks, and shut down gracefully.

use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, MasterKeySource, env_name};
use crate::crypto::{MasterKey, SecretBox};
use crate::http::rate_limit::RateLimiter;
use crate::http::{AppInner, AppState};
use crate::ops;
use crate::workers;
use switchboard_domain::clock::{SharedClock, SystemClock};
use switchboard_domain::event::Actor;
use switchboard_domain::scope::ScopeSet;
use switchboard_store::{self as store, SharedStore};

/// An opened, migrated database with its master key checked.
#[derive(Clone)]
pub struct Runtime {
    pub config: Arc<Config>,
    pub store: SharedStore,
    pub secrets: SecretBox,
    pub clock: SharedClock,
    /// A random id chosen when the database was created; namespaces shared state (Redis).
    pub deployment_id: String,
}

const DEPLOYMENT_ID: &str = "deployment_id";
pub const MASTER_KEY_CHECK: &str = "master_key_check";

impl Runtime {
    /// Connects, applies migrations and verifies the master key against the database.
    pub async fn open(config: Config) -> anyhow::Result<Runtime> {
        let store = store::connect(&config.database_url, config.database_max_connections)
            .await
            .with_context(|| {
                format!(
                    "{}: cannot open {}",
                    env_name("database_url"),
                    config.database_url.redacted()
                )
            })?;
        store
            .migrate()
            .await
            .context("cannot apply database migrations")?;
        if config.retention_partitions {
            store.partition_for_retention().await.with_context(|| {
                format!(
                    "{}: cannot partition the webhook tables",
                    env_name("retention_partitions")
                )
            })?;
        }
        let key = match &config.master_key {
            MasterKeySource::Configured(k) => k.clone(),
            MasterKeySource::File(path) => {
                let (key, created) =
                    MasterKey::load_or_create_file(path).map_err(anyhow::Error::msg)?;
                if created {
                    tracing::warn!(
                        path = %path.display(),
                        "generated a new master key for secrets at rest; back this file up with the database (or set {})",
                        env_name("master_key")
                    );
                }
                key
            }
        };
        let secrets = SecretBox::new(&key);
        let stored = store
            .init_setting(MASTER_KEY_CHECK, &secrets.key_check())
            .await?;
        if !secrets.verify_key_check(&stored) {
            bail!(
                "{}: this is not the master key the database was created with; its secrets cannot be decrypted. \
                 Use the original key (or master.key file) of this database.",
                env_name("master_key")
            );
        }
        let deployment_id = store
            .init_setting(DEPLOYMENT_ID, uuid::Uuid::new_v4().to_string().as_bytes())
            .await?;
        let deployment_id = String::from_utf8_lossy(&deployment_id).into_owned();
        Ok(Runtime {
            config: Arc::new(config),
            store,
            secrets,
            clock: Arc::new(SystemClock),
            deployment_id,
        })
    }
}

/// `switchboard serve`.
pub async fn serve(mut config: Config, demo: bool) -> anyhow::Result<()> {
    // The demo is a local loop: webhook endpoints on this machine work without a setting.
    config.webhook_allow_private_targets |= demo;
    warn_about_the_settings(&config);
    load_webhook_roots(&mut config)?;
    crate::trace::install_store_observer();
    if let Some(base) = &config.otlp_endpoint {
        crate::trace::export::init(base, std::time::Duration::from_secs(10))
            .context("SWITCHBOARD_OTLP_ENDPOINT: cannot set up span export")?;
        tracing::info!(collector = %base, "exporting spans over OTLP/HTTP");
    }
    let rt = Runtime::open(config).await?;
    warn_about_the_idempotency_lease(&rt.config);
    let listener = TcpListener::bind(&rt.config.listen)
        .await
        .with_context(|| {
            format!(
                "{}: cannot listen on {}",
                env_name("listen"),
                rt.config.listen
            )
        })?;
    let addr = listener.local_addr()?;

    let redis = match &rt.config.redis_url {
        Some(url) => Some(
            crate::shared_redis::SharedRedis::connect(url, &rt.deployment_id)
                .await
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let limiter = match &redis {
        Some(r) => RateLimiter::with_redis(rt.clock.clone(), r.clone()),
        None => RateLimiter::local(rt.clock.clone()),
    };
    let pacer = match &redis {
        Some(r) => crate::providers::pacing::Pacer::shared(rt.config.recipient_interval, r.clone()),
        None => crate::providers::pacing::Pacer::local(rt.config.recipient_interval),
    };
    let config_cache = Arc::new(crate::cache::ConfigCache::default());
    let recovery_wake = Arc::new(tokio::sync::Notify::new());
    let shutdown = CancellationToken::new();
    let state = AppState::new(AppInner {
        config: rt.config.clone(),
        store: rt.store.clone(),
        clock: rt.clock.clone(),
        secrets: rt.secrets.clone(),
        limiter: limiter.clone(),
        key_touches: Default::default(),
        sends_in_flight: Default::default(),
        config_cache: config_cache.clone(),
        providers: crate::providers::ProviderHub::new(rt.config.provider_timeout)
            .with_pacer(pacer)
            .with_media(
                crate::media::MediaFetcher::new(
                    crate::url_safety::Policy {
                        allow_private: rt.config.webhook_allow_private_targets,
                    },
                    rt.config.media_timeout,
                )
                .with_memory(rt.config.media_memory_mib),
            ),
        metrics: crate::telemetry::metrics_handle(),
        webhook_lookup: crate::url_safety::system_lookup(),
        recovery_wake: recovery_wake.clone(),
        shutdown: shutdown.clone(),
    });

    if demo {
        seed_demo(&rt, addr).await?;
    }
    // Phone-number metadata loads lazily and slowly: load it now, off the request path.
    tokio::task::spawn_blocking(switchboard_domain::phone::Phone::warm_up);

    let tasks = start_workers(
        &rt,
        &state,
        &limiter,
        redis.as_ref(),
        config_cache.clone(),
        recovery_wake,
        &shutdown,
    );

    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: no new connections; finishing requests in flight");
        signal.cancel();
    });

    tracing::info!(addr = %addr, backend = rt.store.backend(), shared_rate_limits = limiter.is_shared(), "switchboard is listening");
    println!("switchboard listening on http://{addr}");

    let app = crate::http::router(state);
    crate::http::server::serve(
        listener,
        app,
        rt.config.http_header_timeout,
        shutdown.clone(),
        rt.config.shutdown_grace,
    )
    .await;
    let grace = rt.config.shutdown_grace;
    tasks.close();
    // The webhook dispatcher waits `grace` for attempts in flight, then hands the rest back;
    // give it time to record that.
    let tasks_grace = grace + crate::webhooks::dispatcher::HANDBACK_TIME;
    if tokio::time::timeout(tasks_grace, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("background tasks still running after {tasks_grace:?}; exiting");
    }
    let _ = tokio::task::spawn_blocking(crate::trace::export::flush).await;
    tracing::info!("stopped");
    Ok(())
}

/// The authorities of `SWITCHBOARD_WEBHOOK_CA_CERTS`, loaded before anything starts: a file
/// that cannot be used stops `serve` with what is wrong with it.
fn load_webhook_roots(config: &mut Config) -> anyhow::Result<()> {
    if let Some(path) = &config.webhook_ca_certs {
        config.webhook_ca_roots =
            crate::webhooks::mtls::load_ca_certs(path).map_err(anyhow::Error::msg)?;
        tracing::info!(
            path = %path.display(),
            authorities = config.webhook_ca_roots.len(),
            "webhook deliveries trust extra certificate authorities"
        );
    }
    Ok(())
}

/// What runs beside the API, until `shutdown`: the webhook engines, the send and campaign
/// workers, and the periodic jobs of `crate::workers`.
fn start_workers(
    rt: &Runtime,
    state: &AppState,
    limiter: &Arc<RateLimiter>,
    redis: Option<&crate::shared_redis::SharedRedis>,
    config_cache: Arc<crate::cache::ConfigCache>,
    recovery_wake: Arc<tokio::sync::Notify>,
    shutdown: &CancellationToken,
) -> TaskTracker {
    let tasks = TaskTracker::new();
    let stop = || shutdown.clone();
    let config = &rt.config;
    tasks.spawn(
        crate::webhooks::dispatcher::Dispatcher::new(
            config,
            rt.store.clone(),
            rt.secrets.clone(),
            rt.clock.clone(),
            redis.cloned(),
        )
        .run(stop()),
    );
    tasks.spawn(
        crate::webhooks::recovery::RecoveryWorker {
            store: rt.store.clone(),
            clock: rt.clock.clone(),
            page_size: i64::from(config.recovery_page_size),
            page_interval: config.recovery_page_interval,
            poll_interval: config.webhook_poll_interval,
            wake: recovery_wake,
        }
        .run(stop()),
    );
    // The send worker: queued messages (batch items, paced and throttled sends).
    tasks.spawn(
        ops::sending::queued::SendWorker {
            store: rt.store.clone(),
            secrets: rt.secrets.clone(),
            clock: rt.clock.clone(),
            providers: state.providers.clone(),
            cache: config_cache.clone(),
            concurrency: 16,
            provider_timeout: config.provider_timeout + 2 * config.media_timeout,
            outcome_wait: config.send_outcome_wait,
        }
        .run(stop()),
    );
    // The campaign worker of the legacy `/api/campaigns` route (leased recipient claims).
    tasks.spawn(
        ops::campaigns::CampaignWorker {
            store: rt.store.clone(),
            secrets: rt.secrets.clone(),
            clock: rt.clock.clone(),
            providers: state.providers.clone(),
            config: config.clone(),
            cache: config_cache.clone(),
        }
        .run(stop()),
    );
    tasks.spawn(
        workers::retention::Purge::new(
            rt.store.clone(),
            rt.clock.clone(),
            config.delivery_retention,
        )
        .run(config.purge_interval, stop()),
    );
    tasks.spawn(workers::idempotency::run(
        rt.store.clone(),
        rt.clock.clone(),
        config.purge_interval,
        stop(),
    ));
    let idle_limits = limiter.clone();
    tasks.spawn(workers::every(config.purge_interval, stop(), move || {
        idle_limits.prune();
        std::future::ready(())
    }));
    tasks.spawn(workers::gauges::run(
        rt.store.clone(),
        rt.clock.clone(),
        stop(),
    ));
    if !config.template_sync_interval.is_zero() {
        tasks.spawn(workers::template_sync::run(
            rt.store.clone(),
            rt.secrets.clone(),
            state.providers.clone(),
            rt.clock.clone(),
            config.template_sync_interval,
            stop(),
        ));
    }
    tasks.spawn(crate::cache::run_poller(
        config_cache,
        rt.store.clone(),
        stop(),
    ));
    tasks
}

/// A lease shorter than a send can take lets a retry take a send in flight over: said at start-up.
fn warn_about_the_idempotency_lease(config: &Config) {
    if config.idempotency_lease <= config.provider_timeout {
        tracing::warn!(
            "{} ({:?}) is not longer than {} ({:?}): a send slower than the lease can be taken over by a retry with the same Idempotency-Key, and the provider then gets the message twice",
            env_name("idempotency_lease"),
            config.idempotency_lease,
            env_name("provider_timeout"),
            config.provider_timeout
        );
    }
    // A WhatsApp media send fetches and uploads the file before the send itself.
    let media_send = config.provider_timeout + 2 * config.media_timeout;
    if config.idempotency_lease <= media_send && config.idempotency_lease > config.provider_timeout
    {
        tracing::warn!(
            "{} ({:?}) is not longer than a WhatsApp media send may take ({} + 2 x {}: {:?}): a retry with the same Idempotency-Key can take a slow media send over, and the provider then gets the message twice",
            env_name("idempotency_lease"),
            config.idempotency_lease,
            env_name("provider_timeout"),
            env_name("media_timeout"),
            media_send
        );
    }
}

/// Environment variables that are no setting (a typo, most likely), and development-only
/// settings that are on: said at start-up.
fn warn_about_the_settings(config: &Config) {
    let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    for (var, closest) in crate::config::unknown_variables(vars.iter().map(String::as_str)) {
        match closest {
            Some(c) => tracing::warn!("{var} is not a setting and is ignored; did you mean {c}?"),
            None => tracing::warn!(
                "{var} is not a setting and is ignored (`switchboard config` lists the settings)"
            ),
        }
    }
    if config.webhook_allow_private_targets {
        tracing::warn!(
            "{} is on: webhook endpoints may target http://, any port, loopback and private addresses. \
             Use this for development and tests only.",
            env_name("webhook_allow_private_targets")
        );
    }
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// What `--demo` changes, said where the newcomer looks.
fn demo_banner() {
    println!(
        "--demo: webhook endpoints may target local http:// addresses (as with SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS=true): for development only, never in production.\n"
    );
}

/// `serve --demo`: on an empty database, a demo organization with a `sandbox` channel and a
/// wildcard key, printed with a ready `curl` line.
async fn seed_demo(rt: &Runtime, addr: std::net::SocketAddr) -> anyhow::Result<()> {
    let base = if addr.ip().is_unspecified() {
        format!("http://127.0.0.1:{}", addr.port())
    } else {
        format!("http://{addr}")
    };
    let orgs = rt.store.list_orgs().await?;
    if !orgs.is_empty() {
        println!(
            "--demo: the database already has data, so no demo data was created. Create a key with:\n  \
             cargo run --release -- admin key create --org {} --scopes '*'",
            orgs[0].id
        );
        demo_banner();
        return Ok(());
    }
    let org = ops::orgs::create_org(rt.store.as_ref(), rt.clock.as_ref(), "Demo", false).await?;
    let channel = ops::channels::create_channel(
        rt.store.as_ref(),
        &rt.secrets,
        rt.clock.as_ref(),
        ops::channels::CreateChannel {
            org_id: org.id,
            channel_type: switchboard_domain::channel::ChannelType::Sandbox,
            name: "Sandbox".into(),
            slug: Some("sandbox".into()),
            identifier: None,
            is_default: true,
            active: true,
            provider_config: None,
        },
        Actor::Admin,
    )
    .await?;
    let key = ops::keys::create_key(
        rt.store.as_ref(),
        rt.clock.as_ref(),
        ops::keys::CreateKey {
            org_id: org.id,
            name: Some("demo key".into()),
            scopes: Some(ScopeSet::Wildcard),
            expires_at: None,
            default_channel_id: None,
        },
        Actor::Admin,
    )
    .await?;
    println!(
        "Demo data created: organization {} (id {}), sandbox channel `{}` (id {}), and this API key (shown once):\n\n  {}\n\nTry it:\n\n  export KEY={}\n  curl -s {base}/api/v1/integrations/channels -H \"Authorization: Bearer $KEY\"\n",
        org.name, org.id, channel.slug, channel.id, key.token, key.token
    );
    demo_banner();
    Ok(())
}
