//! Values the conformance tests share.

use switchboard_domain::Timestamp;
use switchboard_domain::channel::{ChannelStatus, ChannelType};
use switchboard_store::NewChannel;
pub use switchboard_store::no_effects;
use uuid::Uuid;

pub fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_786_000_000_000 + ms)
}

pub fn new_channel(org_id: i64, slug: Option<&str>, name: &str, is_default: bool) -> NewChannel {
    NewChannel {
        org_id,
        uuid: Uuid::now_v7(),
        slug: slug.map(str::to_owned),
        channel_type: ChannelType::Sandbox,
        name: name.to_owned(),
        identifier: format!("id-{name}"),
        status: ChannelStatus::Active,
        is_default,
        provider_config: Some(vec![1, 2, 3]),
        now: t(0),
    }
}
