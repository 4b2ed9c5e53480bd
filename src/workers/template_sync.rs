//! Every `SWITCHBOARD_TEMPLATE_SYNC_INTERVAL` (the first run at start-up): each whatsapp_cloud
//! channel's template catalogue is synced from its WhatsApp Business Account. Instances may
//! each run it: a sync only brings the catalogue in line, so running it twice changes nothing
//! more.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::crypto::SecretBox;
use crate::ops;
use crate::providers::ProviderHub;
use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;

pub async fn run(
    store: SharedStore,
    secrets: SecretBox,
    providers: ProviderHub,
    clock: SharedClock,
    interval: Duration,
    stop: CancellationToken,
) {
    super::every(interval, stop, || async {
        match ops::template_sync::sync_all(store.as_ref(), &secrets, &providers, clock.as_ref())
            .await
        {
            Ok(outcomes) => {
                for o in outcomes
                    .iter()
                    .filter(|o| o.created + o.updated + o.disabled > 0)
                {
                    tracing::info!(
                        channel_id = o.channel_id,
                        created = o.created,
                        updated = o.updated,
                        disabled = o.disabled,
                        skipped = o.skipped,
                        "template catalogue synced"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "template sync failed; the next run tries again"),
        }
    })
    .await
}
