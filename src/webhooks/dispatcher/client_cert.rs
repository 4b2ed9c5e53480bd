//! The clients of https endpoints with `auth: {"type": "mtls"}`: each presents the endpoint's
//! client certificate and trusts what the shared client trusts. One client per endpoint, kept
//! while its sealed certificate and key stay the same (a `PUT` of `auth` replaces it), so
//! that its connections are reused like the shared client's.

use std::collections::HashMap;
use std::sync::Mutex;

use super::Dispatcher;
use super::attempt::{AttemptResult, client_builder};
use crate::webhooks::mtls;
use switchboard_domain::sealed::AAD_AUTH_SECRET;
use switchboard_store::webhooks::ClaimedEndpoint;

/// The mTLS clients, by endpoint id, with the sealed certificate and key they were built from.
#[derive(Default)]
pub(super) struct Clients {
    built: Mutex<HashMap<i64, (Vec<u8>, reqwest::Client)>>,
}

/// Whether an endpoint's `auth` (as stored) is `mtls`.
pub(super) fn is_mtls(auth: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(auth)
        .is_ok_and(|a| a.get("type").and_then(serde_json::Value::as_str) == Some("mtls"))
}

impl Dispatcher {
    /// The client of an attempt to `endpoint`: the shared one, or the endpoint's own when it
    /// authenticates with a client certificate.
    pub(super) fn client_for(
        &self,
        endpoint: &ClaimedEndpoint,
    ) -> Result<reqwest::Client, AttemptResult> {
        if !endpoint.controls.auth.as_deref().is_some_and(is_mtls) {
            return Ok(self.client.clone());
        }
        let unavailable = || {
            AttemptResult::error(
                "secret_unavailable",
                "The endpoint's client certificate could not be read; the attempt was not made."
                    .into(),
            )
        };
        let sealed = endpoint
            .controls
            .sealed_auth_secret
            .as_deref()
            .ok_or_else(unavailable)?;
        if let Some((from, client)) = self.client_certs.built.lock().unwrap().get(&endpoint.id) {
            if from.as_slice() == sealed {
                return Ok(client.clone());
            }
        }
        let pem = self.secrets.open(sealed, AAD_AUTH_SECRET).map_err(|e| {
            tracing::error!(endpoint_uuid = %endpoint.uuid, error = %e, "cannot open a client certificate");
            unavailable()
        })?;
        let failed = |e: String| {
            AttemptResult::error(
                "auth_failed",
                format!("The endpoint's client certificate cannot be used: {e}."),
            )
        };
        let identity = mtls::identity(&pem).map_err(failed)?;
        let client = client_builder(self.policy, self.timeout, &self.roots)
            .identity(identity)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        self.client_certs
            .built
            .lock()
            .unwrap()
            .insert(endpoint.id, (sealed.to_vec(), client.clone()));
        Ok(client)
    }
}
