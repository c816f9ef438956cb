//! FUSE over io_uring (Linux 6.14+, `enable_uring`): how a request and its reply lie in a
//! ring entry's two buffers, and the commands that register an entry and commit a reply.
//!
//! A ring entry is a 288-byte header buffer (`fuse_uring_req_header`: the `fuse_in_header`
//! or `fuse_out_header` in the first 128 bytes, the request's first argument, its
//! per-opcode struct, in the next 128, then `fuse_uring_ent_in_out`) and a payload buffer
//! (the request's other arguments, names and data; a reply's whole body). [`reassemble`]
//! lays a request out as `/dev/fuse` gives it, for [`crate::decode()`].

use super::{Opcode, IN_HEADER_LEN};

/// Size of `fuse_uring_req_header`.
pub const HEADER_BUFFER_LEN: usize = 288;
/// Offset of the first argument (`op_in`).
pub const OP_IN_OFFSET: usize = 128;
/// Room for the first argument.
pub const OP_IN_LEN: usize = 128;
/// Offset of `fuse_uring_ent_in_out` (`flags`, `commit_id`, `payload_sz`).
pub const ENT_IN_OUT_OFFSET: usize = 256;

/// `FUSE_IO_URING_CMD_REGISTER`: hand an entry's buffers to the kernel.
pub const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply is in the buffers; fetch the next.
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Why a ring entry's buffers are not a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The header buffer is shorter than `fuse_uring_req_header`.
    #[error("ring header buffer of {0} bytes")]
    ShortHeader(usize),
    /// The payload size the kernel wrote exceeds the payload buffer.
    #[error("payload of {size} bytes in a buffer of {buffer}")]
    PayloadTooLarge {
        /// `payload_sz`.
        size: u32,
        /// The buffer's length.
        buffer: usize,
    },
}

/// The size of the first argument (`in_args[0]`, the per-opcode struct) the kernel puts in
/// `op_in` for `op`; 0 where it sends none (names only: LOOKUP, UNLINK, ...; since 6.14
/// every request's first argument is that struct, empty or not).
pub fn op_in_len(op: Opcode) -> usize {
    use Opcode as O;
    match op {
        O::GETATTR
        | O::MKNOD
        | O::FSYNC
        | O::FSYNCDIR
        | O::CREATE
        | O::TMPFILE
        | O::BMAP
        | O::RENAME2 => 16,
        O::SETATTR => 88,
        O::MKDIR
        | O::RENAME
        | O::LINK
        | O::OPEN
        | O::OPENDIR
        | O::SETXATTR
        | O::GETXATTR
        | O::LISTXATTR
        | O::ACCESS
        | O::INTERRUPT
        | O::FORGET
        | O::BATCH_FORGET
        | O::SYNCFS => 8,
        O::READ | O::WRITE | O::READDIR | O::READDIRPLUS => 40,
        O::RELEASE | O::RELEASEDIR | O::FLUSH | O::POLL | O::LSEEK => 24,
        O::GETLK | O::SETLK | O::SETLKW => 48,
        O::FALLOCATE | O::IOCTL => 32,
        O::COPY_FILE_RANGE => 56,
        O::INIT => 64,
        _ => 0,
    }
}

/// `commit_id` and `payload_sz` of a request in `header`.
///
/// # Errors
/// [`RingError::ShortHeader`].
pub fn ent_in_out(header: &[u8]) -> Result<(u64, u32), RingError> {
    let f = header
        .get(ENT_IN_OUT_OFFSET..ENT_IN_OUT_OFFSET + 20)
        .ok_or(RingError::ShortHeader(header.len()))?;
    let commit_id = u64::from_le_bytes([f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15]]);
    let payload_sz = u32::from_le_bytes([f[16], f[17], f[18], f[19]]);
    Ok((commit_id, payload_sz))
}

/// Lays the request in a ring entry (`header`, `payload`) out in `out` as `/dev/fuse` gives
/// it: the `fuse_in_header` (its length set to the whole), the first argument, the
/// payload. Returns the entry's `commit_id`. An opcode the table does not know gets no
/// first argument; the decoder then finds its body short, or unknown.
///
/// # Errors
/// A header buffer too short, or a payload size past the payload buffer.
pub fn reassemble(header: &[u8], payload: &[u8], out: &mut Vec<u8>) -> Result<u64, RingError> {
    let (commit_id, payload_sz) = ent_in_out(header)?;
    let payload = payload
        .get(..payload_sz as usize)
        .ok_or(RingError::PayloadTooLarge {
            size: payload_sz,
            buffer: payload.len(),
        })?;
    let in_header = &header[..IN_HEADER_LEN];
    let opcode = u32::from_le_bytes([in_header[4], in_header[5], in_header[6], in_header[7]]);
    let op_in = Opcode::from_u32(opcode).map_or(0, op_in_len).min(OP_IN_LEN);
    out.clear();
    out.extend_from_slice(in_header);
    out.extend_from_slice(&header[OP_IN_OFFSET..OP_IN_OFFSET + op_in]);
    out.extend_from_slice(payload);
    let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
    out[0..4].copy_from_slice(&len.to_le_bytes());
    Ok(commit_id)
}

