//! Whole frames: `size[4] type[1] tag[2] body`, with the size checks every reader needs.

use crate::codec::{DecodeError, Field, Reader};
use crate::messages::{Rmessage, Rread, Tfsync, Tmessage, Twrite, Twriteattr};
use crate::types::{Fid, Tag};

/// Bytes of `size[4] type[1] tag[2]`.
pub const HEADER_LEN: usize = 7;
/// Bytes of an Rread before its data: header and `count[4]`.
pub const RREAD_HEADER_LEN: usize = HEADER_LEN + 4;
/// Bytes of a Twrite before its data: header, `fid[4] offset[8] count[4]`.
pub const TWRITE_HEADER_LEN: usize = HEADER_LEN + 16;
/// Linux's I/O header allowance: it never asks for more than msize - 24 bytes per read/write.
pub const IOHDRSZ: usize = 24;
/// crossfs's default msize: 1 MiB of payload per read or write plus one page for headers
/// (a read or write carries at most msize - [`IOHDRSZ`] bytes, so an msize of exactly 1 MiB
/// would cut every large request to 1 MiB - 24 and the FUSE side to 255 pages). The Linux
/// kernel client caps itself at 1 MiB on socket transports and gets exactly that.
pub const DEFAULT_MSIZE: u32 = (1 << 20) + 4096;
/// The smallest msize worth negotiating: room for a header plus a useful payload. Linux's
/// lower bound is 4096 as well.
pub const MIN_MSIZE: u32 = 4096;

/// A decoded request frame. `msg` is an error when the header was sound but the body was not,
/// so the tag can still be answered.
#[derive(Debug, PartialEq, Eq)]
pub struct Tframe {
    /// The request's tag.
    pub tag: Tag,
    /// The message type byte, kept for counters and logs even when the body failed.
    pub msg_type: u8,
    /// The request, or why its body could not be decoded.
    pub msg: Result<Tmessage, DecodeError>,
}

/// A decoded reply frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Rframe {
    /// The tag of the request this answers.
    pub tag: Tag,
    /// The reply.
    pub msg: Rmessage,
}

/// Checks the `size` field read from the first four bytes of a frame against `max` (the msize
/// in force, or the server's maximum before negotiation) and returns the whole frame's length.
/// Call this before allocating a buffer for the rest of the frame.
pub fn check_frame_size(size: u32, max: u32) -> Result<usize, DecodeError> {
    if (size as usize) < HEADER_LEN {
        return Err(DecodeError::TooSmall(size));
    }
    if size > max {
        return Err(DecodeError::TooLarge { size, max });
    }
    Ok(size as usize)
}

/// Splits a complete frame into (type, tag, body), checking the size field against `buf`.
fn split_header(buf: &[u8]) -> Result<(u8, Tag, &[u8]), DecodeError> {
    let mut r = Reader::new(buf);
    let size = u32::decode(&mut r)?;
    if (size as usize) < HEADER_LEN {
        return Err(DecodeError::TooSmall(size));
    }
    if size as usize != buf.len() {
        return Err(DecodeError::SizeMismatch {
            declared: size,
            actual: buf.len(),
        });
    }
    let ty = u8::decode(&mut r)?;
    let tag = Tag::decode(&mut r)?;
    Ok((ty, tag, r.take(r.remaining())?))
}

/// Decodes one complete request frame (size field included).
///
/// `Err` means the frame itself is unusable (a framing error: close the connection); a body
/// that fails to decode is reported inside [`Tframe::msg`] with its tag.
pub fn decode_tframe(buf: &[u8]) -> Result<Tframe, DecodeError> {
    let (msg_type, tag, mut body) = split_header(buf)?;
    // Some clients send Tfsync without the datasync word; treat it as datasync = 0.
    let padded;
    if msg_type == Tfsync::TYPE && body.len() == 4 {
        padded = [body, &[0u8; 4]].concat();
        body = &padded;
    }
    let msg = decode_all(body, |r| Tmessage::decode_body(msg_type, r));
    Ok(Tframe { tag, msg_type, msg })
}

/// Decodes one complete reply frame (size field included). Any error is fatal for the reply.
pub fn decode_rframe(buf: &[u8]) -> Result<Rframe, DecodeError> {
    let (ty, tag, body) = split_header(buf)?;
    let msg = decode_all(body, |r| Rmessage::decode_body(ty, r))?;
    Ok(Rframe { tag, msg })
}

fn decode_all<T>(
    body: &[u8],
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut r = Reader::new(body);
    let msg = f(&mut r)?;
    match r.remaining() {
        0 => Ok(msg),
        n => Err(DecodeError::TrailingBytes(n)),
    }
}

/// Appends a frame: reserves the size field, writes type and tag, lets `body` write, then
/// patches the size.
fn encode_frame(ty: u8, tag: Tag, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(ty);
    tag.encode(out);
    body(out);
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_le_bytes());
}

