//! Targets: registration (and moves to failover servers), heartbeats, and the liveness
//! check that marks silent targets inactive.

use super::{Liveness, MAX_FAILOVER_ADDRESSES, MAX_TARGET_INDEX, Mgs, err, unix_now};
use crate::names::check_address;
use crate::state::Record;
use std::collections::HashMap;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;
use uuid::Uuid;
use weft_proto::mgs::{MgsReply, TargetInfo, TargetState};
use weft_proto::{Errno, TargetId, TargetKind, WireResult};
/// How a registration of a known target (same UUID) from a new address moved it.
enum Move {
    /// To one of the failover addresses it had listed.
    Failover { from: String },
    /// To an address it had not listed.
    Elsewhere { from: String },
}

impl Move {
    fn from(old: &TargetInfo, to: &str) -> Self {
        let from = old.address.clone();
        match old.failover.iter().any(|a| a == to) {
            true => Move::Failover { from },
            false => Move::Elsewhere { from },
        }
    }
}

impl Mgs {
    /// Marks targets silent for longer than the heartbeat timeout inactive; returns how
    /// many changed. Runs periodically on its own; public for tests and tools.
    pub async fn check_liveness(&self) -> WireResult<usize> {
        let timeout = self.options.heartbeat_timeout;
        let silent = |rec: &Record, live: &mut HashMap<TargetId, Liveness>| -> Vec<TargetId> {
            rec.config
                .targets
                .iter()
                .filter(|t| t.state == TargetState::Active)
                .filter(|t| {
                    live.entry(t.id)
                        .or_insert_with(Liveness::now)
                        .heard
                        .elapsed()
                        > timeout
                })
                .map(|t| t.id)
                .collect()
        };
        let any = !silent(&self.state.lock(), &mut self.live.lock()).is_empty();
        if !any {
            return Ok(0);
        }
        self.mutate(|rec| {
            // Decide again under the writer lock: a heartbeat may have arrived meanwhile.
            let ids = silent(rec, &mut self.live.lock());
            for t in rec.config.targets.iter_mut().filter(|t| ids.contains(&t.id)) {
                tracing::warn!(target = %t.id, address = %t.address, "no heartbeat within {timeout:?}: marking inactive");
                t.state = TargetState::Inactive;
            }
            Ok((!ids.is_empty(), ids.len()))
        })
        .await
    }

