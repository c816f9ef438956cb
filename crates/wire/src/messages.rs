//! The 9P2000.L message table. Everything else about messages is generated from it.
//!
//! Field order is wire order. Type numbers are Linux's (`include/net/9p/9p.h`); each reply is
//! its request's number plus one.

use crate::codec::{DecodeError, Field, Reader};
use crate::types::{BehindBase, Data, Fid, Qid, Tag};

/// One row of the message table, for documentation.
#[derive(Clone, Copy, Debug)]
pub struct MessageInfo {
    /// The protocol name ("Twalk").
    pub name: &'static str,
    /// The type number.
    pub number: u8,
    /// The fields in wire order, as written in the table (`fid: Fid, wnames: Vec<Vec<u8>>`).
    pub fields: &'static str,
    /// The doc comment, as the attributes the compiler saw (`#[doc = " ..."]`).
    pub doc: &'static str,
}

impl MessageInfo {
    /// The doc comment as plain text, its lines joined with spaces.
    pub fn doc_text(&self) -> String {
        let mut out = String::new();
        for part in self.doc.split("#[doc").skip(1) {
            // `= r" text"]`, possibly with line breaks: the text is between the quotes.
            let (Some(start), Some(end)) = (part.find('"'), part.rfind('"')) else {
                continue;
            };
            let text = part[start + 1..end.max(start + 1)].trim();
            if !out.is_empty() && !text.is_empty() {
                out.push(' ');
            }
            out.push_str(text);
        }
        out
    }
}

macro_rules! messages {
    (
        $enum:ident, $what:literal {
            $( $(#[$doc:meta])* $variant:ident($name:ident = $num:literal) { $( $field:ident : $ty:ty ),* $(,)? } )*
        }
    ) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, PartialEq, Eq)]
            #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
            #[allow(missing_docs)]
            pub struct $name { $( pub $field: $ty, )* }

            impl $name {
                /// This message's type number on the wire.
                pub const TYPE: u8 = $num;
            }

            impl From<$name> for $enum {
                fn from(m: $name) -> Self { $enum::$variant(m) }
            }

            // A message body is a field too, so that a compound reply can carry another
            // reply's body (Rwalkgetattr holds an Rgetattr).
            impl Field for $name {
                fn encode(&self, _out: &mut Vec<u8>) {
                    $( self.$field.encode(_out); )*
                }
                fn decode(_r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                    Ok($name { $( $field: <$ty>::decode(_r)?, )* })
                }
            }
        )*

        #[doc = concat!("Any 9P2000.L ", $what, ".")]
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        #[allow(missing_docs)]
        pub enum $enum { $( $variant($name), )* }

        impl $enum {
            /// Every message of this direction, in table order: what docs/protocol.md is
            /// generated from.
            pub const TABLE: &'static [MessageInfo] = &[
                $( MessageInfo {
                    name: stringify!($name),
                    number: $num,
                    fields: stringify!($( $field : $ty ),*),
                    doc: stringify!($(#[$doc])*),
                }, )*
            ];

            /// The type number on the wire.
            pub fn msg_type(&self) -> u8 {
                match self { $( $enum::$variant(_) => $num, )* }
            }

            /// The protocol name ("Twalk", "Rread", ...), as used in counters and logs.
            pub fn name(&self) -> &'static str {
                match self { $( $enum::$variant(_) => stringify!($name), )* }
            }

            /// The name of a type number of this direction, if it is one.
            pub fn name_of(ty: u8) -> Option<&'static str> {
                match ty { $( $num => Some(stringify!($name)), )* _ => None }
            }

            pub(crate) fn encode_body(&self, out: &mut Vec<u8>) {
                match self {
                    $( $enum::$variant(m) => m.encode(out), )*
                }
            }

            pub(crate) fn decode_body(ty: u8, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(match ty {
                    $( $num => $enum::$variant(<$name>::decode(r)?), )*
                    other => return Err(DecodeError::UnknownType(other)),
                })
            }

            /// Whether a type number of this direction belongs to the crossfs extension
            /// (see [`crate::EXTENSION_FIRST`]), which only a client that negotiated it sends.
            pub fn is_extension(&self) -> bool {
                self.msg_type() >= crate::EXTENSION_FIRST
            }
        }
    };
}

