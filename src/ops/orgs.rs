use switchboard_domain::channel::validate_name;
use switchboard_domain::clock::Clock;
use switchboard_domain::organization::Organization;
use switchboard_store::Store;

use super::{OpError, OpResult};

pub async fn create_org(
    store: &dyn Store,
    clock: &dyn Clock,
    name: &str,
) -> OpResult<Organization> {
    validate_name(name).map_err(|e| OpError::invalid_field("name", e))?;
    Ok(store.create_org(name.trim(), clock.now()).await?)
}

/// The organization, or a clear `NotFound`.
pub async fn require_org(store: &dyn Store, id: i64) -> OpResult<Organization> {
    store.get_org(id).await.map_err(|e| match e {
        switchboard_store::StoreError::NotFound => {
            OpError::not_found(format!("organization {id} does not exist"))
        }
        other => other.into(),
    })
}
