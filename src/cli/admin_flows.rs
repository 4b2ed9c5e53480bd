//! `switchboard admin flow ...`: the flows of the legacy `/api/flows` routes.

use clap::Subcommand;
use serde_json::json;

use super::output::Output;
use crate::app::Runtime;
use crate::ops::OpError;
use crate::ops::flows::{FlowAction, create_flow};

#[derive(Subcommand, Debug)]
pub enum FlowCommand {
    /// Create a flow: a text, or a catalog template with parameters, on a channel.
    Create {
        /// The organization id.
        #[arg(long)]
        org: i64,
        /// The flow's name.
        #[arg(long)]
        name: String,
        /// The channel id (of the organization).
        #[arg(long)]
        channel: i64,
        /// The text to send.
        #[arg(long, conflicts_with_all = ["template_uuid", "language", "params"], required_unless_present = "template_uuid")]
        text: Option<String>,
        /// The catalog template to send (of the same channel).
        #[arg(long, value_name = "UUID")]
        template_uuid: Option<String>,
        /// The template language (default: the catalog template's).
        #[arg(long)]
        language: Option<String>,
        /// The template components with their parameters, as a JSON array.
        #[arg(long, value_name = "JSON")]
        params: Option<String>,
        /// Create the flow inactive (triggers are refused).
        #[arg(long)]
        inactive: bool,
    },
}

pub async fn run(rt: &Runtime, command: FlowCommand) -> Result<Output, OpError> {
    match command {
        FlowCommand::Create {
            org,
            name,
            channel,
            text,
            template_uuid,
            language,
            params,
            inactive,
        } => {
            let action = match (text, template_uuid) {
                (Some(t), _) => FlowAction::Text(t),
                (None, Some(u)) => FlowAction::Template {
                    template_uuid: u,
                    language,
                    params,
                },
                (None, None) => {
                    return Err(OpError::invalid("give --text or --template-uuid"));
                }
            };
            let flow = create_flow(
                rt.store.as_ref(),
                rt.clock.as_ref(),
                org,
                &name,
                channel,
                action,
                !inactive,
            )
            .await?;
            Ok(Output {
                json: json!({
                    "id": flow.uuid,
                    "uuid": flow.uuid,
                    "name": flow.name,
                    "channel_id": flow.channel_id,
                    "action": flow.action,
                    "active": flow.active,
                    "created_at": flow.created_at,
                }),
                text: format!("created flow {} ({})", flow.uuid, flow.name),
            })
        }
    }
}
