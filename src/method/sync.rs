//! The `sync` method: every I/O runs inline in the issuer when it is staged. The oracle the
//! other methods are checked against. See `docs/design.md`, "Methods".

use super::IoMethod;
use crate::handle::settings::IoMethodKind;
use crate::handle::shared::Shared;

pub(crate) struct SyncMethod;

impl IoMethod for SyncMethod {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::Sync
    }

    fn needs_synchronous_execution(&self, _shared: &Shared, _i: u32) -> bool {
        true
    }

    fn submit(&self, _shared: &Shared, _issuer: u32, _handles: &[u32]) {
        unreachable!("the sync method executes every I/O at staging; nothing is ever submitted");
    }
}