    /// Registers target `id`, or moves it. The rule: a target is its UUID, written when
    /// it was formatted and kept in its data directory. A registration with the recorded
    /// UUID is accepted from any address and makes that address the target's (with the
    /// failover addresses it names): only a process holding the target's storage knows
    /// the UUID, and only one process at a time holds it (the OST directory's `flock`),
    /// so the latest registration is the server that has the storage. Refusing addresses
    /// outside the recorded list would only forbid moving a target without a failover
    /// list (an OSS restarted on another port or host), which has always worked. Another
    /// UUID under the same index is refused unless `replace` is set (a reformatted target).
    /// A move to one of the recorded failover addresses counts as a failover
    /// (`target_failovers`), any other move as `target_moves`.
    pub(super) async fn register(
        &self,
        id: TargetId,
        uuid: Uuid,
        address: String,
        failover: Vec<String>,
        replace: bool,
    ) -> WireResult<MgsReply> {
        if id.kind == TargetKind::Mgs {
            return Err(err(Errno::Inval, "the MGS does not register with itself"));
        }
        if id.index > MAX_TARGET_INDEX {
            return Err(err(
                Errno::Inval,
                format!(
                    "target index {} is above the maximum {MAX_TARGET_INDEX}",
                    id.index
                ),
            ));
        }
        check_address(&address)?;
        if failover.len() > MAX_FAILOVER_ADDRESSES {
            return Err(err(
                Errno::Inval,
                format!(
                    "{} failover addresses; at most {MAX_FAILOVER_ADDRESSES}",
                    failover.len()
                ),
            ));
        }
        for a in &failover {
            check_address(a)?;
        }
        // The target's own address is not a failover of itself, and each is tried once.
        let mut others: Vec<String> = Vec::with_capacity(failover.len());
        for a in failover {
            if a != address && !others.contains(&a) {
                others.push(a);
            }
        }
        let failover = others;
        let now = unix_now();
        let moved = self
            .mutate(|rec| {
                let targets = &mut rec.config.targets;
                let fresh = TargetInfo {
                    id,
                    uuid,
                    address: address.clone(),
                    state: TargetState::Active,
                    last_seen: now,
                    failover: failover.clone(),
                };
                match targets.iter_mut().find(|t| t.id == id) {
                    Some(t) if t.uuid == uuid || replace => {
                        let changed = t.uuid != uuid
                            || t.address != address
                            || t.failover != failover
                            || t.state != TargetState::Active;
                        if t.uuid != uuid {
                            tracing::warn!(target = %id, old = %t.uuid, new = %uuid, "target replaced");
                        }
                        let moved = (t.uuid == uuid && t.address != address)
                            .then(|| Move::from(t, &address));
                        *t = fresh;
                        Ok((changed, moved))
                    }
                    Some(t) => Err(err(
                        Errno::Exist,
                        format!(
                            "{id} is already registered with UUID {} at {}; this target has UUID {uuid} \
                             (a reformatted target must register with replace)",
                            t.uuid, t.address
                        ),
                    )),
                    None => {
                        let pos = targets.partition_point(|t| t.id < id);
                        targets.insert(pos, fresh);
                        tracing::info!(target = %id, %uuid, "target registered");
                        Ok((true, None))
                    }
                }
            })
            .await?;
        match moved {
            Some(Move::Failover { from }) => {
                self.counters.failovers.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target = %id, %from, to = %address, "target failed over to its failover server");
            }
            Some(Move::Elsewhere { from }) => {
                self.counters.moves.fetch_add(1, Ordering::Relaxed);
                tracing::info!(target = %id, %from, to = %address, "target moved to an address it did not list");
            }
            None => {}
        }
        self.live.lock().insert(id, Liveness::now());
        Ok(MgsReply::Registered(self.config()))
    }

    pub(super) async fn heartbeat(&self, id: TargetId, uuid: Uuid) -> WireResult<MgsReply> {
        let active = {
            let rec = self.state.lock();
            let t = rec
                .config
                .target(id)
                .ok_or_else(|| err(Errno::NoEnt, format!("{id} is not registered")))?;
            if t.uuid != uuid {
                return Err(err(
                    Errno::Stale,
                    format!(
                        "{id} is registered with UUID {}, not {uuid}: it was replaced",
                        t.uuid
                    ),
                ));
            }
            t.state == TargetState::Active
        };
        self.live.lock().insert(id, Liveness::now());
        if !active {
            self.mutate(|rec| {
                let t = rec
                    .config
                    .targets
                    .iter_mut()
                    .find(|t| t.id == id && t.uuid == uuid);
                match t {
                    Some(t) if t.state != TargetState::Active => {
                        tracing::info!(target = %id, "heard again: marking active");
                        t.state = TargetState::Active;
                        t.last_seen = unix_now();
                        Ok((true, ()))
                    }
                    _ => Ok((false, ())),
                }
            })
            .await?;
        }
        Ok(MgsReply::Ok)
    }
}

/// Periodically marks silent targets inactive, until the MGS is dropped.
pub(super) async fn liveness_task(mgs: Weak<Mgs>) {
    let period = match mgs.upgrade() {
        Some(m) => (m.options.heartbeat_timeout / 4).max(Duration::from_millis(10)),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(m) = mgs.upgrade() else { return };
        if let Err(e) = m.check_liveness().await {
            tracing::warn!(error = %e, "liveness check failed");
        }
    }
}
