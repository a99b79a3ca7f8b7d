//! Every integration test of the `weft` binary, in one test binary (one build and one link
//! instead of one per file). Each module is the tests of one area; they start real server
//! processes on loopback (`weft_testkit`) and real FUSE mounts (`fuse_common`).
//!
//! Run one area with its module name as the filter, e.g.
//! `cargo test -p weft-cli --test it fuse_posix::` (or `./test.sh -p weft-cli --test it
//! dne::`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// Helpers shared by several areas.
mod dne_common;
mod exerciser;
mod fuse_common;
mod support;

// The areas.
mod admin;
mod advise;
mod auth;
mod campaign;
mod cli;
mod client_io;
mod compress;
mod dne;
mod dne_crash;
mod dne_moves;
mod evict;
mod failover;
mod fuse_admin;
mod fuse_client_params;
mod fuse_dne;
mod fuse_locks;
mod fuse_posix;
mod fuse_sparse;
mod fuse_uring;
mod grants;
mod hostile;
mod lab;
mod locks;
mod metrics;
mod namespace;
mod nodemap;
mod pcc;
mod posix_suites;
mod repo;
mod repo_ahead;
mod repo_bench;
mod repo_faults;
mod repo_hsm;
mod repo_s3;
mod repo_tiering;
mod restart;
mod tls;

pub use support::bin;
