//! `switchboard admin master-key ...`: generate a master key, and rotate the master key that
//! encrypts secrets at rest (provider configurations, webhook signing secrets).

use clap::Subcommand;
use serde_json::json;

use crate::app::{MASTER_KEY_CHECK, Runtime};
use crate::config::{MasterKeySource, env_name};
use crate::crypto::{MasterKey, SecretBox};
use crate::ops::OpError;

use super::output::Output;

#[derive(Subcommand, Debug)]
pub enum MasterKeyCommand {
    /// Print a new random master key (64 hex characters) without changing anything.
    Generate,
    /// Re-encrypt every stored secret under a new master key, in one transaction.
    ///
    /// Stop every `serve` instance first, and start them again with the new key: an instance
    /// that still holds the old key cannot read the re-encrypted secrets. With SQLite and the
    /// default `master.key` file, the file is replaced; with SWITCHBOARD_MASTER_KEY, set the new
    /// value in every instance's configuration.
    Rotate {
        /// The new key (64 hex characters); generated when omitted.
        #[arg(long, env = "SWITCHBOARD_NEW_MASTER_KEY", hide_env_values = true)]
        new_key: Option<String>,
    },
}

pub async fn run(rt: &Runtime, command: MasterKeyCommand) -> Result<Output, OpError> {
    match command {
        MasterKeyCommand::Generate => {
            let key = MasterKey::generate().to_hex();
            Ok(Output {
                json: json!({ "master_key": key }),
                text: key,
            })
        }
        MasterKeyCommand::Rotate { new_key } => rotate(rt, new_key).await,
    }
}

async fn rotate(rt: &Runtime, new_key: Option<String>) -> Result<Output, OpError> {
    let generated = new_key.is_none();
    let new_key = match new_key {
        Some(hex) => {
            MasterKey::from_hex(&hex).map_err(|e| OpError::invalid(format!("--new-key: {e}")))?
        }
        None => MasterKey::generate(),
    };
    let new_box = SecretBox::new(&new_key);
    if new_box.verify_key_check(
        &rt.store
            .get_setting(MASTER_KEY_CHECK)
            .await?
            .unwrap_or_default(),
    ) {
        return Err(OpError::invalid(
            "--new-key: this is already the database's master key",
        ));
    }

    // With a key file, stage the new key next to it before touching the database, so a crash
    // between the commit and the rename leaves the new key on disk.
    let staged = match &rt.config.master_key {
        MasterKeySource::File(path) => {
            let staged = path.with_extension("key.new");
            let _ = std::fs::remove_file(&staged);
            crate::crypto::write_private_file(
                &staged,
                format!("{}\n", new_key.to_hex()).as_bytes(),
            )
            .map_err(|e| OpError::invalid(format!("cannot write {}: {e}", staged.display())))?;
            Some((staged, path.clone()))
        }
        MasterKeySource::Configured(_) => None,
    };

    let old_box = rt.secrets.clone();
    let reseal_box = new_box.clone();
    let reseal = move |sealed: &[u8], aad: &[u8]| -> Result<Vec<u8>, String> {
        let plain = old_box.open(sealed, aad).map_err(|e| e.to_string())?;
        Ok(reseal_box.seal(&plain, aad))
    };
    let count = match rt
        .store
        .reseal_secrets(&reseal, MASTER_KEY_CHECK, &new_box.key_check())
        .await
    {
        Ok(n) => n,
        Err(e) => {
            if let Some((staged, _)) = &staged {
                let _ = std::fs::remove_file(staged);
            }
            return Err(e.into());
        }
    };

    match staged {
        Some((staged, path)) => {
            std::fs::rename(&staged, &path).map_err(|e| {
                OpError::invalid(format!(
                    "the secrets were re-encrypted, but {} could not replace {}: {e}; move it there by hand",
                    staged.display(),
                    path.display()
                ))
            })?;
            Ok(Output {
                json: json!({ "rotated": count, "key_file": path.display().to_string() }),
                text: format!(
                    "re-encrypted {count} secrets; the new master key is in {}",
                    path.display()
                ),
            })
        }
        None => {
            let hint = format!(
                "set {} to the new key on every instance and restart them",
                env_name("master_key")
            );
            let mut json = json!({ "rotated": count, "next_step": hint });
            if generated {
                json["new_master_key"] = json!(new_key.to_hex());
            }
            Ok(Output {
                text: if generated {
                    format!(
                        "re-encrypted {count} secrets under the new master key {}; {hint}",
                        new_key.to_hex()
                    )
                } else {
                    format!("re-encrypted {count} secrets; {hint}")
                },
                json,
            })
        }
    }
}