messages! { Tmessage, "request" {
    /// Negotiate the protocol version and the largest message (msize).
    Version(Tversion = 100) { msize: u32, version: Vec<u8> }
    /// Open an authentication file.
    Auth(Tauth = 102) { afid: Fid, uname: Vec<u8>, aname: Vec<u8>, n_uname: u32 }
    /// Attach `fid` to the root of the export named `aname`.
    Attach(Tattach = 104) { fid: Fid, afid: Fid, uname: Vec<u8>, aname: Vec<u8>, n_uname: u32 }
    /// Abort the request with tag `oldtag`.
    Flush(Tflush = 108) { oldtag: Tag }
    /// Walk from `fid` through `wnames`, binding the result to `newfid`.
    Walk(Twalk = 110) { fid: Fid, newfid: Fid, wnames: Vec<Vec<u8>> }
    /// Read `count` bytes at `offset` from an open fid.
    Read(Tread = 116) { fid: Fid, offset: u64, count: u32 }
    /// Write `data` at `offset` to an open fid.
    Write(Twrite = 118) { fid: Fid, offset: u64, data: Data }
    /// Forget a fid.
    Clunk(Tclunk = 120) { fid: Fid }
    /// Remove the file and clunk the fid.
    Remove(Tremove = 122) { fid: Fid }
    /// File system statistics.
    Statfs(Tstatfs = 8) { fid: Fid }
    /// Open the file behind a fid.
    Lopen(Tlopen = 12) { fid: Fid, flags: u32 }
    /// Create and open `name` in directory `fid`; `fid` then names the new file.
    Lcreate(Tlcreate = 14) { fid: Fid, name: Vec<u8>, flags: u32, mode: u32, gid: u32 }
    /// Create a symbolic link `name` in directory `fid` pointing at `symtgt`.
    Symlink(Tsymlink = 16) { fid: Fid, name: Vec<u8>, symtgt: Vec<u8>, gid: u32 }
    /// Create a device node, fifo or socket.
    Mknod(Tmknod = 18) { dfid: Fid, name: Vec<u8>, mode: u32, major: u32, minor: u32, gid: u32 }
    /// Rename the file behind `fid` to `name` in directory `dfid`.
    Rename(Trename = 20) { fid: Fid, dfid: Fid, name: Vec<u8> }
    /// Read a symbolic link's target.
    Readlink(Treadlink = 22) { fid: Fid }
    /// Attributes, limited to `request_mask`.
    Getattr(Tgetattr = 24) { fid: Fid, request_mask: u64 }
    /// Change the attributes selected by `valid`.
    Setattr(Tsetattr = 26) {
        fid: Fid, valid: u32, mode: u32, uid: u32, gid: u32, size: u64,
        atime_sec: u64, atime_nsec: u64, mtime_sec: u64, mtime_nsec: u64,
    }
    /// Prepare to read extended attribute `name` (or the list, when empty) through `newfid`.
    Xattrwalk(Txattrwalk = 30) { fid: Fid, newfid: Fid, name: Vec<u8> }
    /// Prepare to write extended attribute `name` through `fid`.
    Xattrcreate(Txattrcreate = 32) { fid: Fid, name: Vec<u8>, attr_size: u64, flags: u32 }
    /// Read directory entries from `offset` (a cookie from a previous entry, or 0).
    Readdir(Treaddir = 40) { fid: Fid, offset: u64, count: u32 }
    /// Flush a file to stable storage (`datasync` != 0: data only).
    Fsync(Tfsync = 50) { fid: Fid, datasync: u32 }
    /// Take or release a POSIX byte-range lock (never blocks the server).
    Lock(Tlock = 52) {
        fid: Fid, ty: u8, flags: u32, start: u64, length: u64, proc_id: u32, client_id: Vec<u8>,
    }
    /// Test for a conflicting POSIX lock.
    Getlock(Tgetlock = 54) { fid: Fid, ty: u8, start: u64, length: u64, proc_id: u32, client_id: Vec<u8> }
    /// Create hard link `name` in `dfid` to the file behind `fid`.
    Link(Tlink = 70) { dfid: Fid, fid: Fid, name: Vec<u8> }
    /// Create directory `name` in `dfid`.
    Mkdir(Tmkdir = 72) { dfid: Fid, name: Vec<u8>, mode: u32, gid: u32 }
    /// Rename `oldname` in `olddirfid` to `newname` in `newdirfid`.
    Renameat(Trenameat = 74) { olddirfid: Fid, oldname: Vec<u8>, newdirfid: Fid, newname: Vec<u8> }
    /// Remove `name` from `dirfd` (`flags` may hold AT_REMOVEDIR).
    Unlinkat(Tunlinkat = 76) { dirfd: Fid, name: Vec<u8>, flags: u32 }

    // The crossfs extension (`9P2000.L.crossfs`, see docs/protocol.md): compounds that save
    // round trips, and calls 9P2000.L has no message for. Sent only to a server that answered Tversion with that version.

    /// Twalk, then Tgetattr of the file reached, in one round trip. Every name must be
    /// walked: a missing one is an error (the errno of that step) and binds nothing.
    Walkgetattr(Twalkgetattr = 150) { fid: Fid, newfid: Fid, wnames: Vec<Vec<u8>>, request_mask: u64 }
    /// A directory listing with every entry's attributes ([`crate::DirEntryAttr`]), from the
    /// cookie `offset` ("." and ".." with none: `valid` 0). `fid` need not be open.
    Readdirattr(Treaddirattr = 152) { fid: Fid, offset: u64, count: u32, request_mask: u64 }
    /// Twalk to `newfid`, then Tlopen of it, in one round trip; `newfid` is bound only if
    /// both succeed.
    Walkopen(Twalkopen = 154) { fid: Fid, newfid: Fid, wnames: Vec<Vec<u8>>, flags: u32, request_mask: u64 }
    /// Tlcreate of `name` in `dfid` (left as it is), binding `openfid` to the new open file
    /// and `nodefid` to the file unopened, with the file's attributes.
    Createattr(Tcreateattr = 156) {
        dfid: Fid, nodefid: Fid, openfid: Fid, name: Vec<u8>, flags: u32, mode: u32, gid: u32,
        request_mask: u64,
    }
    /// Tsetattr, then Tgetattr of the same fid, in one round trip.
    Setattrget(Tsetattrget = 158) { set: Tsetattr, request_mask: u64 }
    /// Tunlinkat, then the attributes of the directory `dirfd` as the removal left them.
    Unlinkatattr(Tunlinkatattr = 160) { dirfd: Fid, name: Vec<u8>, flags: u32, request_mask: u64 }
    /// Trenameat, then the attributes of both directories as the rename left them.
    Renameatattr(Trenameatattr = 162) {
        olddirfid: Fid, oldname: Vec<u8>, newdirfid: Fid, newname: Vec<u8>, request_mask: u64,
    }
    /// Tcreateattr, then the attributes of the directory `dfid` as the creation left them.
    Createattrdir(Tcreateattrdir = 164) { create: Tcreateattr }
    /// Twalk to `newfid`, Tlopen of it, Tread of it, then Tgetattr, in one round trip: an
    /// open for reading, its first read, and the attributes as the read left them (its
    /// access time). `newfid` is bound, open, only if every step succeeds.
    Walkread(Twalkread = 166) {
        fid: Fid, newfid: Fid, wnames: Vec<Vec<u8>>, flags: u32, offset: u64, count: u32,
        request_mask: u64,
    }
    /// The whole content and attributes of each named regular file in directory `fid`
    /// whose content is at most `max_each` bytes, read without moving access times where
    /// the server may, and each named symbolic link's target ([`crate::FileData`]); other
    /// names are left out. At most 16 names, as a walk.
    Readfiles(Treadfiles = 168) { fid: Fid, names: Vec<Vec<u8>>, max_each: u32 }
    /// Twalk to `newfid`, then Treaddirattr of it, in one round trip: a directory met in a
    /// listing, bound and listed at once. `newfid` is bound only if both succeed.
    Walkreaddirattr(Twalkreaddirattr = 170) {
        fid: Fid, newfid: Fid, wnames: Vec<Vec<u8>>, offset: u64, count: u32, request_mask: u64,
    }
    /// Twrite, then the attributes of the file as the write left them (all of Tgetattr's
    /// basic ones). Laid out as Twrite, so it carries as much data.
    Writeattr(Twriteattr = 172) { fid: Fid, offset: u64, data: Data }
    /// fallocate(2) of the open file `fid` (open for writing): `mode` is Linux's
    /// `FALLOC_FL_*` bits (0: allocate and extend; keep-size, punch-hole, zero-range,
    /// collapse-range, insert-range, unshare-range), passed to the host's file system as
    /// they are, so a mode it lacks is `EOPNOTSUPP`.
    Fallocate(Tfallocate = 174) { fid: Fid, mode: u32, offset: u64, length: u64 }
    /// A regular file without a name in directory `dfid` (left as it is), as open(2) with
    /// `O_TMPFILE` makes one, bound open to `newfid`: `flags` as Tlcreate's (the access
    /// mode must write; `O_EXCL`: never to be linked), `mode` and `gid` as Tlcreate's.
    /// Tlink of `newfid` gives it a name; clunked without one, it is gone.
    Tmpfile(Ttmpfile = 176) {
        dfid: Fid, newfid: Fid, flags: u32, mode: u32, gid: u32, request_mask: u64,
    }
    /// Tcreateattrdir for a create the client answered before sending (changes sent
    /// behind): run before the connection's next request is read, and never onto a
    /// file the client did not see. When `name` is taken, the file is made beside it
    /// as `NAME.crossfs-conflict-N` (the lowest N from 1 that is free), and the fids
    /// bind that one. `flags` must hold `O_EXCL`.
    Createbehind(Tcreatebehind = 178) { create: Tcreateattr }
    /// Which optional behaviours of the extension the server has ([`crate::features`]),
    /// asked once per connection, right after Rversion. A crossfs that predates it answers
    /// `EOPNOTSUPP`: none.
    Features(Tfeatures = 180) {}
    /// Tsetattrget of a change the client answered before sending (changes sent behind),
    /// run before the connection's next request is read, and made only onto the file the
    /// client saw ([`BehindBase`]). Where a host program changed the file first, a regular
    /// file is copied beside it as `NAME.crossfs-conflict-N` and the change made to the
    /// copy (so are the connection's next changes of the file based on this one); any
    /// other kind of file is left as it is (`ESTALE`). Only to a server whose Rfeatures
    /// has [`crate::features::CONDITIONAL_BEHIND`].
    Setattrbehind(Tsetattrbehind = 182) { base: BehindBase, set: Tsetattr, request_mask: u64 }
    /// Twriteattr of at most `INLINE_WRITE_MAX` bytes sent behind, made as
    /// Tsetattrbehind's change is: onto the file the client saw, or onto its copy.
    Writebehind(Twritebehind = 184) { base: BehindBase, fid: Fid, offset: u64, data: Data }
    /// Tcreatebehind whose file is marked as this create's own: made with the access time
    /// `atime_sec`.`atime_nsec` (the client's choice, as the client predicted it), so that
    /// the same create sent again after its connection was lost (a server killed after
    /// making the file, before answering) finds the file an earlier try made, a regular
    /// file with that access time, and binds and answers it as made, where Tcreatebehind
    /// would keep the guest's file beside its own earlier one. Only to a server whose
    /// Rfeatures has [`crate::features::MARKED_CREATE`].
    Createbehindmarked(Tcreatebehindmarked = 186) {
        atime_sec: u64, atime_nsec: u64, create: Tcreateattr,
    }
    /// Tmkdir of `name` in `dfid`, then `newfid` bound to the new directory, its
    /// attributes, and `dfid`'s as the mkdir left them, in one round trip (a mkdir
    /// otherwise costs three: Tmkdir, Twalkgetattr, and the parent's Tgetattr). A mkdir
    /// that fails is an error. Made, but not found when walked (a host program removed or
    /// renamed it at once): `attr.valid` is 0 and `newfid` stays unbound. Only to a server
    /// whose Rfeatures has [`crate::features::MKDIR_ATTR`].
    Mkdirattr(Tmkdirattr = 188) {
        dfid: Fid, newfid: Fid, name: Vec<u8>, mode: u32, gid: u32, request_mask: u64,
    }
    /// Tunlinkatattr of a removal the client answered before sending (changes sent
    /// behind), run before the connection's next request is read, and only of the file
    /// the client saw: `name` in `dirfd` must still be the file whose `qid.path` is `path`
    /// (not a directory), and that file as [`BehindBase`] says, or as this connection's
    /// changes left it; otherwise nothing is removed (`ESTALE`: a host program changed or
    /// replaced it first). `newfid` (unless `NOFID`) is bound to the file before it goes,
    /// so that the client's open files of it read on. Only to a server whose Rfeatures
    /// has [`crate::features::UNLINK_BEHIND`].
    Unlinkbehind(Tunlinkbehind = 190) {
        base: BehindBase, path: u64, dirfd: Fid, name: Vec<u8>, newfid: Fid, request_mask: u64,
    }
    /// Trenameat within one directory, of a rename the client answered before sending
    /// (changes sent behind), run before the connection's next request is read, and only
    /// of the file the client saw: `oldname` in `dirfd` must still be the file whose
    /// `qid.path` is `path` (not a directory; otherwise `ESTALE`), and `newname` must be
    /// free (otherwise `EEXIST`: a host program took it first; nothing is replaced). Only
    /// to a server whose Rfeatures has [`crate::features::RENAME_BEHIND`].
    Renamebehind(Trenamebehind = 192) {
        path: u64, dirfd: Fid, oldname: Vec<u8>, newname: Vec<u8>, request_mask: u64,
    }
    /// Tunlinkatattr with `AT_REMOVEDIR` of a removal the client answered before sending
    /// (changes sent behind), run before the connection's next request is read, and only
    /// of the directory the client saw: `name` in `dirfd` must still be the directory
    /// whose `qid.path` is `path` (otherwise `ESTALE`), and empty (otherwise `ENOTEMPTY`:
    /// a host program put something in it first; nothing is removed). `newfid` (unless
    /// `NOFID`) is bound to it before it goes, as for Tunlinkbehind. Only to a server
    /// whose Rfeatures has [`crate::features::RMDIR_BEHIND`].
    Rmdirbehind(Trmdirbehind = 194) {
        path: u64, dirfd: Fid, name: Vec<u8>, newfid: Fid, request_mask: u64,
    }
    /// Tmkdirattr of a mkdir the client answered before sending (changes sent behind),
    /// run before the connection's next request is read: the directory is made with the
    /// access time `atime_sec`.`atime_nsec` (the client's choice, as it predicted it) and
    /// `newfid` bound to it, so that the changes the client sends behind into it next find
    /// it made. Never onto a name the client did not see missing: when `name` is taken,
    /// the directory is made beside it as `NAME.crossfs-conflict-N` (the lowest N from 1
    /// that is free), unless the name holds a directory with that access time: the same
    /// mkdir sent again after a lost connection, which an earlier try made (or a
    /// directory of mode 0: one an earlier try made and had not marked yet); that one is
    /// bound and answered as made. Only to a server whose Rfeatures has
    /// [`crate::features::MKDIR_BEHIND`].
    Mkdirbehind(Tmkdirbehind = 196) {
        atime_sec: u64, atime_nsec: u64, mkdir: Tmkdirattr,
    }
}}

