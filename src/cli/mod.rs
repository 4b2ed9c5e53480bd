//! The `switchboard` command line.

pub mod admin;
pub mod admin_flows;
pub mod admin_master_key;
pub mod admin_messaging;
pub mod admin_templates;
pub mod admin_users;
pub mod listen;
pub mod output;
pub mod wording;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;

#[derive(Parser, Debug)]
#[command(
    name = "switchboard",
    version,
    about = "Switchboard: the Integrations API v1 (scoped API keys, channel-aware messaging, signed webhooks).",
    long_about = "Switchboard implements the Integrations API v1: organization-scoped API keys with scopes, \
channel-aware message sending (WhatsApp Cloud API, Telegram, a sandbox), organization data reads, and signed \
webhooks with durable delivery, retries and a delivery ledger.\n\n\
Every setting is an environment variable SWITCHBOARD_* (see the README) and may also be given in a TOML file \
with --config; the environment wins.\n\n\
Quick start:  switchboard serve --demo",
    after_long_help = crate::config::help_text()
)]
pub struct Cli {
    /// A TOML configuration file (same settings as the SWITCHBOARD_* variables, lower-case, without the prefix).
    #[arg(long, global = true, value_name = "FILE", env = "SWITCHBOARD_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the API, the webhook dispatcher and the periodic purge (applies migrations first).
    Serve {
        /// On an empty database, create a demo organization, a `sandbox` channel and a wildcard
        /// key, and print the key with a ready curl command.
        #[arg(long)]
        demo: bool,
    },
    /// Apply the database migrations and exit.
    Migrate,
    /// Developer tools: organizations, channels, API keys and more, on the configured database.
    Admin(admin::AdminArgs),
    /// Forward the events of a running server to a local URL, signed with a session secret
    /// (the local webhook loop; needs a key with webhooks:read).
    Listen(listen::ListenArgs),
    /// Ask a running server to emit a typed sample of an event (`metadata.test: true`) to the
    /// event stream and to every endpoint subscribed to it (needs webhooks:write).
    Trigger(listen::TriggerArgs),
    /// Print every setting: its variable, its effective value (secrets hidden) and where the
    /// value comes from (env, file or default); then the defaults with their meanings.
    Config,
}

/// Parses the command line, runs it and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // One line: the reason. `--help` shows the rest.
            let rendered = e.render().to_string();
            let first = rendered
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments");
            eprintln!("{first}");
            return ExitCode::from(2);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let command = match cli.command {
        Command::Config => return print_config(cli.config.as_deref()),
        // Clients of a server: no database, no settings.
        Command::Listen(args) => return client_command(listen::run(args)),
        Command::Trigger(args) => return client_command(listen::trigger(args)),
        other => other,
    };
    let config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(command, config))
}

/// Runs a command that only talks to a server over HTTP.
fn client_command(work: impl Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(work),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, config: Config) -> ExitCode {
    match command {
        Command::Serve { demo } => {
            crate::telemetry::init_logging(&config);
            report(crate::app::serve(config, demo).await)
        }
        Command::Migrate => {
            crate::telemetry::init_logging(&config);
            report(crate::app::Runtime::open(config).await.map(|rt| {
                println!("migrations applied ({})", rt.store.backend());
            }))
        }
        Command::Config | Command::Listen(_) | Command::Trigger(_) => {
            unreachable!("handled before the configuration is loaded")
        }
        Command::Admin(args) => {
            // The admin tools print results on stdout and errors on stderr; logs only when asked.
            if std::env::var_os("SWITCHBOARD_LOG").is_some() {
                crate::telemetry::init_logging(&config);
            }
            admin::run(args, config).await
        }
    }
}

/// `switchboard config`.
fn print_config(file: Option<&std::path::Path>) -> ExitCode {
    match Config::effective(file) {
        Ok(rows) => {
            let width = rows.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
            for (name, value, source) in rows {
                println!("{name:width$}  {value}  ({source})");
            }
            println!();
            print!("{}", crate::config::help_text());
            for (var, closest) in crate::config::unknown_variables(
                std::env::vars()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str),
            ) {
                match closest {
                    Some(c) => println!("warning: {var} is not a setting (did you mean {c}?)"),
                    None => println!("warning: {var} is not a setting"),
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
