//! Timestamps as carried on the wire and stored on targets.

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// A point in time: seconds and nanoseconds since the Unix epoch (seconds may be negative).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Timestamp {
    /// Whole seconds since 1970-01-01T00:00:00Z.
    pub sec: i64,
    /// Nanoseconds within the second, `0..1_000_000_000`.
    pub nsec: u32,
}

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => Self {
                sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nsec: d.subsec_nanos(),
            },
            // A clock before 1970: clamp to the epoch rather than fail an operation.
            Err(_) => Self::default(),
        }
    }

    /// Builds a timestamp, rejecting an out-of-range nanosecond field.
    pub fn new(sec: i64, nsec: u32) -> Option<Self> {
        (nsec < 1_000_000_000).then_some(Self { sec, nsec })
    }
}
