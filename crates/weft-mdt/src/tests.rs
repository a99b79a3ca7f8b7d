//! Tests that drive a whole MDT through [`crate::Mdt::execute`], without a network.

mod attr_ops;
mod harness;
mod hsm;
mod layout_changes;
mod lifecycle;
mod migrate_drop;
mod model;
mod namespace_ops;
mod readdir;
mod rename_lock;
mod resends;
mod store_failures;
