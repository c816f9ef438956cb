//! Directory entries as packed in Rreaddir: `qid[13] offset[8] type[1] name[s]`, and in the
//! crossfs extension's Rreaddirattr, each followed by an Rgetattr body.

use crate::codec::{DecodeError, Field, Reader};
use crate::messages::Rgetattr;
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

/// One entry of an Rreaddirattr payload: the entry as Rreaddir packs it, then the file's
/// attributes as Rgetattr's body (`valid[8] qid[13] mode[4] ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryAttr {
    /// The entry.
    pub entry: DirEntry,
    /// The attributes of the file it names, as an lstat there found them.
    pub attr: Rgetattr,
}

impl DirEntryAttr {
    /// Bytes an entry with a name of `name_len` bytes takes in a payload.
    pub fn wire_len(name_len: usize) -> usize {
        DirEntry::wire_len(name_len) + ATTR_LEN
    }

    /// Appends this entry to a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.entry.encode(out);
        self.attr.encode(out);
    }

    /// Iterates over the entries packed in an Rreaddirattr payload.
    pub fn iter(data: &[u8]) -> DirEntryAttrIter<'_> {
        DirEntryAttrIter {
            r: Reader::new(data),
        }
    }
}

/// One file of an Rreadfiles payload: its name in the directory, its attributes after the
/// read, and its whole content (`len[4]` and bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileData {
    /// The name in the directory asked about.
    pub name: Vec<u8>,
    /// The file's attributes, taken after the read (its qid among them).
    pub attr: Rgetattr,
    /// Everything the file holds (a symbolic link: its target).
    pub data: Vec<u8>,
}

impl FileData {
    /// Bytes a file with a name of `name_len` bytes and `data_len` bytes of content takes
    /// in a payload.
    pub fn wire_len(name_len: usize, data_len: usize) -> usize {
        2 + name_len + ATTR_LEN + 4 + data_len
    }

    /// Appends this file to a payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.name.encode(out);
        self.attr.encode(out);
        crate::types::Data(self.data.clone()).encode(out);
    }

    /// Iterates over the files packed in an Rreadfiles payload.
    pub fn iter(data: &[u8]) -> FileDataIter<'_> {
        FileDataIter {
            r: Reader::new(data),
        }
    }
}

/// Iterator over packed files; yields an error (once) for a malformed payload.
pub struct FileDataIter<'a> {
    r: Reader<'a>,
}

impl Iterator for FileDataIter<'_> {
    type Item = Result<FileData, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.remaining() == 0 {
            return None;
        }
        let file = (|| {
            Ok(FileData {
                name: Vec::<u8>::decode(&mut self.r)?,
                attr: Rgetattr::decode(&mut self.r)?,
                data: crate::types::Data::decode(&mut self.r)?.0,
            })
        })();
        if file.is_err() {
            self.r = Reader::new(&[]);
        }
        Some(file)
    }
}

/// Bytes of an Rgetattr body.
const ATTR_LEN: usize = 8 + 13 + 4 * 3 + 8 * 15;

/// Iterator over packed entries with attributes; yields an error (once) for a malformed
/// payload.
pub struct DirEntryAttrIter<'a> {
    r: Reader<'a>,
}

impl Iterator for DirEntryAttrIter<'_> {
    type Item = Result<DirEntryAttr, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.remaining() == 0 {
            return None;
        }
        let entry = (|| {
            let entry = DirEntry {
                qid: Qid::decode(&mut self.r)?,
                offset: u64::decode(&mut self.r)?,
                ty: u8::decode(&mut self.r)?,
                name: Vec::<u8>::decode(&mut self.r)?,
            };
            let attr = Rgetattr::decode(&mut self.r)?;
            Ok(DirEntryAttr { entry, attr })
        })();
        if entry.is_err() {
            self.r = Reader::new(&[]);
        }
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_sizes_agree_and_a_cut_payload_is_an_error() {
        let files = vec![
            FileData {
                name: b"a.h".to_vec(),
                attr: Rgetattr {
                    size: 3,
                    ..Rgetattr::default()
                },
                data: b"abc".to_vec(),
            },
            FileData {
                name: vec![0xff],
                attr: Rgetattr::default(),
                data: Vec::new(),
            },
        ];
        let mut data = Vec::new();
        for f in &files {
            let before = data.len();
            f.encode(&mut data);
            assert_eq!(
                data.len() - before,
                FileData::wire_len(f.name.len(), f.data.len())
            );
        }
        let back: Vec<_> = FileData::iter(&data).map(Result::unwrap).collect();
        assert_eq!(back, files);
        let cut: Vec<_> = FileData::iter(&data[..data.len() - 1]).collect();
        assert_eq!(cut.len(), 2);
        assert!(cut[0].is_ok() && cut[1].is_err());
    }

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
    fn entries_with_attributes_round_trip_and_sizes_agree() {
        let attr = Rgetattr {
            valid: 0x7ff,
            qid: Qid {
                ty: 0,
                version: 0,
                path: 9,
            },
            mode: 0o100644,
            uid: 1,
            gid: 2,
            nlink: 1,
            rdev: 0,
            size: 5,
            blksize: 4096,
            blocks: 8,
            atime_sec: 1,
            atime_nsec: 2,
            mtime_sec: 3,
            mtime_nsec: 4,
            ctime_sec: 5,
            ctime_nsec: 6,
            btime_sec: 7,
            btime_nsec: 8,
            gen: 0,
            data_version: 0,
        };
        let e = DirEntryAttr {
            entry: DirEntry {
                qid: attr.qid,
                offset: 77,
                ty: 8,
                name: b"a.c".to_vec(),
            },
            attr,
        };
        let mut data = Vec::new();
        e.encode(&mut data);
        e.encode(&mut data);
        assert_eq!(data.len(), 2 * DirEntryAttr::wire_len(3));
        let back: Vec<_> = DirEntryAttr::iter(&data).map(Result::unwrap).collect();
        assert_eq!(back, vec![e.clone(), e]);
        let mut it = DirEntryAttr::iter(&data[..data.len() - 1]);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn malformed_payload_yields_one_error() {
        let data = [0u8; 30];
        let mut it = DirEntry::iter(&data[..23]); // one byte short of an entry
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