messages! { Rmessage, "reply" {
    /// An error: a Linux errno.
    Lerror(Rlerror = 7) { ecode: u32 }
    /// The server's version and msize (never larger than the client's).
    Version(Rversion = 101) { msize: u32, version: Vec<u8> }
    /// The authentication file's qid.
    Auth(Rauth = 103) { aqid: Qid }
    /// The export root's qid.
    Attach(Rattach = 105) { qid: Qid }
    /// The flushed request is finished or forgotten.
    Flush(Rflush = 109) {}
    /// One qid per name walked (fewer than asked: the walk stopped there).
    Walk(Rwalk = 111) { wqids: Vec<Qid> }
    /// Bytes read.
    Read(Rread = 117) { data: Data }
    /// Bytes written.
    Write(Rwrite = 119) { count: u32 }
    /// The fid is forgotten.
    Clunk(Rclunk = 121) {}
    /// The file is removed and the fid forgotten.
    Remove(Rremove = 123) {}
    /// statfs(2) of the file system behind the fid.
    Statfs(Rstatfs = 9) {
        ty: u32, bsize: u32, blocks: u64, bfree: u64, bavail: u64,
        files: u64, ffree: u64, fsid: u64, namelen: u32,
    }
    /// The opened file's qid and the largest I/O the server advises (0: msize - 24).
    Lopen(Rlopen = 13) { qid: Qid, iounit: u32 }
    /// The created file's qid and advised I/O size.
    Lcreate(Rlcreate = 15) { qid: Qid, iounit: u32 }
    /// The new symlink's qid.
    Symlink(Rsymlink = 17) { qid: Qid }
    /// The new node's qid.
    Mknod(Rmknod = 19) { qid: Qid }
    /// Renamed.
    Rename(Rrename = 21) {}
    /// The link's target.
    Readlink(Rreadlink = 23) { target: Vec<u8> }
    /// Attributes; `valid` says which fields are meaningful.
    Getattr(Rgetattr = 25) {
        valid: u64, qid: Qid, mode: u32, uid: u32, gid: u32, nlink: u64, rdev: u64,
        size: u64, blksize: u64, blocks: u64,
        atime_sec: u64, atime_nsec: u64, mtime_sec: u64, mtime_nsec: u64,
        ctime_sec: u64, ctime_nsec: u64, btime_sec: u64, btime_nsec: u64,
        gen: u64, data_version: u64,
    }
    /// Attributes changed.
    Setattr(Rsetattr = 27) {}
    /// The attribute's (or the list's) size; read it from the new fid.
    Xattrwalk(Rxattrwalk = 31) { size: u64 }
    /// Ready for the attribute's value to be written.
    Xattrcreate(Rxattrcreate = 33) {}
    /// Packed directory entries (see [`crate::DirEntry`]).
    Readdir(Rreaddir = 41) { data: Data }
    /// Flushed to stable storage.
    Fsync(Rfsync = 51) {}
    /// One of the `lock::STATUS_*` values.
    Lock(Rlock = 53) { status: u8 }
    /// The conflicting lock, or `ty` = unlocked.
    Getlock(Rgetlock = 55) { ty: u8, start: u64, length: u64, proc_id: u32, client_id: Vec<u8> }
    /// Linked.
    Link(Rlink = 71) {}
    /// The new directory's qid.
    Mkdir(Rmkdir = 73) { qid: Qid }
    /// Renamed.
    Renameat(Rrenameat = 75) {}
    /// Removed.
    Unlinkat(Runlinkat = 77) {}

    /// The qids walked (one per name) and the attributes of the last.
    Walkgetattr(Rwalkgetattr = 151) { wqids: Vec<Qid>, attr: Rgetattr }
    /// Packed entries with attributes (see [`crate::DirEntryAttr`]); empty at the end.
    Readdirattr(Rreaddirattr = 153) { data: Data }
    /// The opened file's qid, advised I/O size (0: msize - 24) and attributes.
    Walkopen(Rwalkopen = 155) { wqids: Vec<Qid>, iounit: u32, attr: Rgetattr }
    /// The created file's advised I/O size and attributes (its qid among them).
    Createattr(Rcreateattr = 157) { iounit: u32, attr: Rgetattr }
    /// The attributes after the change.
    Setattrget(Rsetattrget = 159) { attr: Rgetattr }
    /// The directory's attributes after the removal (`valid` 0: they could not be read;
    /// the removal stands).
    Unlinkatattr(Runlinkatattr = 161) { dir: Rgetattr }
    /// Both directories' attributes after the rename (the same twice for one directory;
    /// `valid` 0 where they could not be read; the rename stands).
    Renameatattr(Rrenameatattr = 163) { olddir: Rgetattr, newdir: Rgetattr }
    /// What Tcreateattr answers, and the directory's attributes after the creation
    /// (`valid` 0: they could not be read; the file stands).
    Createattrdir(Rcreateattrdir = 165) { created: Rcreateattr, dir: Rgetattr }
    /// The qids walked (one per name), the advised I/O size (0: msize - 24), the
    /// attributes after the read, and what the read returned (at most `count` bytes, and
    /// what msize leaves room for).
    Walkread(Rwalkread = 167) { wqids: Vec<Qid>, iounit: u32, attr: Rgetattr, data: Data }
    /// Packed files ([`crate::FileData`]), as many of those asked for as msize allows.
    Readfiles(Rreadfiles = 169) { data: Data }
    /// The qids walked (one per name), and what Rreaddirattr answers.
    Walkreaddirattr(Rwalkreaddirattr = 171) { wqids: Vec<Qid>, data: Data }
    /// What Rwrite answers, and the file's attributes after the write (`valid` 0: they
    /// could not be read; the write stands).
    Writeattr(Rwriteattr = 173) { count: u32, attr: Rgetattr }
    /// Allocated (or punched, zeroed, collapsed, inserted) as asked.
    Fallocate(Rfallocate = 175) {}
    /// The new file's advised I/O size (0: msize - 24) and attributes (its qid among them;
    /// `nlink` 0).
    Tmpfile(Rtmpfile = 177) { iounit: u32, attr: Rgetattr }
    /// What Tcreateattrdir answers, and the name the file was made under: the one asked
    /// for, or, where that was taken, the conflict name beside it.
    Createbehind(Rcreatebehind = 179) { name: Vec<u8>, created: Rcreateattr, dir: Rgetattr }
    /// The server's optional behaviours: bits of [`crate::features`] (unknown bits: none
    /// the client knows of).
    Features(Rfeatures = 181) { features: u64 }
    /// The attributes of the file after the change, and where the change went: empty when
    /// onto the file itself; else the name of the copy beside it that got the change (a
    /// host program changed the file first), and `attr` is the file as the host has it.
    Setattrbehind(Rsetattrbehind = 183) { attr: Rgetattr, kept_as: Vec<u8> }
    /// Bytes written, then as Rsetattrbehind.
    Writebehind(Rwritebehind = 185) { count: u32, attr: Rgetattr, kept_as: Vec<u8> }
    /// What Tcreatebehind answers (`made.name`: the name the file is under, its own
    /// earlier try's included).
    Createbehindmarked(Rcreatebehindmarked = 187) { made: Rcreatebehind }
    /// The new directory's attributes (`valid` 0: made, but `newfid` not bound), then its
    /// parent's after the mkdir (`valid` 0 where they could not be taken).
    Mkdirattr(Rmkdirattr = 189) { attr: Rgetattr, dir: Rgetattr }
    /// The removed file's attributes through `newfid` (`valid` 0 without one), then the
    /// directory's after the removal (`valid` 0 where they could not be taken).
    Unlinkbehind(Runlinkbehind = 191) { attr: Rgetattr, dir: Rgetattr }
    /// The directory's attributes after the rename (`valid` 0 where they could not be
    /// taken).
    Renamebehind(Rrenamebehind = 193) { dir: Rgetattr }
    /// The removed directory's attributes through `newfid` (`valid` 0 without one), then
    /// the parent's after the removal (`valid` 0 where they could not be taken).
    Rmdirbehind(Rrmdirbehind = 195) { attr: Rgetattr, dir: Rgetattr }
    /// The name the directory was made under (the one asked for, or the conflict name
    /// beside it), its attributes through `newfid`, then its parent's after the mkdir
    /// (`valid` 0 where they could not be taken).
    Mkdirbehind(Rmkdirbehind = 197) { name: Vec<u8>, attr: Rgetattr, dir: Rgetattr }
}}

impl Tsetattr {
    /// A Tsetattr that changes nothing (`valid` = 0): set `valid` and the fields it selects.
    pub fn unchanged(fid: Fid) -> Self {
        Tsetattr {
            fid,
            valid: 0,
            mode: 0,
            uid: 0,
            gid: 0,
            size: 0,
            atime_sec: 0,
            atime_nsec: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
        }
    }
}

/// No attributes: every field zero, `valid` 0 (how Rreaddirattr lists "." and "..").
impl Default for Rgetattr {
    fn default() -> Self {
        Rgetattr {
            valid: 0,
            qid: Qid::default(),
            mode: 0,
            uid: 0,
            gid: 0,
            nlink: 0,
            rdev: 0,
            size: 0,
            blksize: 0,
            blocks: 0,
            atime_sec: 0,
            atime_nsec: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
            ctime_sec: 0,
            ctime_nsec: 0,
            btime_sec: 0,
            btime_nsec: 0,
            gen: 0,
            data_version: 0,
        }
    }
}

impl Rmessage {
    /// An error reply carrying `errno`.
    pub fn error(errno: i32) -> Self {
        Rmessage::Lerror(Rlerror {
            ecode: errno as u32,
        })
    }
}
