//! A replica whose node's disk is below its free-space reserve (the node says so every tick,
//! `set_disk_low`): in a cluster it stops taking new data, so that the reserve stays for what it
//! already holds, and the others go on while a quorum of them has space.
//!
//! - As a backup it takes no prepare past its head: it sends no prepare_ok for them, and the
//!   primary commits with the others. Retransmissions and repairs of ops it holds go on (they
//!   write over slots it has).
//! - As a primary it prepares no new request and steps down: it starts a view change, whose
//!   primary is another replica (`primary_index` moves with the view). Until a view is reached it
//!   answers as any replica in a view change does.
//! - Once space is back it asks the primary for what it missed after its head (`request_prepares
//!   _after_head`) and acknowledges again as it catches up.
//!
//! A single replica has no one to leave the writes to: its node refuses sends and creates at its
//! front door instead, and the writes that its groups still make (logins, offsets, deletes) go on.

use vireo_io::Io;

use super::{Replica, Status};
use crate::state_machine::StateMachine;

impl<S: StateMachine> Replica<S> {
    /// The node's disk fell below, or came back above, its reserve.
    pub fn set_disk_low(&mut self, io: &mut impl Io, low: bool) {
        if self.config.replica_count == 1 || self.disk_low == low {
            return;
        }
        self.disk_low = low;
        if low {
            self.step_down_for_disk(io);
        } else if std::mem::take(&mut self.disk_low_dropped) && self.status == Status::Normal && !self.is_primary() {
            self.request_prepares_after_head(io);
        }
    }

    /// Whether a prepare past the head is refused (and later asked for again).
    pub(super) fn refuses_new_prepare(&mut self) -> bool {
        if self.disk_low {
            self.disk_low_dropped = true;
        }
        self.disk_low
    }

    /// A primary on a disk below its reserve hands the view on (at once, and again at its commit
    /// timeout while it stays primary: a view change may come back to it).
    pub(super) fn step_down_for_disk(&mut self, io: &mut impl Io) -> bool {
        if !self.disk_low || self.status != Status::Normal || !self.is_primary() || self.failed {
            return false;
        }
        self.start_view_change(io, self.view.saturating_add(1));
        true
    }
}
