//! The frame: a fixed 40-byte header, a body and raw bulk bytes.
//!
//! ```text
//! offset size field
//!      0    4 magic        "WFT1" (0x57465431), big-endian on the wire like every field
//!      4    2 version      protocol version of the body encoding
//!      6    2 opcode       operation, for counting and early rejection
//!      8    2 flags        REPLY, CALLBACK
//!     10    2 reserved     must be 0
//!     12    8 xid          request id, chosen by the side that sent the request
//!     20    4 body_len     <= MAX_BODY
//!     24    4 bulk_len     <= MAX_BULK
//!     28    4 body_crc     CRC32C of the body
//!     32    4 bulk_crc     CRC32C of the bulk bytes
//!     36    4 header_crc   CRC32C of bytes 0..36
//! ```
//!
//! Every length is checked against its bound before a byte of the body is read, so a peer
//! can never make the receiver allocate more than `MAX_BODY + MAX_BULK`.

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 40;
/// The magic that opens every frame.
pub const MAGIC: u32 = 0x5746_5431;
/// Largest body accepted (4 MiB): a readdir page or a configuration fits easily.
pub const MAX_BODY: u32 = 4 << 20;
/// Largest bulk payload accepted (64 MiB): sixteen times the default RPC size.
pub const MAX_BULK: u32 = 64 << 20;

/// Where received bulk starts in memory: a multiple of the page size, so that a server may
/// hand it to `O_DIRECT` I/O as it is (the OST does).
pub const BULK_ALIGN: usize = 4096;

/// An empty vector with room for `len` bytes starting at a [`BULK_ALIGN`] boundary, and
/// that boundary's index: the vector already holds the zeroed padding before it (under a
/// page). Append the bytes into its spare capacity (no zero fill), then take them with
/// `Bytes::from(vec).slice(pad..)`, which keeps the alignment.
pub fn aligned_vec(len: usize) -> (Vec<u8>, usize) {
    let mut v: Vec<u8> = Vec::with_capacity(len + BULK_ALIGN);
    let pad = v.as_ptr().align_offset(BULK_ALIGN).min(BULK_ALIGN);
    v.resize(pad, 0);
    (v, pad)
}

/// Header flag: this frame answers a request with the same xid.
pub const FLAG_REPLY: u16 = 1 << 0;
/// Header flag: the request travels server to client (a callback), with the server's xids.
pub const FLAG_CALLBACK: u16 = 1 << 1;
const KNOWN_FLAGS: u16 = FLAG_REPLY | FLAG_CALLBACK;

/// A decoded, validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Protocol version of the body.
    pub version: u16,
    /// Operation code.
    pub opcode: u16,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Request id.
    pub xid: u64,
    /// Body length in bytes.
    pub body_len: u32,
    /// Bulk length in bytes.
    pub bulk_len: u32,
    /// CRC32C of the body.
    pub body_crc: u32,
    /// CRC32C of the bulk.
    pub bulk_crc: u32,
}

/// Why a frame was refused. Any of these closes the connection: the stream cannot be
/// trusted to be in sync afterwards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The first four bytes are not the weftfs magic.
    #[error("bad frame magic {0:#010x}")]
    BadMagic(u32),
    /// The header checksum does not match.
    #[error("frame header checksum mismatch")]
    HeaderCrc,
    /// The peer speaks a version this build does not.
    #[error("unsupported protocol version {0}")]
    Version(u16),
    /// Unknown flag bits or a non-zero reserved field.
    #[error("unknown frame flags {0:#06x}")]
    Flags(u16),
    /// The body length exceeds [`MAX_BODY`].
    #[error("frame body of {0} bytes exceeds the limit")]
    BodyTooLarge(u32),
    /// The bulk length exceeds [`MAX_BULK`].
    #[error("frame bulk of {0} bytes exceeds the limit")]
    BulkTooLarge(u32),
    /// The body's checksum does not match.
    #[error("frame body checksum mismatch")]
    BodyCrc,
    /// The bulk data's checksum does not match: the data was damaged in flight.
    #[error("bulk data checksum mismatch")]
    BulkCrc,
}

/// Protocol versions this build can decode.
pub const SUPPORTED_VERSIONS: std::ops::RangeInclusive<u16> = 1..=1;

impl FrameHeader {
    /// A header for a body and bulk, computing both checksums.
    pub fn new(
        opcode: u16,
        flags: u16,
        xid: u64,
        body: &[u8],
        bulk: &[u8],
    ) -> Result<Self, FrameError> {
        let body_len = u32::try_from(body.len()).map_err(|_| FrameError::BodyTooLarge(u32::MAX))?;
        let bulk_len = u32::try_from(bulk.len()).map_err(|_| FrameError::BulkTooLarge(u32::MAX))?;
        if body_len > MAX_BODY {
            return Err(FrameError::BodyTooLarge(body_len));
        }
        if bulk_len > MAX_BULK {
            return Err(FrameError::BulkTooLarge(bulk_len));
        }
        Ok(Self {
            version: *SUPPORTED_VERSIONS.end(),
            opcode,
            flags,
            xid,
            body_len,
            bulk_len,
            body_crc: crate::checksum::crc32c(body),
            bulk_crc: crate::checksum::crc32c(bulk),
        })
    }

