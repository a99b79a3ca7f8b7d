//! Space admission: how much of the store's free space writes and grants may use (all
//! but a reserve kept for the file system itself), and the object size limit.

use super::{MAX_OBJECT_SIZE, Ost};
use weft_proto::{Errno, WireError, WireResult};

/// Free space kept back from writes: 0.5% of the device, at most 1 GiB, so that the target
/// never fills up to the last block (which ext4 and its journal handle badly).
const RESERVE_PERMILLE: u64 = 5;
const RESERVE_MAX: u64 = 1 << 30;

impl Ost {
    /// Free bytes beyond the reserve kept for the file system itself.
    pub(super) fn free_beyond_reserve(&self) -> WireResult<u64> {
        let st = self.store.statfs()?;
        let unit = u64::from(st.bsize.max(1));
        let (avail, total) = (
            st.bavail.saturating_mul(unit),
            st.blocks.saturating_mul(unit),
        );
        Ok(avail.saturating_sub(reserve_of(total)))
    }

    /// Admits a write of `len` bytes from `conn`: its grant plus the space nobody holds.
    /// Conservative: an overwrite of allocated blocks is counted as if it needed new ones.
    pub(super) fn check_space(&self, conn: u64, len: u64) -> WireResult<()> {
        if len == 0 {
            return Ok(());
        }
        let free = self.free_beyond_reserve()?;
        if self.grants.admits(conn, len, free) {
            Ok(())
        } else {
            Err(WireError::new(
                Errno::NoSpc,
                format!(
                    "{}: write of {len} bytes does not fit in {free} bytes free ({} promised to clients)",
                    self.target_id(),
                    self.grants.total()
                ),
            ))
        }
    }
}

/// Checks that `[offset, offset + len)` stays within the largest object.
pub(super) fn check_end(offset: u64, len: u64) -> WireResult<u64> {
    offset
        .checked_add(len)
        .filter(|end| *end <= MAX_OBJECT_SIZE)
        .ok_or_else(|| {
            WireError::new(
                Errno::FBig,
                format!(
                    "write of {len} bytes at {offset} exceeds the object limit {MAX_OBJECT_SIZE}"
                ),
            )
        })
}

/// Space kept back from clients on a device of `total` bytes.
fn reserve_of(total: u64) -> u64 {
    (total / 1000 * RESERVE_PERMILLE).min(RESERVE_MAX)
}

/// Whether `len` bytes fit in `avail` bytes of a `total`-byte device, beyond the reserve.
#[cfg(test)]
pub(super) fn fits(len: u64, avail: u64, total: u64) -> bool {
    avail.saturating_sub(reserve_of(total)) >= len
}