/// Writes a reply into a ring entry: the `fuse_out_header` (`error`, `unique`, the length)
/// at the front of `header`, the body into `payload`, and `payload_sz`. Returns false,
/// writing nothing, when the body does not fit the payload buffer or the header buffer is
/// short.
pub fn put_reply(
    header: &mut [u8],
    payload: &mut [u8],
    unique: u64,
    error: i32,
    body: &[&[u8]],
) -> bool {
    let len: usize = body.iter().map(|b| b.len()).sum();
    if header.len() < HEADER_BUFFER_LEN || len > payload.len() {
        return false;
    }
    let mut at = 0;
    for b in body {
        payload[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
    put_reply_header(header, unique, error, len)
}

/// Writes a reply's header into a ring entry whose body, `len` bytes, already lies at the
/// start of its payload buffer (read there straight from where it came from). Returns
/// false, writing nothing, when the header buffer is short.
pub fn put_reply_header(header: &mut [u8], unique: u64, error: i32, len: usize) -> bool {
    let Ok(len32) = u32::try_from(len) else {
        return false;
    };
    if header.len() < HEADER_BUFFER_LEN {
        return false;
    }
    header[..OP_IN_OFFSET].fill(0);
    header[0..4]
        .copy_from_slice(&((super::OUT_HEADER_LEN as u32).saturating_add(len32)).to_le_bytes());
    header[4..8].copy_from_slice(&error.to_le_bytes());
    header[8..16].copy_from_slice(&unique.to_le_bytes());
    header[ENT_IN_OUT_OFFSET + 16..ENT_IN_OUT_OFFSET + 20].copy_from_slice(&len32.to_le_bytes());
    true
}

/// `fuse_uring_cmd_req`, the 80-byte command of a REGISTER or COMMIT_AND_FETCH: the
/// entry's `commit_id` (0 to register) and its queue.
pub fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_le_bytes());
    c[16..18].copy_from_slice(&qid.to_le_bytes());
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_comes_back_whole() {
        let mut header = vec![0u8; HEADER_BUFFER_LEN];
        header[4..8].copy_from_slice(&16u32.to_le_bytes()); // WRITE
        header[8..16].copy_from_slice(&9u64.to_le_bytes());
        header[OP_IN_OFFSET + 16..OP_IN_OFFSET + 20].copy_from_slice(&3u32.to_le_bytes());
        header[ENT_IN_OUT_OFFSET + 8..ENT_IN_OUT_OFFSET + 16].copy_from_slice(&77u64.to_le_bytes());
        header[ENT_IN_OUT_OFFSET + 16..ENT_IN_OUT_OFFSET + 20].copy_from_slice(&3u32.to_le_bytes());
        let payload = b"abcdef";
        let mut out = Vec::new();
        assert_eq!(reassemble(&header, payload, &mut out), Ok(77));
        let req = crate::decode(&out).unwrap();
        assert_eq!(req.header.unique, 9);
        assert!(matches!(req.op, Ok(crate::Op::Write { data: b"abc", .. })));
        // A payload size past the buffer is refused, not read.
        header[ENT_IN_OUT_OFFSET + 16..ENT_IN_OUT_OFFSET + 20]
            .copy_from_slice(&100u32.to_le_bytes());
        assert!(reassemble(&header, payload, &mut out).is_err());
        assert!(reassemble(&header[..100], payload, &mut out).is_err());
    }

    #[test]
    fn replies_fit_or_are_refused() {
        let mut header = vec![0u8; HEADER_BUFFER_LEN];
        let mut payload = vec![0u8; 4];
        assert!(put_reply(&mut header, &mut payload, 5, 0, &[b"ab", b"cd"]));
        assert_eq!(&payload, b"abcd");
        assert_eq!(ent_in_out(&header).unwrap().1, 4);
        assert!(!put_reply(&mut header, &mut payload, 5, 0, &[b"abcde"]));
        // A body already in the payload buffer: only the header is written.
        assert!(put_reply_header(&mut header, 6, -2, 3));
        assert_eq!(ent_in_out(&header).unwrap().1, 3);
        assert_eq!(&header[0..4], &19u32.to_le_bytes());
        assert_eq!(&header[4..8], &(-2i32).to_le_bytes());
        assert_eq!(&header[8..16], &6u64.to_le_bytes());
        assert!(!put_reply_header(&mut header[..100], 6, 0, 3));
    }
}
