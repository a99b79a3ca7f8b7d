//! Bulk data in and out of object files: buffered through the page cache, or around it
//! (`O_DIRECT`, see [`crate::direct`]) for large aligned I/O.

use super::FsStore;
use crate::direct::{is_refusal, read_direct};
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use weft_proto::ObjectId;

impl FsStore {
    /// Writes `data` at `offset` of the object. A write larger than
    /// `writethrough_max_io_mb` whose buffer, offset and length are aligned goes around the
    /// page cache (`O_DIRECT`), as a Lustre OSS writes large bulk straight to disk: the copy
    /// into the page cache is most of the CPU an OST spends on a write, the client keeps its
    /// own cache, and the OST holds no dirty data. Smaller writes, and every write on a file
    /// system that refuses `O_DIRECT`, are buffered. The kernel keeps the two kinds
    /// coherent (a direct write flushes and drops cached pages of its range). Durability is
    /// unchanged: `O_DIRECT` does not flush the device, so a sync still calls `fdatasync`.
    pub(super) fn write_data(
        &self,
        id: &ObjectId,
        file: &File,
        data: &[u8],
        offset: u64,
    ) -> io::Result<()> {
        if let Some(direct) = self.direct.for_write(&self.dir, id, data, offset) {
            match direct.write_all_at(data, offset) {
                Ok(()) => {
                    self.direct_writes.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                // Refused (alignment the device wants): the buffered write below writes
                // the whole range again, whatever part the direct one wrote.
                Err(e) if is_refusal(&e) => {
                    tracing::debug!(object = %id, "O_DIRECT write refused; buffered");
                }
                Err(e) => return Err(e),
            }
        }
        file.write_all_at(data, offset)
    }

    /// Reads `want` bytes at `offset` of the object (fewer at its end). A read larger than
    /// `readcache_max_io_mb` at an aligned offset goes around the page cache into a
    /// page-aligned buffer (see [`FsStore::write_data`]); smaller reads are cached, so
    /// small files and random readers keep the OST's page cache.
    pub(super) fn read_data(
        &self,
        id: &ObjectId,
        file: &File,
        offset: u64,
        want: usize,
    ) -> io::Result<Bytes> {
        if let Some(direct) = self.direct.for_read(&self.dir, id, offset, want) {
            match read_direct(&direct, offset, want) {
                Ok(b) => {
                    self.direct_reads.fetch_add(1, Ordering::Relaxed);
                    return Ok(b);
                }
                Err(e) if is_refusal(&e) => {
                    tracing::debug!(object = %id, "O_DIRECT read refused; buffered");
                }
                Err(e) => return Err(e),
            }
        }
        // Read into the buffer's spare capacity: zero-filling megabytes first would cost
        // as much as the read's own copy.
        let mut buf: Vec<u8> = Vec::with_capacity(want);
        while buf.len() < want {
            let at = offset + buf.len() as u64;
            let spare = rustix::buffer::spare_capacity(&mut buf);
            match rustix::io::pread(file, spare, at) {
                Ok(0) => break, // truncated under us: return what there is
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Bytes::from(buf))
    }
}
