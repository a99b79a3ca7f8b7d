//! Feeds arbitrary bytes to the receive path every server and client runs: frame headers
//! with their bounds and checksums, payload reading, then body decoding for every message
//! type. Nothing may panic, hang or allocate beyond the frame limits.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_proto::handshake::{AuthChallenge, AuthHello, AuthProof, ServiceStats};
use weft_proto::mdt::{MdtReply, MdtRequest};
use weft_proto::mgs::{MgsCallback, MgsReply, MgsRequest};
use weft_proto::ost::{OstReply, OstRequest};
use weft_proto::{ConnectReply, ConnectRequest, RequestHeader, WireResult, decode};

fn decode_all(body: &[u8]) {
    let _ = decode::<ConnectRequest>(body);
    let _ = decode::<AuthHello>(body);
    let _ = decode::<WireResult<AuthChallenge>>(body);
    let _ = decode::<AuthProof>(body);
    let _ = decode::<WireResult<()>>(body);
    let _ = decode::<WireResult<ConnectReply>>(body);
    let _ = decode::<(RequestHeader, MdtRequest)>(body);
    let _ = decode::<WireResult<MdtReply>>(body);
    let _ = decode::<(RequestHeader, OstRequest)>(body);
    let _ = decode::<WireResult<OstReply>>(body);
    let _ = decode::<(RequestHeader, MgsRequest)>(body);
    let _ = decode::<WireResult<MgsReply>>(body);
    let _ = decode::<MgsCallback>(body);
    let _ = decode::<WireResult<ServiceStats>>(body);
}

/// Rewrites the magic and checksums of the frames in `data` so the fuzzer's other header
/// fields and bodies reach the deeper checks instead of failing the checksum every time.
fn with_valid_checksums(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0;
    while at + 40 <= out.len() {
        out[at..at + 4].copy_from_slice(&0x5746_5431u32.to_be_bytes());
        let body_len = u32::from_be_bytes([out[at + 20], out[at + 21], out[at + 22], out[at + 23]]) as usize % 4096;
        out[at + 20..at + 24].copy_from_slice(&(body_len as u32).to_be_bytes());
        let bulk_len = u32::from_be_bytes([out[at + 24], out[at + 25], out[at + 26], out[at + 27]]) as usize % 4096;
        out[at + 24..at + 28].copy_from_slice(&(bulk_len as u32).to_be_bytes());
        let body_start = at + 40;
        let body_end = (body_start + body_len).min(out.len());
        let body_crc = crc32c::crc32c(&out[body_start..body_end]);
        out[at + 28..at + 32].copy_from_slice(&body_crc.to_be_bytes());
        let header_crc = crc32c::crc32c(&out[at..at + 36]);
        out[at + 36..at + 40].copy_from_slice(&header_crc.to_be_bytes());
        at = body_end + bulk_len;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // Raw bodies, as a server sees them after a valid header.
    decode_all(data);
    let fixed;
    let data = if data.first().is_some_and(|b| b & 1 == 1) {
        fixed = with_valid_checksums(&data[1..]);
        &fixed[..]
    } else {
        data
    };

    // The byte stream, as a connection sees it: frames until the first error.
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else { return };
    rt.block_on(async {
        let mut stream = data;
        for _ in 0..64 {
            let header = match weft_rpc::conn::read_header(&mut stream).await {
                Ok(Some(h)) => h,
                _ => return,
            };
            match weft_rpc::conn::read_payload(&mut stream, header).await {
                Ok(frame) => decode_all(&frame.body),
                Err(_) => return,
            }
        }
    });
});