    /// The header's wire form.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.version.to_be_bytes());
        b[6..8].copy_from_slice(&self.opcode.to_be_bytes());
        b[8..10].copy_from_slice(&self.flags.to_be_bytes());
        // 10..12 reserved, zero.
        b[12..20].copy_from_slice(&self.xid.to_be_bytes());
        b[20..24].copy_from_slice(&self.body_len.to_be_bytes());
        b[24..28].copy_from_slice(&self.bulk_len.to_be_bytes());
        b[28..32].copy_from_slice(&self.body_crc.to_be_bytes());
        b[32..36].copy_from_slice(&self.bulk_crc.to_be_bytes());
        let crc = crate::checksum::crc32c(&b[..36]);
        b[36..40].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// Parses and validates a header: magic, checksum, version, flags and both bounds.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, FrameError> {
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        if crate::checksum::crc32c(&b[..36]) != u32_at(36) {
            return Err(FrameError::HeaderCrc);
        }
        let version = u16_at(4);
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(FrameError::Version(version));
        }
        let flags = u16_at(8);
        if flags & !KNOWN_FLAGS != 0 || u16_at(10) != 0 {
            return Err(FrameError::Flags(flags));
        }
        let body_len = u32_at(20);
        if body_len > MAX_BODY {
            return Err(FrameError::BodyTooLarge(body_len));
        }
        let bulk_len = u32_at(24);
        if bulk_len > MAX_BULK {
            return Err(FrameError::BulkTooLarge(bulk_len));
        }
        let xid = u64::from_be_bytes([b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19]]);
        Ok(Self {
            version,
            opcode: u16_at(6),
            flags,
            xid,
            body_len,
            bulk_len,
            body_crc: u32_at(28),
            bulk_crc: u32_at(32),
        })
    }

    /// Whether this frame is a reply.
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_REPLY != 0
    }

    /// Whether this frame belongs to a server-to-client callback exchange.
    pub fn is_callback(&self) -> bool {
        self.flags & FLAG_CALLBACK != 0
    }

    /// Checks a received body against the header's checksum.
    pub fn check_body(&self, body: &[u8]) -> Result<(), FrameError> {
        if crate::checksum::crc32c(body) == self.body_crc {
            Ok(())
        } else {
            Err(FrameError::BodyCrc)
        }
    }

    /// Checks received bulk bytes against the header's checksum.
    pub fn check_bulk(&self, bulk: &[u8]) -> Result<(), FrameError> {
        if crate::checksum::crc32c(bulk) == self.bulk_crc {
            Ok(())
        } else {
            Err(FrameError::BulkCrc)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_round_trips(opcode in any::<u16>(), flags in 0u16..4, xid in any::<u64>(),
                              body in proptest::collection::vec(any::<u8>(), 0..512),
                              bulk in proptest::collection::vec(any::<u8>(), 0..512)) {
            let h = FrameHeader::new(opcode, flags, xid, &body, &bulk).unwrap();
            let d = FrameHeader::decode(&h.encode()).unwrap();
            prop_assert_eq!(d, h);
            prop_assert!(d.check_body(&body).is_ok());
            prop_assert!(d.check_bulk(&bulk).is_ok());
        }

        #[test]
        fn arbitrary_header_bytes_never_panic(bytes in proptest::array::uniform32(any::<u8>()), tail in any::<[u8; 8]>()) {
            let mut b = [0u8; HEADER_LEN];
            b[..32].copy_from_slice(&bytes);
            b[32..].copy_from_slice(&tail);
            let _ = FrameHeader::decode(&b);
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocation() {
        let mut h = FrameHeader::new(1, 0, 7, b"x", b"").unwrap();
        h.body_len = MAX_BODY + 1;
        assert_eq!(
            FrameHeader::decode(&h.encode()),
            Err(FrameError::BodyTooLarge(MAX_BODY + 1))
        );
        h.body_len = 1;
        h.bulk_len = u32::MAX;
        assert_eq!(
            FrameHeader::decode(&h.encode()),
            Err(FrameError::BulkTooLarge(u32::MAX))
        );
    }

    #[test]
    fn corrupted_header_is_detected() {
        let h = FrameHeader::new(1, 0, 7, b"x", b"").unwrap();
        let mut b = h.encode();
        b[13] ^= 0x40;
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::HeaderCrc));
        b = h.encode();
        b[0] = b'X';
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(FrameError::BadMagic(_))
        ));
    }

    #[test]
    fn damaged_bulk_is_detected() {
        let h = FrameHeader::new(1, 0, 7, b"", b"payload").unwrap();
        assert_eq!(h.check_bulk(b"paylaod"), Err(FrameError::BulkCrc));
    }
}
