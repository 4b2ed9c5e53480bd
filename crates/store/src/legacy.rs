//! The records of the routes under `/api` (see docs/legacy.md), under the name their callers
//! know. Each lives in the module of its aggregate: `page`, `contacts`, `groups`,
//! `canned_replies`, `campaigns` and `flows`; legacy webhook records are webhook endpoints
//! (`webhooks::EndpointRecord::legacy`).

pub use crate::campaigns::*;
pub use crate::canned_replies::*;
pub use crate::contacts::*;
pub use crate::flows::*;
pub use crate::groups::*;
pub use crate::page::*;
