//! The FUSE-over-io_uring ABI (`include/uapi/linux/fuse.h`, protocol 7.42; weftfs patch).
//!
//! A ring entry is two buffers the daemon registers: the header buffer
//! ([`fuse_uring_req_header`]) and the payload buffer. A request arrives split: its
//! `fuse_in_header` in `in_out`, the opcode's own struct (e.g. `fuse_write_in`) in `op_in`,
//! everything after it (names, write data) in the payload, whose length is
//! `ring_ent_in_out.payload_sz`. The reply goes back as the `fuse_out_header` in `in_out` and
//! the whole reply body in the payload, again with `payload_sz` set.

#![allow(non_camel_case_types)]

use std::mem::offset_of;
use std::mem::size_of;

/// `FUSE_IO_URING_CMD_REGISTER`: register an entry's buffers and fetch a request.
pub(crate) const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: commit a reply and fetch the next request.
pub(crate) const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `FUSE_URING_IN_OUT_HEADER_SZ`.
pub(crate) const IN_OUT_HEADER_SZ: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`.
pub(crate) const OP_IN_OUT_SZ: usize = 128;

/// `struct fuse_uring_ent_in_out`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct fuse_uring_ent_in_out {
    pub(crate) flags: u64,
    /// The id to commit the reply with (the kernel sets it to the request's `unique`).
    pub(crate) commit_id: u64,
    /// Bytes used in the payload buffer.
    pub(crate) payload_sz: u32,
    pub(crate) padding: u32,
    pub(crate) reserved: u64,
}

/// `struct fuse_uring_req_header`: an entry's header buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct fuse_uring_req_header {
    /// `fuse_in_header` of a request / `fuse_out_header` of a reply.
    pub(crate) in_out: [u8; IN_OUT_HEADER_SZ],
    /// The opcode's own struct of a request.
    pub(crate) op_in: [u8; OP_IN_OUT_SZ],
    pub(crate) ring_ent_in_out: fuse_uring_ent_in_out,
}

/// `struct fuse_uring_cmd_req`, in the 80-byte command area of a 128-byte SQE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct fuse_uring_cmd_req {
    pub(crate) flags: u64,
    /// The entry's request to commit (zero for a register).
    pub(crate) commit_id: u64,
    /// The queue (CPU index) the command is for.
    pub(crate) qid: u16,
    pub(crate) padding: [u8; 6],
}

/// Size of the header buffer.
pub(crate) const HEADER_SZ: usize = size_of::<fuse_uring_req_header>();
/// Where `ring_ent_in_out` starts in the header buffer.
pub(crate) const ENT_IN_OUT_OFF: usize = offset_of!(fuse_uring_req_header, ring_ent_in_out);
/// Where `commit_id` is in the header buffer.
pub(crate) const COMMIT_ID_OFF: usize =
    ENT_IN_OUT_OFF + offset_of!(fuse_uring_ent_in_out, commit_id);
/// Where `payload_sz` is in the header buffer.
pub(crate) const PAYLOAD_SZ_OFF: usize =
    ENT_IN_OUT_OFF + offset_of!(fuse_uring_ent_in_out, payload_sz);
/// Where `op_in` starts in the header buffer.
pub(crate) const OP_IN_OFF: usize = offset_of!(fuse_uring_req_header, op_in);

/// Size of `struct fuse_in_header`.
pub(crate) const IN_HEADER_SZ: usize = 40;
/// Size of `struct fuse_out_header`.
pub(crate) const OUT_HEADER_SZ: usize = 16;

impl fuse_uring_cmd_req {
    /// The 80-byte SQE command area holding this command.
    pub(crate) fn to_cmd_area(self) -> [u8; 80] {
        let mut cmd = [0u8; 80];
        cmd[0..8].copy_from_slice(&self.flags.to_ne_bytes());
        cmd[8..16].copy_from_slice(&self.commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        cmd
    }
}

/// Why a ring entry's request could not be rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitError {
    /// The header's `len` is less than the header, or says the opcode struct is larger
    /// than `op_in` or the payload is larger than `len` allows.
    BadLength { len: u32, payload_sz: u32 },
    /// `payload_sz` is larger than the payload buffer or the output buffer is too small.
    TooLarge,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_ne_bytes)
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_ne_bytes)
}

/// The commit id of the request in a header buffer.
pub(crate) fn commit_id(header: &[u8; HEADER_SZ]) -> u64 {
    u64_at(header, COMMIT_ID_OFF).unwrap_or(0)
}

/// The payload size recorded in a header buffer.
pub(crate) fn payload_sz(header: &[u8; HEADER_SZ]) -> u32 {
    u32_at(header, PAYLOAD_SZ_OFF).unwrap_or(0)
}

/// Rebuilds the request of a ring entry as `/dev/fuse` would have delivered it, contiguous
/// in `out`: `fuse_in_header`, the opcode struct, the payload. Returns its length.
///
/// The opcode struct's size is not sent; it is what `len` leaves after the header and the
/// payload (the kernel fills `op_in` with the request's first argument and the payload
/// with the rest).
pub(crate) fn reassemble(
    header: &[u8; HEADER_SZ],
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, SplitError> {
    let len = u32_at(header, 0).unwrap_or(0);
    let psz = payload_sz(header);
    let bad = SplitError::BadLength {
        len,
        payload_sz: psz,
    };
    let op_sz = (len as usize)
        .checked_sub(IN_HEADER_SZ)
        .and_then(|n| n.checked_sub(psz as usize))
        .ok_or(bad)?;
    if op_sz > OP_IN_OUT_SZ {
        return Err(bad);
    }
    let payload = payload.get(..psz as usize).ok_or(SplitError::TooLarge)?;
    let out = out.get_mut(..len as usize).ok_or(SplitError::TooLarge)?;
    let (h, rest) = out.split_at_mut(IN_HEADER_SZ);
    h.copy_from_slice(&header[..IN_HEADER_SZ]);
    let (op, data) = rest.split_at_mut(op_sz);
    op.copy_from_slice(&header[OP_IN_OFF..OP_IN_OFF + op_sz]);
    data.copy_from_slice(payload);
    Ok(len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_offsets_match_the_kernel_header() {
        // include/uapi/linux/fuse.h (7.42)
        assert_eq!(size_of::<fuse_uring_ent_in_out>(), 32);
        assert_eq!(offset_of!(fuse_uring_ent_in_out, commit_id), 8);
        assert_eq!(offset_of!(fuse_uring_ent_in_out, payload_sz), 16);
        assert_eq!(offset_of!(fuse_uring_ent_in_out, reserved), 24);
        assert_eq!(HEADER_SZ, 288);
        assert_eq!(OP_IN_OFF, 128);
        assert_eq!(ENT_IN_OUT_OFF, 256);
        assert_eq!(COMMIT_ID_OFF, 264);
        assert_eq!(PAYLOAD_SZ_OFF, 272);
        assert_eq!(size_of::<fuse_uring_cmd_req>(), 24);
        assert_eq!(offset_of!(fuse_uring_cmd_req, commit_id), 8);
        assert_eq!(offset_of!(fuse_uring_cmd_req, qid), 16);
        assert_eq!(
            IN_HEADER_SZ,
            size_of::<crate::ll::fuse_abi::fuse_in_header>()
        );
        assert_eq!(
            OUT_HEADER_SZ,
            size_of::<crate::ll::fuse_abi::fuse_out_header>()
        );
    }

    #[test]
    fn cmd_area_layout() {
        let c = fuse_uring_cmd_req {
            flags: 0,
            commit_id: 0x0102_0304_0506_0708,
            qid: 3,
            padding: [0; 6],
        }
        .to_cmd_area();
        assert_eq!(&c[8..16], &0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(&c[16..18], &3u16.to_ne_bytes());
        assert!(c[18..].iter().all(|b| *b == 0));
    }

    fn header(len: u32, opcode: u32, op: &[u8], payload_sz: u32, commit: u64) -> [u8; HEADER_SZ] {
        let mut h = [0u8; HEADER_SZ];
        h[0..4].copy_from_slice(&len.to_ne_bytes());
        h[4..8].copy_from_slice(&opcode.to_ne_bytes());
        h[8..16].copy_from_slice(&commit.to_ne_bytes());
        h[OP_IN_OFF..OP_IN_OFF + op.len()].copy_from_slice(op);
        h[PAYLOAD_SZ_OFF..PAYLOAD_SZ_OFF + 4].copy_from_slice(&payload_sz.to_ne_bytes());
        h[COMMIT_ID_OFF..COMMIT_ID_OFF + 8].copy_from_slice(&commit.to_ne_bytes());
        h
    }

    #[test]
    fn a_write_is_rebuilt_header_op_struct_payload() {
        let op = [7u8; 40]; // fuse_write_in
        let data = b"hello world";
        let len = (IN_HEADER_SZ + op.len() + data.len()) as u32;
        let h = header(len, 16, &op, data.len() as u32, 42);
        let mut payload = vec![0u8; 4096];
        payload[..data.len()].copy_from_slice(data);
        let mut out = vec![0u8; 8192];
        let n = reassemble(&h, &payload, &mut out).unwrap();
        assert_eq!(n, len as usize);
        assert_eq!(&out[..IN_HEADER_SZ], &h[..IN_HEADER_SZ]);
        assert_eq!(&out[IN_HEADER_SZ..IN_HEADER_SZ + 40], &op);
        assert_eq!(&out[IN_HEADER_SZ + 40..n], data);
        assert_eq!(commit_id(&h), 42);
        // And fuser parses it.
        let req = crate::ll::AnyRequest::try_from(&out[..n]).unwrap();
        assert_eq!(req.unique().0, 42);
    }

    #[test]
    fn a_lookup_has_an_empty_op_struct() {
        let name = b"file\0";
        let len = (IN_HEADER_SZ + name.len()) as u32;
        let h = header(len, 1, &[], name.len() as u32, 5);
        let mut payload = vec![0u8; 64];
        payload[..name.len()].copy_from_slice(name);
        let mut out = vec![0u8; 128];
        let n = reassemble(&h, &payload, &mut out).unwrap();
        assert_eq!(&out[IN_HEADER_SZ..n], name);
    }

    #[test]
    fn bad_lengths_are_refused_not_panics() {
        let mut out = vec![0u8; 1024];
        let payload = vec![0u8; 256];
        // len shorter than the header
        let h = header(10, 1, &[], 0, 1);
        assert!(matches!(
            reassemble(&h, &payload, &mut out),
            Err(SplitError::BadLength { .. })
        ));
        // payload larger than len allows
        let h = header(50, 1, &[], 20, 1);
        assert!(reassemble(&h, &payload, &mut out).is_err());
        // op struct larger than op_in
        let h = header((IN_HEADER_SZ + 200) as u32, 1, &[], 0, 1);
        assert!(reassemble(&h, &payload, &mut out).is_err());
        // payload larger than the payload buffer
        let h = header((IN_HEADER_SZ + 300) as u32, 1, &[], 300, 1);
        assert_eq!(
            reassemble(&h, &payload, &mut out),
            Err(SplitError::TooLarge)
        );
        // output too small
        let h = header((IN_HEADER_SZ + 100) as u32, 1, &[], 100, 1);
        assert_eq!(
            reassemble(&h, &payload, &mut out[..60]),
            Err(SplitError::TooLarge)
        );
    }
}