impl Tmessage {
    /// Appends this request as a complete frame with `tag`.
    pub fn encode(&self, tag: Tag, out: &mut Vec<u8>) {
        encode_frame(self.msg_type(), tag, out, |out| self.encode_body(out));
    }
}

impl Rmessage {
    /// Appends this reply as a complete frame with `tag`.
    pub fn encode(&self, tag: Tag, out: &mut Vec<u8>) {
        encode_frame(self.msg_type(), tag, out, |out| self.encode_body(out));
    }
}

/// Appends a Twrite frame whose payload is borrowed, sparing the copy into a [`Twrite`].
pub fn encode_twrite(tag: Tag, fid: Fid, offset: u64, data: &[u8], out: &mut Vec<u8>) {
    encode_write_frame(Twrite::TYPE, tag, (fid, offset, data), out);
}

/// As [`encode_twrite`], for a Twriteattr (laid out the same).
pub fn encode_twriteattr(tag: Tag, fid: Fid, offset: u64, data: &[u8], out: &mut Vec<u8>) {
    encode_write_frame(Twriteattr::TYPE, tag, (fid, offset, data), out);
}

fn encode_write_frame(ty: u8, tag: Tag, (fid, offset, data): (Fid, u64, &[u8]), out: &mut Vec<u8>) {
    encode_frame(ty, tag, out, |out| {
        fid.encode(out);
        offset.encode(out);
        (data.len() as u32).encode(out);
        out.extend_from_slice(data);
    });
}

/// Everything of a Twrite or Twriteattr before its data: a writer may send these
/// [`TWRITE_HEADER_LEN`] bytes and the data from where it lies (one `writev`), and a reader
/// may take the data out of the stream itself (a splice), without the frame ever being
/// whole in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteHead {
    /// [`Twrite::TYPE`] or [`Twriteattr::TYPE`].
    pub msg_type: u8,
    /// The request's tag.
    pub tag: Tag,
    /// The open fid written to.
    pub fid: Fid,
    /// Where in the file.
    pub offset: u64,
    /// Bytes of data that follow the head.
    pub count: u32,
}

impl WriteHead {
    /// The head's bytes: the size field counts the `count` bytes of data behind it (a
    /// count too large for any msize saturates it, and the peer refuses the frame).
    pub fn encode(&self) -> [u8; TWRITE_HEADER_LEN] {
        let size = self.count.saturating_add(TWRITE_HEADER_LEN as u32);
        let mut out = [0u8; TWRITE_HEADER_LEN];
        out[0..4].copy_from_slice(&size.to_le_bytes());
        out[4] = self.msg_type;
        out[5..7].copy_from_slice(&self.tag.0.to_le_bytes());
        out[7..11].copy_from_slice(&self.fid.0.to_le_bytes());
        out[11..19].copy_from_slice(&self.offset.to_le_bytes());
        out[19..23].copy_from_slice(&self.count.to_le_bytes());
        out
    }

    /// The head of a well-formed Twrite or Twriteattr: its type is one of the two and its
    /// size field is exactly the head and `count` bytes of data. `None` for anything else,
    /// which is then read and decoded as a whole frame (whose decoder reports what is
    /// wrong with it).
    pub fn decode(head: &[u8; TWRITE_HEADER_LEN]) -> Option<WriteHead> {
        let u32_at =
            |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let msg_type = head[4];
        if msg_type != Twrite::TYPE && msg_type != Twriteattr::TYPE {
            return None;
        }
        let count = u32_at(19);
        if count.checked_add(TWRITE_HEADER_LEN as u32) != Some(u32_at(0)) {
            return None;
        }
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&head[11..19]);
        Some(WriteHead {
            msg_type,
            tag: Tag(u16::from_le_bytes([head[5], head[6]])),
            fid: Fid(u32_at(7)),
            offset: u64::from_le_bytes(offset),
            count,
        })
    }
}

