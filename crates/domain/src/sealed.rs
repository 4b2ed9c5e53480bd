//! The purposes that values sealed under the master key are bound to (associated data), so
//! that a ciphertext copied into another column does not decrypt.

/// Associated data for channel provider configurations.
pub const AAD_PROVIDER_CONFIG: &[u8] = b"channel.provider_config";
/// Associated data for webhook signing secrets.
pub const AAD_SIGNING_SECRET: &[u8] = b"webhook_endpoint.signing_secret";
/// Associated data for a broker endpoint's target URL (it holds the broker's credentials).
pub const AAD_TARGET_URL: &[u8] = b"webhook_endpoint.target_url";
/// Associated data for an endpoint's authentication secret (an OAuth2 client secret).
pub const AAD_AUTH_SECRET: &[u8] = b"webhook_endpoint.auth_secret";
