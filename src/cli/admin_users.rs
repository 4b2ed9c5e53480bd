//! `switchboard admin user ...`: members of organizations, their roles and permissions.

use clap::{ArgGroup, Subcommand};
use serde_json::json;

use crate::app::Runtime;
use crate::http::users::UserOut;
use crate::ops::users::{AddUser, PermissionChange};
use crate::ops::{self, OpError};
use switchboard_domain::event::Actor;
use switchboard_domain::permission::{Permission, Role};
use switchboard_store::{Member, MemberQuery};

use super::output::Output;

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a person to an organization with a role (the user is created when no user has the
    /// e-mail address, in any case).
    Add {
        /// Organization id.
        #[arg(long)]
        org: i64,
        /// E-mail address (unique without regard to case).
        #[arg(long)]
        email: String,
        /// Display name (replaces an existing user's name).
        #[arg(long)]
        name: Option<String>,
        /// owner, admin, manager, agent or viewer.
        #[arg(long)]
        role: String,
    },
    /// Change a member's role.
    Role {
        #[arg(long)]
        org: i64,
        #[arg(long)]
        email: String,
        /// owner, admin, manager, agent or viewer.
        #[arg(long)]
        role: String,
    },
    /// Grant or revoke one permission for a member regardless of the role, or reset it to what
    /// the role decides.
    #[command(group(ArgGroup::new("change").required(true).args(["grant", "revoke", "reset"])))]
    Permission {
        #[arg(long)]
        org: i64,
        #[arg(long)]
        email: String,
        /// Give the member this permission.
        #[arg(long, value_name = "PERMISSION")]
        grant: Option<String>,
        /// Take this permission away from the member.
        #[arg(long, value_name = "PERMISSION")]
        revoke: Option<String>,
        /// Remove the member's override of this permission.
        #[arg(long, value_name = "PERMISSION")]
        reset: Option<String>,
    },
    /// Remove a member from an organization (a user left in no organization is deleted).
    Remove {
        #[arg(long)]
        org: i64,
        #[arg(long)]
        email: String,
    },
    /// Show one member.
    Show {
        #[arg(long)]
        org: i64,
        #[arg(long)]
        email: String,
    },
    /// List an organization's members.
    List {
        #[arg(long)]
        org: i64,
    },
}

fn parse_role(raw: &str) -> Result<Role, OpError> {
    raw.parse::<Role>()
        .map_err(|e| OpError::invalid(format!("--role: {e}")))
}

fn parse_permission(flag: &str, raw: &str) -> Result<Permission, OpError> {
    raw.parse::<Permission>()
        .map_err(|e| OpError::invalid(format!("{flag}: {e}")))
}

fn user_output(m: &Member, text: String) -> Output {
    Output {
        json: serde_json::to_value(UserOut::from(m)).expect("users serialize"),
        text,
    }
}

fn describe(m: &Member) -> String {
    format!(
        "{} ({}) is {} of organization {} with {} permissions",
        m.user.email,
        m.user.uuid,
        m.role,
        m.org_id,
        m.effective_permissions().len()
    )
}

pub async fn run(rt: &Runtime, command: UserCommand) -> Result<Output, OpError> {
    let store = rt.store.as_ref();
    let clock = rt.clock.as_ref();
    match command {
        UserCommand::Add {
            org,
            email,
            name,
            role,
        } => {
            let role = parse_role(&role)?;
            let m = ops::users::add_user(
                store,
                clock,
                AddUser {
                    org_id: org,
                    email,
                    name,
                    role,
                },
                Actor::Admin,
            )
            .await
            .map_err(|e| match e {
                // The one conflict of adding a member: it is one already.
                OpError::Conflict { field, message } => OpError::Conflict {
                    field,
                    message: format!("{message}; use `admin user role` to change the role"),
                },
                e => e,
            })?;
            Ok(user_output(&m, format!("added {}", describe(&m))))
        }
        UserCommand::Role { org, email, role } => {
            let role = parse_role(&role)?;
            let m = ops::users::change_role(store, clock, org, &email, role, Actor::Admin).await?;
            Ok(user_output(&m, format!("now {}", describe(&m))))
        }
        UserCommand::Permission {
            org,
            email,
            grant,
            revoke,
            reset,
        } => {
            let (permission, change) = match (grant, revoke, reset) {
                (Some(p), None, None) => {
                    (parse_permission("--grant", &p)?, PermissionChange::Grant)
                }
                (None, Some(p), None) => {
                    (parse_permission("--revoke", &p)?, PermissionChange::Revoke)
                }
                (None, None, Some(p)) => {
                    (parse_permission("--reset", &p)?, PermissionChange::Reset)
                }
                _ => {
                    return Err(OpError::invalid(
                        "give exactly one of --grant, --revoke or --reset",
                    ));
                }
            };
            let m = ops::users::change_permission(
                store,
                clock,
                org,
                &email,
                permission,
                change,
                Actor::Admin,
            )
            .await?;
            Ok(user_output(&m, format!("now {}", describe(&m))))
        }
        UserCommand::Remove { org, email } => {
            let m = ops::users::remove_user(store, clock, org, &email, Actor::Admin).await?;
            let mut json = serde_json::to_value(UserOut::from(&m)).expect("users serialize");
            json["removed"] = json!(true);
            Ok(Output {
                json,
                text: format!(
                    "removed {} ({}) from organization {}",
                    m.user.email, m.user.uuid, m.org_id
                ),
            })
        }
        UserCommand::Show { org, email } => {
            let m = ops::users::get_user(store, org, &email).await?;
            Ok(user_output(&m, describe(&m)))
        }
        UserCommand::List { org } => list(store, org).await,
    }
}

/// Every member of the organization, oldest membership first (pages of 500).
async fn list(store: &dyn switchboard_store::Store, org: i64) -> Result<Output, OpError> {
    ops::orgs::require_org(store, org).await?;
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_members(
                org,
                &MemberQuery {
                    role: None,
                    after,
                    limit: 500,
                },
            )
            .await?;
        let done = page.len() < 500;
        after = page.last().map(|m| (m.created_at, m.membership_id));
        all.extend(page);
        if done {
            break;
        }
    }
    Ok(Output {
        text: all
            .iter()
            .map(|m| {
                format!(
                    "{}\t{}\t{}\t{}",
                    m.user.uuid,
                    m.user.email,
                    m.role,
                    m.user.name.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        json: json!({ "data": all.iter().map(UserOut::from).collect::<Vec<_>>() }),
    })
}
