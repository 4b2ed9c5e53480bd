//! `switchboard admin template ...`: the catalogue of provider templates of WhatsApp Cloud
//! channels (what conversation initiation and campaign sends may use).

use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use super::output::Output;
use crate::app::Runtime;
use crate::ops::templates::{CreateTemplate, UpdateTemplate};
use crate::ops::{self, OpError};
use crate::views::templates::TemplateOut;
use switchboard_domain::event::Actor;
use switchboard_store::TemplateRecord;

#[derive(Subcommand, Debug)]
pub enum TemplateCommand {
    /// Add a template to a whatsapp_cloud channel's catalogue.
    Create {
        /// The channel id.
        #[arg(long)]
        channel: i64,
        /// The template's name at the provider, e.g. order_update.
        #[arg(long)]
        name: String,
        /// Its language code, e.g. en_US.
        #[arg(long)]
        language: String,
        /// utility, marketing or authentication.
        #[arg(long)]
        category: String,
        /// approved (default), pending, rejected, paused or disabled.
        #[arg(long)]
        status: Option<String>,
        /// Create the template inactive (it cannot be sent until activated).
        #[arg(long)]
        inactive: bool,
        /// The WhatsApp component definitions as a JSON array, e.g.
        /// '[{"type":"BODY","text":"Hi {{1}}, your order {{2}} has shipped."}]'. The parameters
        /// a send must supply are derived from them; without them, parameters are not checked.
        #[arg(long, value_name = "JSON")]
        components: Option<String>,
        /// The provider's template id (matches provider status callbacks).
        #[arg(long, value_name = "ID")]
        provider_template_id: Option<String>,
    },
    /// Change a template's status, activity, category, components or provider id.
    Update {
        /// The template's UUID.
        uuid: String,
        /// approved, pending, rejected, paused or disabled.
        #[arg(long)]
        status: Option<String>,
        /// Activate the template.
        #[arg(long, conflicts_with = "inactive")]
        active: bool,
        /// Deactivate the template.
        #[arg(long)]
        inactive: bool,
        /// utility, marketing or authentication.
        #[arg(long)]
        category: Option<String>,
        /// New component definitions (JSON array; replaces the old ones).
        #[arg(long, value_name = "JSON")]
        components: Option<String>,
        #[arg(long, value_name = "ID")]
        provider_template_id: Option<String>,
    },
    /// List a channel's templates.
    List {
        /// The channel id.
        #[arg(long)]
        channel: i64,
    },
    /// Bring a whatsapp_cloud channel's catalogue in line with its WhatsApp Business Account
    /// (`waba_id` in the channel's provider settings): create new templates, update changed
    /// ones, disable those gone from the account.
    Sync {
        /// The channel id.
        #[arg(long)]
        channel: i64,
    },
}

fn components_arg(raw: Option<String>) -> Result<Option<Value>, OpError> {
    raw.map(|s| {
        serde_json::from_str(&s)
            .map_err(|e| OpError::invalid(format!("--components: not valid JSON: {e}")))
    })
    .transpose()
}

fn template_output(t: &TemplateRecord, verb: &str) -> Output {
    Output {
        json: serde_json::to_value(TemplateOut::from(t)).expect("templates serialize"),
        text: format!(
            "{verb} template {} `{}` ({}, {}, {}, {}) on channel {}",
            t.uuid,
            t.name,
            t.language,
            t.category,
            t.status,
            if t.active { "active" } else { "inactive" },
            t.channel_id
        ),
    }
}

pub async fn run(rt: &Runtime, command: TemplateCommand) -> Result<Output, OpError> {
    let store = rt.store.as_ref();
    let clock = rt.clock.as_ref();
    match command {
        TemplateCommand::Create {
            channel,
            name,
            language,
            category,
            status,
            inactive,
            components,
            provider_template_id,
        } => {
            let components = components_arg(components)?;
            let t = ops::templates::create_template(
                store,
                clock,
                CreateTemplate {
                    channel_id: channel,
                    name,
                    language,
                    category,
                    status,
                    active: !inactive,
                    components,
                    provider_template_id,
                },
                Actor::Admin,
            )
            .await?;
            Ok(template_output(&t, "created"))
        }
        TemplateCommand::Update {
            uuid,
            status,
            active,
            inactive,
            category,
            components,
            provider_template_id,
        } => {
            let components = components_arg(components)?;
            let uuid = Uuid::parse_str(uuid.trim())
                .map_err(|_| OpError::invalid("UUID: expected a template UUID"))?;
            let input = UpdateTemplate {
                category,
                status,
                active: if active {
                    Some(true)
                } else if inactive {
                    Some(false)
                } else {
                    None
                },
                components,
                provider_template_id,
            };
            if input.category.is_none()
                && input.status.is_none()
                && input.active.is_none()
                && input.components.is_none()
                && input.provider_template_id.is_none()
            {
                return Err(OpError::invalid(
                    "nothing to change: give --status, --active, --inactive, --category, --components or --provider-template-id",
                ));
            }
            let t =
                ops::templates::update_template(store, clock, uuid, input, Actor::Admin).await?;
            Ok(template_output(&t, "updated"))
        }
        TemplateCommand::Sync { channel } => {
            let providers = crate::providers::ProviderHub::new(rt.config.provider_timeout);
            let o =
                ops::template_sync::sync_channel_id(store, &rt.secrets, &providers, clock, channel)
                    .await?;
            Ok(Output {
                text: format!(
                    "channel {}: {} templates in the account; {} created, {} updated, {} unchanged, {} disabled, {} skipped{}",
                    o.channel_id,
                    o.remote,
                    o.created,
                    o.updated,
                    o.unchanged,
                    o.disabled,
                    o.skipped,
                    o.problems
                        .iter()
                        .map(|p| format!("\n  skipped: {p}"))
                        .collect::<String>()
                ),
                json: serde_json::to_value(&o).expect("outcomes serialize"),
            })
        }
        TemplateCommand::List { channel } => {
            let templates = ops::templates::list_templates(store, channel).await?;
            Ok(Output {
                text: templates
                    .iter()
                    .map(|t| {
                        format!(
                            "{}\t{}\t{}\t{}\t{}\t{}",
                            t.uuid,
                            t.name,
                            t.language,
                            t.category,
                            t.status,
                            if t.active { "active" } else { "inactive" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                json: json!({ "data": templates.iter().map(TemplateOut::from).collect::<Vec<_>>() }),
            })
        }
    }
}
