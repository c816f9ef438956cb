//! Field-level encoding: little-endian integers, 16-bit-length strings, 32-bit-length data.
//!
//! [`Reader`] is the only way bytes are consumed while decoding: every read is bounds-checked
//! against what remains, so a hostile length can never cause a panic or an allocation larger
//! than the input.

use crate::types::{Data, Fid, Qid, Tag, MAX_WALK_ELEMENTS};

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame ended before a field did.
    #[error("frame truncated: needed {needed} more bytes")]
    Truncated {
        /// Bytes missing.
        needed: usize,
    },
    /// The size field is below the 7-byte header.
    #[error("frame size {0} is smaller than the 7-byte header")]
    TooSmall(u32),
    /// The size field exceeds the negotiated msize.
    #[error("frame size {size} exceeds msize {max}")]
    TooLarge {
        /// Size announced by the frame.
        size: u32,
        /// The limit in force.
        max: u32,
    },
    /// The size field disagrees with the bytes handed to the decoder.
    #[error("frame size field says {declared} bytes but {actual} were given")]
    SizeMismatch {
        /// Size announced by the frame.
        declared: u32,
        /// Bytes given.
        actual: usize,
    },
    /// The message type is not a 9P2000.L request (or reply, when decoding replies).
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// Bytes were left after the last field.
    #[error("{0} unexpected bytes after the message body")]
    TrailingBytes(usize),
    /// A walk carried more than 16 names or qids.
    #[error("walk has {0} elements, more than 16")]
    TooManyWalkElements(usize),
}

/// A bounds-checked cursor over one frame's bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated {
                needed: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
}

/// A value with a fixed wire layout. Implemented for every field type a message can hold.
pub(crate) trait Field: Sized {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.array()?))
            }
        }
    )*};
}
int_field!(u8, u16, u32, u64);

impl Field for Fid {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        u32::decode(r).map(Fid)
    }
}

impl Field for Tag {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        u16::decode(r).map(Tag)
    }
}

impl Field for Qid {
    fn encode(&self, out: &mut Vec<u8>) {
        self.ty.encode(out);
        self.version.encode(out);
        self.path.encode(out);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Qid {
            ty: u8::decode(r)?,
            version: u32::decode(r)?,
            path: u64::decode(r)?,
        })
    }
}

impl Field for crate::types::BehindBase {
    fn encode(&self, out: &mut Vec<u8>) {
        self.mtime_sec.encode(out);
        self.mtime_nsec.encode(out);
        self.size.encode(out);
        self.mode.encode(out);
        self.uid.encode(out);
        self.gid.encode(out);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(crate::types::BehindBase {
            mtime_sec: u64::decode(r)?,
            mtime_nsec: u64::decode(r)?,
            size: u64::decode(r)?,
            mode: u32::decode(r)?,
            uid: u32::decode(r)?,
            gid: u32::decode(r)?,
        })
    }
}

/// Strings and names: a 16-bit length, then bytes (not necessarily UTF-8).
impl Field for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        // Callers keep names and strings below 64 KiB (a 9P limit); truncating silently would
        // corrupt the frame, so a longer value is a programming error upstream.
        let len = u16::try_from(self.len()).expect("9P string longer than 65535 bytes");
        len.encode(out);
        out.extend_from_slice(self);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = u16::decode(r)? as usize;
        Ok(r.take(len)?.to_vec())
    }
}

impl Field for Data {
    fn encode(&self, out: &mut Vec<u8>) {
        let len = u32::try_from(self.0.len()).expect("9P payload longer than 4 GiB");
        len.encode(out);
        out.extend_from_slice(&self.0);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = u32::decode(r)? as usize;
        Ok(Data(r.take(len)?.to_vec()))
    }
}

/// Walk names: a 16-bit count (at most 16), then strings.
impl Field for Vec<Vec<u8>> {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.len() as u16).encode(out);
        for name in self {
            name.encode(out);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = u16::decode(r)? as usize;
        if n > MAX_WALK_ELEMENTS {
            return Err(DecodeError::TooManyWalkElements(n));
        }
        (0..n).map(|_| Vec::<u8>::decode(r)).collect()
    }
}

/// Walk qids: a 16-bit count (at most 16), then qids.
impl Field for Vec<Qid> {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.len() as u16).encode(out);
        for qid in self {
            qid.encode(out);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = u16::decode(r)? as usize;
        if n > MAX_WALK_ELEMENTS {
            return Err(DecodeError::TooManyWalkElements(n));
        }
        (0..n).map(|_| Qid::decode(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_length_beyond_frame_is_truncated_not_allocated() {
        // Claims 65535 bytes, carries 2.
        let bytes = [0xff, 0xff, b'a', b'b'];
        let err = Vec::<u8>::decode(&mut Reader::new(&bytes)).unwrap_err();
        assert_eq!(err, DecodeError::Truncated { needed: 65533 });
    }

    #[test]
    fn data_length_beyond_frame_is_truncated() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 1, 2, 3];
        let err = Data::decode(&mut Reader::new(&bytes)).unwrap_err();
        assert!(matches!(err, DecodeError::Truncated { .. }));
    }

    #[test]
    fn walk_with_seventeen_names_is_refused() {
        let mut bytes = vec![17, 0];
        for _ in 0..17 {
            bytes.extend_from_slice(&[1, 0, b'x']);
        }
        let err = Vec::<Vec<u8>>::decode(&mut Reader::new(&bytes)).unwrap_err();
        assert_eq!(err, DecodeError::TooManyWalkElements(17));
    }

    #[test]
    fn integers_are_little_endian() {
        let mut out = Vec::new();
        0x0102_0304u32.encode(&mut out);
        assert_eq!(out, [4, 3, 2, 1]);
    }
}