/// Appends an Rread frame whose payload `fill` writes in place (e.g. straight from `pread`),
/// sparing a copy. `fill` gets a zeroed buffer of `max_data` bytes and returns how many it
/// used; on error nothing is appended.
pub fn encode_rread_with<E>(
    tag: Tag,
    max_data: usize,
    out: &mut Vec<u8>,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
) -> Result<(), E> {
    let start = out.len();
    out.resize(start + RREAD_HEADER_LEN + max_data, 0);
    let n = match fill(&mut out[start + RREAD_HEADER_LEN..]) {
        Ok(n) => n.min(max_data),
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    out.truncate(start + RREAD_HEADER_LEN + n);
    let size = (RREAD_HEADER_LEN + n) as u32;
    out[start..start + 4].copy_from_slice(&size.to_le_bytes());
    out[start + 4] = Rread::TYPE;
    out[start + 5..start + 7].copy_from_slice(&tag.0.to_le_bytes());
    out[start + 7..start + 11].copy_from_slice(&(n as u32).to_le_bytes());
    Ok(())
}

/// The protocol name of any 9P2000.L type number, request or reply.
pub fn message_name(ty: u8) -> Option<&'static str> {
    Tmessage::name_of(ty).or_else(|| Rmessage::name_of(ty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::*;
    use crate::types::*;
    use proptest::prelude::*;

    /// Arbitrary values may break limits the encoder trusts its callers to keep.
    fn within_limits_t(mut m: Tmessage) -> Tmessage {
        match &mut m {
            Tmessage::Walk(Twalk { wnames, .. })
            | Tmessage::Walkgetattr(Twalkgetattr { wnames, .. })
            | Tmessage::Walkopen(Twalkopen { wnames, .. })
            | Tmessage::Walkread(Twalkread { wnames, .. })
            | Tmessage::Walkreaddirattr(Twalkreaddirattr { wnames, .. })
            | Tmessage::Readfiles(Treadfiles { names: wnames, .. }) => {
                wnames.truncate(MAX_WALK_ELEMENTS)
            }
            _ => {}
        }
        m
    }

    fn within_limits_r(mut m: Rmessage) -> Rmessage {
        match &mut m {
            Rmessage::Walk(Rwalk { wqids })
            | Rmessage::Walkgetattr(Rwalkgetattr { wqids, .. })
            | Rmessage::Walkopen(Rwalkopen { wqids, .. })
            | Rmessage::Walkread(Rwalkread { wqids, .. })
            | Rmessage::Walkreaddirattr(Rwalkreaddirattr { wqids, .. }) => {
                wqids.truncate(MAX_WALK_ELEMENTS)
            }
            _ => {}
        }
        m
    }

    proptest! {
        #[test]
        fn a_write_head_is_the_frames_first_bytes_and_decodes_back(
            tag in any::<Tag>(),
            fid in any::<Fid>(),
            offset in any::<u64>(),
            data in proptest::collection::vec(any::<u8>(), 0..300),
            attr in any::<bool>(),
        ) {
            let mut frame = Vec::new();
            let msg_type = if attr {
                encode_twriteattr(tag, fid, offset, &data, &mut frame);
                Twriteattr::TYPE
            } else {
                encode_twrite(tag, fid, offset, &data, &mut frame);
                Twrite::TYPE
            };
            let head = WriteHead { msg_type, tag, fid, offset, count: data.len() as u32 };
            prop_assert_eq!(&frame[..TWRITE_HEADER_LEN], &head.encode()[..]);
            let bytes: [u8; TWRITE_HEADER_LEN] = frame[..TWRITE_HEADER_LEN].try_into().unwrap();
            prop_assert_eq!(WriteHead::decode(&bytes), Some(head));
        }

        #[test]
        fn a_write_head_that_lies_or_is_no_write_is_refused(
            bytes in any::<[u8; TWRITE_HEADER_LEN]>(),
        ) {
            let size = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
            let count = u32::from_le_bytes(bytes[19..23].try_into().unwrap());
            let write = bytes[4] == Twrite::TYPE || bytes[4] == Twriteattr::TYPE;
            let sound = write && u64::from(count) + TWRITE_HEADER_LEN as u64 == u64::from(size);
            prop_assert_eq!(WriteHead::decode(&bytes).is_some(), sound);
        }

        #[test]
        fn every_request_round_trips(m in any::<Tmessage>(), tag in any::<Tag>()) {
            let m = within_limits_t(m);
            let mut buf = Vec::new();
            m.encode(tag, &mut buf);
            let f = decode_tframe(&buf).unwrap();
            prop_assert_eq!(f.tag, tag);
            prop_assert_eq!(f.msg_type, m.msg_type());
            prop_assert_eq!(f.msg, Ok(m));
        }

        #[test]
        fn every_reply_round_trips(m in any::<Rmessage>(), tag in any::<Tag>()) {
            let m = within_limits_r(m);
            let mut buf = Vec::new();
            m.encode(tag, &mut buf);
            let f = decode_rframe(&buf).unwrap();
            prop_assert_eq!(f.tag, tag);
            prop_assert_eq!(f.msg, m);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_tframe(&bytes);
            let _ = decode_rframe(&bytes);
        }

        #[test]
        fn every_truncation_of_a_valid_frame_is_an_error(m in any::<Tmessage>(), cut in any::<prop::sample::Index>()) {
            let m = within_limits_t(m);
            let mut buf = Vec::new();
            m.encode(Tag(1), &mut buf);
            let cut = cut.index(buf.len());
            // Keep the size field honest about the shorter buffer, so the body decoder (not the
            // size check) must notice the missing bytes.
            let mut short = buf[..cut].to_vec();
            if short.len() >= 4 {
                let len = short.len() as u32;
                short[..4].copy_from_slice(&len.to_le_bytes());
            }
            match decode_tframe(&short) {
                Err(_) => {}
                // A Tfsync cut to its 4-byte short form is legal.
                Ok(Tframe { msg: Ok(Tmessage::Fsync(_)), .. }) => {}
                Ok(f) => prop_assert!(f.msg.is_err(), "decoded a truncated frame: {:?}", f),
            }
        }

        #[test]
        fn borrowed_twrite_matches_owned(data in proptest::collection::vec(any::<u8>(), 0..300), off in any::<u64>()) {
            let mut a = Vec::new();
            encode_twrite(Tag(9), Fid(3), off, &data, &mut a);
            let mut b = Vec::new();
            Tmessage::Write(Twrite { fid: Fid(3), offset: off, data: Data(data) }).encode(Tag(9), &mut b);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn in_place_rread_matches_owned(data in proptest::collection::vec(any::<u8>(), 0..300), extra in 0usize..50) {
            let mut a = vec![0xAA]; // existing bytes must be preserved
            encode_rread_with::<()>(Tag(4), data.len() + extra, &mut a, |buf| {
                buf[..data.len()].copy_from_slice(&data);
                Ok(data.len())
            }).unwrap();
            let mut b = vec![0xAA];
            Rmessage::Read(Rread { data: Data(data) }).encode(Tag(4), &mut b);
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn body_error_keeps_the_tag() {
        // Twalk with a truncated body.
        let buf = [7 + 3, 0, 0, 0, Twalk::TYPE, 0x34, 0x12, 1, 2, 3];
        let f = decode_tframe(&buf).unwrap();
        assert_eq!(f.tag, Tag(0x1234));
        assert!(matches!(f.msg, Err(DecodeError::Truncated { .. })));
    }

    #[test]
    fn unknown_type_keeps_the_tag() {
        let buf = [7, 0, 0, 0, 99, 5, 0];
        let f = decode_tframe(&buf).unwrap();
        assert_eq!(f.tag, Tag(5));
        assert_eq!(f.msg, Err(DecodeError::UnknownType(99)));
    }

    #[test]
    fn replies_are_not_requests() {
        let mut buf = Vec::new();
        Rmessage::Clunk(Rclunk {}).encode(Tag(1), &mut buf);
        assert_eq!(
            decode_tframe(&buf).unwrap().msg,
            Err(DecodeError::UnknownType(Rclunk::TYPE))
        );
    }

    #[test]
    fn short_tfsync_means_datasync_zero() {
        let buf = [11, 0, 0, 0, Tfsync::TYPE, 1, 0, 7, 0, 0, 0];
        let f = decode_tframe(&buf).unwrap();
        assert_eq!(
            f.msg,
            Ok(Tmessage::Fsync(Tfsync {
                fid: Fid(7),
                datasync: 0
            }))
        );
    }

    #[test]
    fn size_checks() {
        assert_eq!(check_frame_size(6, 8192), Err(DecodeError::TooSmall(6)));
        assert_eq!(
            check_frame_size(8193, 8192),
            Err(DecodeError::TooLarge {
                size: 8193,
                max: 8192
            })
        );
        assert_eq!(check_frame_size(7, 8192), Ok(7));
        let buf = [8, 0, 0, 0, Tclunk::TYPE, 0, 0];
        assert!(matches!(
            decode_tframe(&buf),
            Err(DecodeError::SizeMismatch { .. })
        ));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut buf = Vec::new();
        Tmessage::Clunk(Tclunk { fid: Fid(1) }).encode(Tag(2), &mut buf);
        buf.push(0);
        let len = buf.len() as u32;
        buf[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(
            decode_tframe(&buf).unwrap().msg,
            Err(DecodeError::TrailingBytes(1))
        );
    }

    #[test]
    fn names_cover_both_directions() {
        assert_eq!(message_name(110), Some("Twalk"));
        assert_eq!(message_name(111), Some("Rwalk"));
        assert_eq!(message_name(7), Some("Rlerror"));
        assert_eq!(message_name(6), None);
    }

    /// A Tversion laid out by hand, as Linux sends it (msize 512 KiB).
    #[test]
    fn decodes_linux_tversion() {
        let mut buf = vec![21, 0, 0, 0, 100, 0xff, 0xff, 0x00, 0x00, 0x08, 0x00, 8, 0];
        buf.extend_from_slice(b"9P2000.L");
        let f = decode_tframe(&buf).unwrap();
        assert_eq!(f.tag, NOTAG);
        assert_eq!(
            f.msg,
            Ok(Tmessage::Version(Tversion {
                msize: 512 * 1024,
                version: b"9P2000.L".to_vec()
            }))
        );
    }
}
