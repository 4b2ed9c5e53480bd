//! `switchboard admin contact ...` and `switchboard admin sandbox ...`: contacts, and the
//! sandbox's inbound messages and status changes (what a provider would report).

use clap::Subcommand;

use super::output::Output;
use crate::app::Runtime;
use crate::ops::{self, OpError};
use crate::views::messages::{ContactOut, MessageOut};
use switchboard_domain::Timestamp;
use switchboard_domain::message::MessageStatus;
use switchboard_store::MessageRecord;

#[derive(Subcommand, Debug)]
pub enum ContactCommand {
    /// Create a contact (the phone is normalized to E.164 and unique in the organization).
    Create {
        /// Owning organization id.
        #[arg(long)]
        org: i64,
        /// Phone number in international form, e.g. +4915123456789.
        #[arg(long)]
        phone: String,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Receive a text message on a sandbox channel, as if the contact had written.
    Inbound {
        /// Sandbox channel id.
        #[arg(long)]
        channel: i64,
        /// The sender's phone number (the contact is created if the organization has none).
        #[arg(long)]
        from: String,
        /// The message text.
        #[arg(long)]
        text: String,
        /// When the contact sent it (RFC 3339; default now; never later than now). The
        /// conversation's customer-service window runs from this time.
        #[arg(long, value_name = "RFC3339")]
        at: Option<String>,
    },
    /// Report a status change of an outbound message on a sandbox channel (forward only).
    Status {
        /// Message id.
        #[arg(long)]
        message: i64,
        /// delivered, read or failed.
        #[arg(long)]
        status: String,
        /// The failure reason, with --status failed.
        #[arg(long)]
        error: Option<String>,
    },
}

fn message_output(m: &MessageRecord, verb: &str) -> Output {
    Output {
        json: serde_json::to_value(MessageOut::from(m)).expect("messages serialize"),
        text: format!(
            "{verb} message {} ({} {}, {}) on channel {}",
            m.id, m.direction, m.message_type, m.status, m.channel.id
        ),
    }
}

pub async fn contact(rt: &Runtime, command: ContactCommand) -> Result<Output, OpError> {
    match command {
        ContactCommand::Create { org, phone, name } => {
            let c = ops::contacts::create_contact(
                rt.store.as_ref(),
                rt.clock.as_ref(),
                org,
                &phone,
                name.as_deref(),
            )
            .await?;
            Ok(Output {
                text: format!(
                    "created contact {} ({})",
                    c.uuid,
                    c.phone.as_ref().map(|p| p.as_str()).unwrap_or_default()
                ),
                json: serde_json::to_value(ContactOut::from(&c)).expect("contacts serialize"),
            })
        }
    }
}

pub async fn sandbox(rt: &Runtime, command: SandboxCommand) -> Result<Output, OpError> {
    match command {
        SandboxCommand::Inbound {
            channel,
            from,
            text,
            at,
        } => {
            let at = at
                .map(|s| {
                    Timestamp::parse_rfc3339(&s).map_err(|e| OpError::invalid(format!("--at: {e}")))
                })
                .transpose()?;
            let m = ops::receiving::sandbox_inbound(
                rt.store.as_ref(),
                rt.clock.as_ref(),
                channel,
                &from,
                &text,
                at,
            )
            .await?;
            Ok(message_output(&m, "received"))
        }
        SandboxCommand::Status {
            message,
            status,
            error,
        } => {
            let status = match status.as_str() {
                "delivered" => MessageStatus::Delivered,
                "read" => MessageStatus::Read,
                "failed" => MessageStatus::Failed,
                other => {
                    return Err(OpError::invalid(format!(
                        "--status: `{}` is not one of delivered, read, failed",
                        other.chars().take(40).collect::<String>()
                    )));
                }
            };
            if error.is_some() && status != MessageStatus::Failed {
                return Err(OpError::invalid("--error: only with --status failed"));
            }
            let m = ops::receiving::sandbox_status(
                rt.store.as_ref(),
                rt.clock.as_ref(),
                message,
                status,
                error,
            )
            .await?;
            Ok(message_output(&m, "updated"))
        }
    }
}
