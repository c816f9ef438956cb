//! Directory entries as packed in Rreaddir: `qid[13] offset[8] type[1] name[s]`.

use crate::codec::{DecodeError, Field, Reader};
use crate::types::Qid;

/// One directory entry of an Rreaddir payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's qid.
    pub qid: Qid,
    /// The cookie to pass as Treaddir's offset to continue after this entry.
    pub offset: u64,
    /// The entry's type, as Linux `d_type` (DT_DIR, DT_REG, ...).
    pub ty: u8,
    /// The entry's name.
    pub name: Vec<u8>,
}

impl DirEntry {
    /// Bytes this entry takes in an Rreaddir payload.
    pub fn wire_len(name_len: usize) -> usize {
        13 + 8 + 1 + 2 + name_len
    }

    /// Appends this entry to a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.qid.encode(out);
        self.offset.encode(out);
        self.ty.encode(out);
        self.name.encode(out);
    }

    /// Iterates over the entries packed in an Rreaddir payload.
    pub fn iter(data: &[u8]) -> DirEntryIter<'_> {
        DirEntryIter {
            r: Reader::new(data),
        }
    }
}

/// Iterator over packed directory entries; yields an error (once) for a malformed payload.
pub struct DirEntryIter<'a> {
    r: Reader<'a>,
}

impl Iterator for DirEntryIter<'_> {
    type Item = Result<DirEntry, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.remaining() == 0 {
            return None;
        }
        let entry = (|| {
            Ok(DirEntry {
                qid: Qid::decode(&mut self.r)?,
                offset: u64::decode(&mut self.r)?,
                ty: u8::decode(&mut self.r)?,
                name: Vec::<u8>::decode(&mut self.r)?,
            })
        })();
        if entry.is_err() {
            // Stop after the first error: the rest cannot be framed.
            self.r = Reader::new(&[]);
        }
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_sizes_agree() {
        let entries = vec![
            DirEntry {
                qid: Qid {
                    ty: 0x80,
                    version: 0,
                    path: 2,
                },
                offset: 1,
                ty: 4,
                name: b".".to_vec(),
            },
            DirEntry {
                qid: Qid::default(),
                offset: u64::MAX,
                ty: 8,
                name: vec![0xff, 0xfe],
            },
        ];
        let mut data = Vec::new();
        for e in &entries {
            let before = data.len();
            e.encode(&mut data);
            assert_eq!(data.len() - before, DirEntry::wire_len(e.name.len()));
        }
        let back: Vec<_> = DirEntry::iter(&data).map(Result::unwrap).collect();
        assert_eq!(back, entries);
    }

    #[test]
    fn malformed_payload_yields_one_error() {
        let data = [0u8; 30];
        let mut it = DirEntry::iter(&data[..23]); // one byte short of an entry
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
