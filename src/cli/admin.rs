//! `switchboard admin ...`: the developer tools. They work on the same database as a running
//! server. With `--json` each command prints exactly one JSON object on standard output;
//! without it, a readable line. Errors go to standard error, one line, with a non-zero exit.

use super::output::Output;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::app::Runtime;
use crate::config::Config;
use crate::http::channels::ChannelOut;
use crate::ops::{self, OpError};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelType;
use switchboard_domain::event::Actor;
use switchboard_domain::scope::{Scope, ScopeSet};
use switchboard_store::ApiKeyRecord;

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// Print exactly one JSON object on standard output.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Organizations: the tenants that own keys, channels and data.
    #[command(subcommand)]
    Org(OrgCommand),
    /// Messaging channels of an organization.
    #[command(subcommand)]
    Channel(ChannelCommand),
    /// API keys: create (shown once), list, revoke, rotate, import legacy keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// The master key that encrypts secrets at rest: generate, rotate.
    #[command(subcommand)]
    MasterKey(super::admin_master_key::MasterKeyCommand),
    /// Members of organizations: add, change role, grant/revoke/reset a permission, remove.
    #[command(subcommand)]
    User(super::admin_users::UserCommand),
    /// Contacts of an organization.
    #[command(subcommand)]
    Contact(super::admin_messaging::ContactCommand),
    /// The sandbox channel's provider side: inbound messages and status changes.
    #[command(subcommand)]
    Sandbox(super::admin_messaging::SandboxCommand),
    /// The template catalogue of WhatsApp Cloud channels.
    #[command(subcommand)]
    Template(super::admin_templates::TemplateCommand),
    /// Flows of the legacy /api/flows routes.
    #[command(subcommand)]
    Flow(super::admin_flows::FlowCommand),
}

#[derive(Subcommand, Debug)]
pub enum OrgCommand {
    /// Create an organization.
    Create {
        /// Display name.
        #[arg(long)]
        name: String,
        /// Create it even when an organization of the same name exists.
        #[arg(long)]
        force: bool,
    },
    /// List organizations.
    List,
}

#[derive(Subcommand, Debug)]
pub enum ChannelCommand {
    /// Create a channel.
    Create {
        /// Owning organization id.
        #[arg(long)]
        org: i64,
        /// whatsapp_cloud, telegram, sandbox or lead_ingestion.
        #[arg(long = "type", value_name = "TYPE")]
        channel_type: String,
        /// Display name.
        #[arg(long)]
        name: String,
        /// API-facing name (a-z, 0-9, '-', '_'); derived from the name when omitted.
        #[arg(long)]
        slug: Option<String>,
        /// Identifier assigned by the provider (for WhatsApp Cloud, the phone number id).
        #[arg(long)]
        identifier: Option<String>,
        /// Make this the organization's default channel.
        #[arg(long)]
        default: bool,
        /// Create the channel inactive.
        #[arg(long)]
        inactive: bool,
        /// Provider settings as a JSON object (tokens, secrets, base URL), encrypted at rest.
        #[arg(long, value_name = "JSON")]
        provider_config: Option<String>,
    },
    /// Change a channel.
    Update {
        /// Channel id.
        id: i64,
        /// Make this the organization's default channel.
        #[arg(long)]
        default: bool,
        /// Activate the channel.
        #[arg(long, conflicts_with = "inactive")]
        active: bool,
        /// Deactivate the channel.
        #[arg(long)]
        inactive: bool,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        slug: Option<String>,
        #[arg(long)]
        identifier: Option<String>,
        /// New provider settings as a JSON object (replaces the old ones).
        #[arg(long, value_name = "JSON")]
        provider_config: Option<String>,
    },
    /// List an organization's channels.
    List {
        #[arg(long)]
        org: i64,
    },
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create an API key; the key is printed once and only its SHA-256 is stored.
    Create {
        /// Owning organization id.
        #[arg(long)]
        org: i64,
        /// A label for people.
        #[arg(long)]
        name: Option<String>,
        /// Comma-separated scopes (e.g. channels:read,messages:write), or '*' for a key that may
        /// do everything. Required: a key never gets every scope by omission.
        #[arg(long)]
        scopes: Option<String>,
        /// When the key stops working (RFC 3339, e.g. 2027-01-01T00:00:00Z).
        #[arg(long, value_name = "RFC3339")]
        expires_at: Option<String>,
        /// The key's default channel for sends (must belong to the same organization).
        #[arg(long, value_name = "CHANNEL_ID")]
        default_channel: Option<i64>,
    },
    /// Import a pre-scope plaintext key: stored as its SHA-256, acts as a wildcard key until
    /// revoked or rotated.
    ImportLegacy {
        #[arg(long)]
        org: i64,
        /// The existing key value.
        #[arg(long)]
        key: String,
    },
    /// List an organization's keys (never the keys themselves).
    List {
        #[arg(long)]
        org: i64,
    },
    /// Revoke a key: it stops working at once.
    Revoke {
        /// Key id.
        id: i64,
    },
    /// Replace a key with a new one (same scopes and settings); the old key stops working.
    Rotate {
        /// Key id.
        id: i64,
    },
}

