use switchboard_domain::channel::validate_name;
use switchboard_domain::clock::Clock;
use switchboard_domain::organization::Organization;
use switchboard_store::Store;

use super::{OpError, OpResult};

/// Creates an organization. A second organization with the same name (ignoring case and
/// surrounding spaces) is refused as a conflict unless `force`: two tenants that look the same
/// in every listing are almost always a mistake.
pub async fn create_org(
    store: &dyn Store,
    clock: &dyn Clock,
    name: &str,
    force: bool,
) -> OpResult<Organization> {
    validate_name(name).map_err(|e| OpError::invalid_field("name", e))?;
    let name = name.trim();
    if !force
        && let Some(same) = store
            .list_orgs()
            .await?
            .into_iter()
            .find(|o| o.name.trim().to_lowercase() == name.to_lowercase())
    {
        return Err(OpError::conflict_field(
            "name",
            format!(
                "an organization named \"{}\" exists already (id {}); --force creates another",
                same.name, same.id
            ),
        ));
    }
    Ok(store.create_org(name, clock.now()).await?)
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