pub async fn run(args: AdminArgs, config: Config) -> ExitCode {
    let rt = match Runtime::open(config).await {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    // Changes to keys and channels reach every instance's caches within `cache::PROPAGATION`:
    // wait that long, so that when the command returns the change is in effect everywhere.
    let propagates = matches!(
        args.command,
        AdminCommand::Channel(ChannelCommand::Create { .. } | ChannelCommand::Update { .. })
            | AdminCommand::Key(
                KeyCommand::Create { .. }
                    | KeyCommand::ImportLegacy { .. }
                    | KeyCommand::Revoke { .. }
                    | KeyCommand::Rotate { .. }
            )
    );
    match execute(&rt, args.command).await {
        Ok(out) => {
            if propagates {
                tokio::time::sleep(crate::cache::PROPAGATION).await;
            }
            if args.json {
                println!("{}", out.json);
            } else {
                println!("{}", out.text);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", super::wording::error_line(&e));
            ExitCode::FAILURE
        }
    }
}

async fn execute(rt: &Runtime, command: AdminCommand) -> Result<Output, OpError> {
    match command {
        AdminCommand::Org(c) => org(rt, c).await,
        AdminCommand::Channel(c) => channel(rt, c).await,
        AdminCommand::Key(c) => key(rt, c).await,
        AdminCommand::MasterKey(c) => super::admin_master_key::run(rt, c).await,
        AdminCommand::User(c) => super::admin_users::run(rt, c).await,
        AdminCommand::Contact(c) => super::admin_messaging::contact(rt, c).await,
        AdminCommand::Sandbox(c) => super::admin_messaging::sandbox(rt, c).await,
        AdminCommand::Template(c) => super::admin_templates::run(rt, c).await,
        AdminCommand::Flow(c) => super::admin_flows::run(rt, c).await,
    }
}

async fn org(rt: &Runtime, command: OrgCommand) -> Result<Output, OpError> {
    match command {
        OrgCommand::Create { name, force } => {
            let org =
                ops::orgs::create_org(rt.store.as_ref(), rt.clock.as_ref(), &name, force).await?;
            Ok(Output {
                json: json!({ "id": org.id, "uuid": org.uuid, "name": org.name }),
                text: format!("created organization {} ({})", org.id, org.name),
            })
        }
        OrgCommand::List => {
            let orgs = rt.store.list_orgs().await?;
            Ok(Output {
                text: orgs
                    .iter()
                    .map(|o| format!("{}\t{}\t{}", o.id, o.uuid, o.name))
                    .collect::<Vec<_>>()
                    .join("\n"),
                json: json!({ "data": orgs.iter().map(|o| json!({ "id": o.id, "uuid": o.uuid, "name": o.name })).collect::<Vec<_>>() }),
            })
        }
    }
}

fn parse_json_arg(flag: &str, raw: Option<String>) -> Result<Option<Value>, OpError> {
    raw.map(|s| {
        serde_json::from_str(&s)
            .map_err(|e| OpError::invalid(format!("{flag}: not valid JSON: {e}")))
    })
    .transpose()
}

fn channel_output(c: &switchboard_domain::channel::Channel, verb: &str) -> Output {
    Output {
        json: serde_json::to_value(ChannelOut::from(c)).expect("channels serialize"),
        text: format!(
            "{verb} channel {} `{}` ({}, {})",
            c.id,
            c.slug,
            c.channel_type,
            c.status.as_str()
        ),
    }
}

async fn channel(rt: &Runtime, command: ChannelCommand) -> Result<Output, OpError> {
    match command {
        ChannelCommand::Create {
            org,
            channel_type,
            name,
            slug,
            identifier,
            default,
            inactive,
            provider_config,
        } => {
            let channel_type: ChannelType = channel_type
                .parse()
                .map_err(|e| OpError::invalid(format!("--type: {e}")))?;
            let provider_config = parse_json_arg("--provider-config", provider_config)?;
            let c = ops::channels::create_channel(
                rt.store.as_ref(),
                &rt.secrets,
                rt.clock.as_ref(),
                ops::channels::CreateChannel {
                    org_id: org,
                    channel_type,
                    name,
                    slug,
                    identifier,
                    is_default: default,
                    active: !inactive,
                    provider_config,
                },
                Actor::Admin,
            )
            .await?;
            Ok(channel_output(&c, "created"))
        }
        ChannelCommand::Update {
            id,
            default,
            active,
            inactive,
            name,
            slug,
            identifier,
            provider_config,
        } => {
            let provider_config = parse_json_arg("--provider-config", provider_config)?;
            let c = ops::channels::update_channel(
                rt.store.as_ref(),
                &rt.secrets,
                rt.clock.as_ref(),
                id,
                ops::channels::UpdateChannel {
                    name,
                    slug,
                    identifier,
                    active: if active {
                        Some(true)
                    } else if inactive {
                        Some(false)
                    } else {
                        None
                    },
                    make_default: default,
                    provider_config,
                },
                Actor::Admin,
            )
            .await?;
            Ok(channel_output(&c, "updated"))
        }
        ChannelCommand::List { org } => {
            ops::orgs::require_org(rt.store.as_ref(), org).await?;
            let channels = rt.store.list_channels(org).await?;
            Ok(Output {
                text: channels
                    .iter()
                    .map(|c| {
                        format!(
                            "{}\t{}\t{}\t{}\t{}{}",
                            c.id,
                            c.slug,
                            c.channel_type,
                            c.status.as_str(),
                            c.name,
                            if c.is_default { "\t(default)" } else { "" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                json: json!({ "data": channels.iter().map(ChannelOut::from).collect::<Vec<_>>() }),
            })
        }
    }
}

/// `revoked`, `expired` or `active` (as the API would treat the key now).
fn key_status(k: &ApiKeyRecord, now: Timestamp) -> &'static str {
    if k.revoked_at.is_some() {
        "revoked"
    } else if k.expires_at.is_some_and(|t| t <= now) {
        "expired"
    } else {
        "active"
    }
}

fn key_json(k: &ApiKeyRecord, now: Timestamp) -> Value {
    let status = key_status(k, now);
    json!({
        "id": k.id,
        "org_id": k.org_id,
        "name": k.name,
        "prefix": k.prefix,
        "scopes": k.effective_scopes(),
        "legacy": k.legacy,
        "default_channel_id": k.default_channel_id,
        "expires_at": k.expires_at,
        "revoked_at": k.revoked_at,
        "status": status,
        "created_at": k.created_at,
        "last_used_at": k.last_used_at,
    })
}

async fn key(rt: &Runtime, command: KeyCommand) -> Result<Output, OpError> {
    let store = rt.store.as_ref();
    let clock = rt.clock.as_ref();
    match command {
        KeyCommand::Create {
            org,
            name,
            scopes,
            expires_at,
            default_channel,
        } => {
            let Some(scopes) = scopes else {
                return Err(OpError::invalid(format!(
                    "--scopes is required: give the scopes the key needs (e.g. --scopes channels:read,messages:write), or --scopes '*' for a key that may do everything; the scopes are {}",
                    Scope::ALL
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let scopes = Some(
                ScopeSet::parse_list(&scopes)
                    .map_err(|e| OpError::invalid(format!("--scopes: {e}")))?,
            );
            let expires_at = expires_at
                .map(|s| {
                    Timestamp::parse_rfc3339(&s)
                        .map_err(|e| OpError::invalid(format!("--expires-at: {e}")))
                })
                .transpose()?;
            if let Some(at) = expires_at.filter(|at| *at <= clock.now()) {
                eprintln!(
                    "warning: --expires-at {at} is in the past; the key is created already expired"
                );
            }
            let created = ops::keys::create_key(
                store,
                clock,
                ops::keys::CreateKey {
                    org_id: org,
                    name,
                    scopes,
                    expires_at,
                    default_channel_id: default_channel,
                },
                Actor::Admin,
            )
            .await?;
            let k = &created.record;
            Ok(Output {
                json: json!({
                    "id": k.id,
                    "key": created.token,
                    "prefix": k.prefix,
                    "scopes": k.effective_scopes(),
                    "expires_at": k.expires_at,
                    "org_id": k.org_id,
                    "name": k.name,
                    "default_channel_id": k.default_channel_id,
                }),
                text: format!(
                    "created API key {} ({}) for organization {}; it is shown once:\n{}",
                    k.id, k.prefix, k.org_id, created.token
                ),
            })
        }
        KeyCommand::ImportLegacy { org, key } => {
            let k = ops::keys::import_legacy(store, clock, org, &key, Actor::Admin).await?;
            Ok(Output {
                json: json!({ "id": k.id, "prefix": k.prefix, "legacy": true, "scopes": k.effective_scopes() }),
                text: format!(
                    "imported legacy key {} ({}…) for organization {}; it acts as a wildcard key",
                    k.id, k.prefix, k.org_id
                ),
            })
        }
        KeyCommand::List { org } => {
            ops::orgs::require_org(store, org).await?;
            let keys = store.list_api_keys(org).await?;
            let now = rt.clock.now();
            Ok(Output {
                text: keys
                    .iter()
                    .map(|k| {
                        format!(
                            "{}\t{}\t{}\t{}\t{}",
                            k.id,
                            k.prefix,
                            k.name,
                            k.effective_scopes().names().join(","),
                            key_status(k, now)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                json: json!({ "data": keys.iter().map(|k| key_json(k, now)).collect::<Vec<_>>() }),
            })
        }
        KeyCommand::Revoke { id } => {
            let k = ops::keys::revoke_key(store, clock, id, Actor::Admin).await?;
            Ok(Output {
                json: json!({ "id": k.id, "revoked": true, "revoked_at": k.revoked_at }),
                text: format!("revoked API key {} ({})", k.id, k.prefix),
            })
        }
        KeyCommand::Rotate { id } => {
            let created = ops::keys::rotate_key(store, clock, id, Actor::Admin).await?;
            let k = &created.record;
            Ok(Output {
                json: json!({ "id": k.id, "key": created.token, "prefix": k.prefix, "replaces": id, "scopes": k.effective_scopes() }),
                text: format!(
                    "rotated API key {id}: the new key {} ({}) is shown once; the old key no longer works:\n{}",
                    k.id, k.prefix, created.token
                ),
            })
        }
    }
}
