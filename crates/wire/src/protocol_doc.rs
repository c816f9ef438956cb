//! docs/protocol.md, generated from the message table so the two cannot disagree.

use std::fmt::Write;

use crate::messages::{MessageInfo, Rmessage, Tmessage};
use crate::types::{EXTENSION_FIRST, VERSION_CROSSFS};

const PREAMBLE: &str = r#"# The crossfs extension of 9P2000.L

Generated from `crates/wire/src/messages.rs` by
`cargo run -p crossfs-wire --example protocol_doc > docs/protocol.md`; a test fails when this
file and the table disagree.

crossfs speaks 9P2000.L as Linux defines it (`include/net/9p/9p.h`, `net/9p/client.c`), so
the kernel's own client, diod and py9p work unchanged. Between `crossfs mount` and
`crossfs serve` it adds a few compound messages, each doing in one round trip what plain
9P2000.L does in two or three, a listing that carries every entry's attributes, and
`Tfallocate` and `Ttmpfile`, for the fallocate(2) and `O_TMPFILE` that 9P2000.L has no
message for.

## Negotiation
- The client sends `Tversion` with the version string `9P2000.L.crossfs`.
- A crossfs server answers `Rversion` with `9P2000.L.crossfs`: both sides may use the
  messages below on this connection.
- Any other answer starting with `9P2000.L` (an older crossfs, QEMU, and any server that,
  like Linux's client, accepts a version that starts with `9P2000.L`) means plain 9P2000.L.
- A server that answers `unknown` or `Rlerror` (diod 1.0.24: EIO) gets a second `Tversion` with
  `9P2000.L` on the same connection, as 9P allows, and the connection is plain 9P2000.L.
- The extension is negotiated again on every connection, including after a reconnect.
  A client that did not negotiate it never sends its messages; a server receiving one
  on a plain connection answers it all the same (a plain client never sends them).
- Right after a `9P2000.L.crossfs` Rversion, the client sends `Tfeatures` (tag 0) and
  learns the server's optional behaviours from `Rfeatures`; a crossfs that predates it
  answers `EOPNOTSUPP`, which means none. The first, `KILL_SUIDGID` (1): the
  server honours the `Tsetattr` valid bit `KILL_SUIDGID` (`0x80000000`, in `Tsetattrget`
  too): after the other changes succeed, it clears `S_ISUID`, and `S_ISGID` where group
  execute is set, of a file that is not a directory or symlink, as Linux does for a write
  or truncate by a caller without `CAP_FSETID` (a server running as root has it, so its
  own writes and truncates keep them). Alone, the bit asks for that only: `crossfs mount`
  sends it after a write the kernel flagged `FUSE_WRITE_KILL_SUIDGID` whose answer shows
  such bits, and with a truncate or chown flagged `FATTR_KILL_SUIDGID`, and negotiates
  `FUSE_HANDLE_KILLPRIV_V2` only with a server that has it. A server without it ignores
  the bit. The others say that the server takes a message, which a client sends only
  then: `CONDITIONAL_BEHIND` (2, "Changes sent behind" below), `MARKED_CREATE` (4,
  `Tcreatebehindmarked`), `MKDIR_ATTR` (8, `Tmkdirattr`), `UNLINK_BEHIND` (16,
  `Tunlinkbehind`), `RENAME_BEHIND` (32, `Trenamebehind`), `RMDIR_BEHIND` (64,
  `Trmdirbehind`), `MKDIR_BEHIND` (128, `Tmkdirbehind`).

## Layouts
Every message is `size[4] type[1] tag[2]` followed by its fields in the order shown,
little-endian: `u8`/`u16`/`u32`/`u64` are 1/2/4/8 bytes, `Fid` is 4, `Qid` is
`type[1] version[4] path[8]`, `Vec<u8>` (a name or string) is `len[2]` and bytes,
`Data` is `len[4]` and bytes, `Vec<Vec<u8>>` is `count[2]` and that many strings (at most
16), `Vec<Qid>` is `count[2]` and that many qids. `Rgetattr` inside a reply is the body of
Rgetattr (`valid[8] qid[13] mode[4] uid[4] gid[4] nlink[8] rdev[8] size[8] blksize[8]
blocks[8] atime_sec[8] atime_nsec[8] mtime_sec[8] mtime_nsec[8] ctime_sec[8] ctime_nsec[8]
btime_sec[8] btime_nsec[8] gen[8] data_version[8]`, 153 bytes), and `Tsetattr` inside a
request is the body of Tsetattr.

An `Rreaddirattr` payload is a sequence of entries, each an Rreaddir entry
(`qid[13] offset[8] type[1] name[s]`) followed by the 153-byte attributes of the file it
names, taken with `lstat` beneath the directory. `offset` is the cookie to continue after
the entry. "." and ".." are listed as Treaddir lists them; "." with the directory's own
attributes, taken after the request's last read of its entries (an access time that
read moved shows; a client takes `valid` 0, as older servers send, for none), ".." with
attributes all zero (`valid` 0: none; `..` of the export's root is outside it). Entries that vanished between
the listing and their `lstat` are left out (any other failure to stat an entry fails the request: a listing never
leaves out a name a walk would find). The server fills each reply as far as `count` (and
msize) allow, so a reply that leaves room for another entry with a 255-byte name is the
last, and an empty payload means the end as well. Entries are never split across
replies: a `count` too small for the next entry is `EINVAL`, as getdents(2) says.
`fid` may be an unopened directory fid; the server opens the directory for the call.

An `Rreadfiles` payload is a sequence of files (`FileData`), each `name[s]`, the
153-byte attributes taken after the read, and `data[4 + n]`: the file's whole content,
or a symbolic link's target (read as Treadlink reads it, which moves the link's access
time).
Each name is reached as a walk reaches it (one component, beneath the directory, never
through a symlink) and opened `O_RDONLY|O_NOATIME`; a name that is missing, not a regular
file or link, larger than `max_each` (or than what is left of msize), changing while read, or
that the server may not open without moving its access time, is left out, silently: the
client reads such a file as usual. A name that is not one component fails the request
(`EINVAL`), as in a walk.

## Order
9P lets a server answer a connection's requests in any order. A crossfs server promises
one order, which `crossfs mount --changes behind` relies on to send changes without
waiting for their answers: it runs a `Tsetattr` or `Tsetattrget` that changes no size, and a
`Twrite` or `Twriteattr` of at most 65,536 bytes (`INLINE_WRITE_MAX`) through a file
opened without `O_DIRECT`, `O_SYNC` or `O_DSYNC`, and every `Tcreatebehind`,
`Tcreatebehindmarked`, `Tmkdirbehind`, `Tsetattrbehind`, `Twritebehind`, `Tunlinkbehind`,
`Trmdirbehind` and `Trenamebehind`, before it reads the connection's next request, and
answers them in the order they came. Every later request on the connection,
whatever it is, finds them done. A client must not assume this of any other server, or
for any other request (creates, reads and fsync may run on worker threads, in parallel).

## Changes sent behind, onto the file the client saw
A client that answered a change before sending it (`crossfs mount --changes behind`)
predicted it from the file as it last saw it, and a host program may have changed the
file since. `Tsetattrbehind` and `Twritebehind` (to a server whose `Rfeatures` has
`CONDITIONAL_BEHIND`) carry that base: the modification time, size, mode and owner the
client saw, or `mtime_sec` = 2^64 - 1 for "as this connection's previous change of the
file left it". The server makes the change onto the file only if the file is still as the
base says, or as a change through this connection left it (it remembers the last states
its changes left of the last 1,024 files, once the connection has sent a change behind).
Otherwise, for a regular file, it copies the file as it finds it beside it, as
`NAME.crossfs-conflict-N` (the lowest free `N` from 1; the file's permission bits and
owner), makes the change onto the copy and answers the copy's name in `kept_as`, with the
file's own attributes as the host has them; the connection's next changes of the file
based on "the previous change" go to the same copy, until one is based on the file as the
client sees it again. So the host's file is never changed by them, and every byte and mode
the client set is in the copy, on top of the host's version. A change based on "the
previous change" of a file this connection has no record of (that change went on an
earlier connection, which was lost) is made onto the file as it stands. Any other kind of file is
left as it is, and the change fails with `ESTALE`. What is compared misses a host change
that leaves all five as they were (a write of the same size within one tick of a clock
coarser than the file system's timestamps), and one made between the server's check and
its change (microseconds, on the connection's reader).

`Tunlinkbehind` (to a server whose `Rfeatures` has `UNLINK_BEHIND`) removes `name` from
`dirfd` only while the name is the file whose `qid.path` is `path` and that file is as
`base` says (or as this connection's changes left it); first it binds `newfid` (unless
`NOFID`) to the file, so that the client's open files of it go on. Otherwise nothing is
removed or bound, and it fails with `ESTALE`: a host program changed the file, or put
another under the name, first. It never removes a directory (`ESTALE`).

`Trmdirbehind` (to a server whose `Rfeatures` has `RMDIR_BEHIND`) removes the directory
`name` from `dirfd` only while the name is the directory whose `qid.path` is `path`
(otherwise `ESTALE`: a host program replaced it, or it is not a directory) and it is
empty (otherwise `ENOTEMPTY`: a host program put something in it first). It binds
`newfid` first, as Tunlinkbehind does, and unbinds it if the removal fails.

`Tmkdirbehind` (to a server whose `Rfeatures` has `MKDIR_BEHIND`) makes the directory as
Tmkdirattr does, binds `newfid` to it (the client sends what it makes in the directory next
through that fid, without waiting), and gives it the access time `atime_sec`.`atime_nsec`,
the client's choice. It never uses a name a host program took: where `name` is taken, the
directory is made beside it as `NAME.crossfs-conflict-N` (the lowest free `N` from 1), so
that what the client sends into it next is kept there, and the reply's `name` says which
name it got. The exception is a taken name that holds a directory with that access time:
the same mkdir sent again after a lost connection, which an earlier try made; it is bound
and answered as made. The directory is made with no permission bits, marked, then given
its mode, so that one an earlier try made and did not mark (a server killed in between)
has mode 0 under the name: it is taken as made too, marked and given its mode. (A listing
of the directory on the host may move its access time before the try is sent again: the
directory is then made beside it as for a host's name.)

`Trenamebehind` (to a server whose `Rfeatures` has `RENAME_BEHIND`) renames `oldname` to
`newname` within the directory `dirfd` only while `oldname` is the file whose `qid.path`
is `path` (otherwise `ESTALE`; a host program's change of the file's data or mode does
not stop it: a rename overwrites neither), and never over another file: a taken
`newname` fails with `EEXIST` and nothing moves (a host program put a file there first).
It never renames a directory (`ESTALE`). Sent again after a lost
connection, a rename the lost connection made already (`oldname` gone, `newname` the
file) succeeds without moving anything.

## Errors
Each compound succeeds or fails whole, with `Rlerror` carrying the errno of the step that
failed, and binds no new fid when it fails: `Twalkgetattr`, `Twalkopen`, `Twalkread` and
`Twalkreaddirattr` fail with `ENOENT` (or the step's errno) if any name cannot be walked, where Twalk would
answer with fewer qids. `Twalkread` fails like Tlopen, or like Tread (a directory:
`EISDIR`; a write-only open: `EBADF`), and then leaves `newfid` unbound; its `count` is
cut to what msize leaves room for, as Tread's is, and reading at or past the end gives
no data, successfully. `Twalkreaddirattr` fails like Treaddirattr (a file: `ENOTDIR`),
and its entries are cut to what msize leaves room for besides the qids walked.
`Tcreateattr` fails like Tlcreate (`EEXIST`, `EACCES`, ...) and binds neither
fid. `Tcreatebehind` fails like Tcreateattrdir, but never with `EEXIST` for a taken name:
it makes the file beside it as `NAME.crossfs-conflict-N` instead (the lowest `N` from 1
that is free; `ENAMETOOLONG` where that name is too long) and answers the name it used;
without `O_EXCL` in its flags it is `EINVAL`. `Tcreatebehindmarked` fails as Tcreatebehind
does (and with `EINVAL` for `atime_nsec` of a second or more), and where the taken name
holds a regular file with its access time, binds and opens that one (never truncating it)
and answers it as made. `Tsetattrget` fails like Tsetattr; the attributes are only sent on success.
`Twriteattr` fails like Twrite (a fid not open for writing: `EBADF`; a read-only export:
`EROFS`); once written, it succeeds, and a file whose attributes could not be read then
comes with `valid` 0. `Tsetattrbehind` and `Twritebehind` fail as Tsetattrget and
Twriteattr do, and as making the copy fails (`ENOSPC`, `ENAMETOOLONG`; a copy that fails
is removed). `Tunlinkbehind` fails like Tunlinkat (`ENOENT`, `EROFS`, ...), with `EBADF`
for a `newfid` in use, and with `ESTALE` as above; once the name is gone it succeeds, and
attributes it could not read come with `valid` 0. `Trmdirbehind` fails as Tunlinkbehind
does, and with `ENOTEMPTY` as above. `Tmkdirbehind` fails like Tmkdirattr (`EACCES`,
`ENOSPC`, `EROFS`, ...; `EBADF` for a `newfid` in use, `EINVAL` for `atime_nsec` of a
second or more, `ENAMETOOLONG` where a conflict name is too long), with `ENOENT` for a
directory a host program removed before it was bound, and never with `EEXIST` for a
taken name; once made and bound it succeeds, unmarked if the access time could not be
set. `Trenamebehind` fails like Trenameat
(`ENOENT`, `EROFS`, ...), with `ESTALE` and `EEXIST` as above; once renamed it succeeds,
and a directory whose attributes could not be read comes with `valid` 0.
`Tunlinkatattr`, `Trenameatattr` and `Tcreateattrdir` fail like Tunlinkat, Trenameat and
Tcreateattr; once the change is made they succeed, and a directory whose attributes could not be read afterwards comes with
`valid` 0 (a client then asks with Tgetattr if it needs them). A server that predates them
answers `EOPNOTSUPP`, and a client falls back to the plain messages. The same
confinement, name rules (no "", ".", "..", nor "/" in a name), limits and statistics apply
as to the plain messages the compound replaces: the server runs the same code for each step.

`Tfallocate` fails as fallocate(2) on the server's file fails: a fid not open for writing
is `EBADF`, a read-only export `EROFS`, a mode the export's file system lacks (or a bit
Linux does not know) `EOPNOTSUPP`, a fid that is not an open file `EBADF`.
A server that predates it, or a plain 9P2000.L connection, answers `EOPNOTSUPP`; a client
then answers fallocate `EOPNOTSUPP` itself, as a local file system without it would.

`Ttmpfile` fails as open(2) with `O_TMPFILE` in the server's directory fails, binding
nothing: a read-only export is `EROFS`, an export whose file system has no `O_TMPFILE`
`EOPNOTSUPP`, an access mode that does not write `EINVAL`, a `dfid` that is not a
directory `ENOTDIR`, a `newfid` in use `EBADF`. The set-id bits and owner follow Tlcreate's
rules. The file gets a name only by a Tlink of `newfid` (into any directory of the
export, with the name rules of every link; a file made with `O_EXCL`: `ENOENT`), and
vanishes when `newfid` is clunked (or the connection ends) without one. A crossfs that
predates it answers `EOPNOTSUPP`, which is what Linux reports for a file system without
`O_TMPFILE`; a client sends it only where the extension was negotiated.
"#;

fn table(out: &mut String, title: &str, rows: &[MessageInfo], extension: bool) {
    let _ = writeln!(out, "\n## {title}\n");
    let _ = writeln!(out, "| type | message | fields | meaning |");
    let _ = writeln!(out, "|---|---|---|---|");
    for m in rows
        .iter()
        .filter(|m| (m.number >= EXTENSION_FIRST) == extension)
    {
        let fields = if m.fields.is_empty() {
            "(none)".to_string()
        } else {
            let fields = m.fields.split_whitespace().collect::<Vec<_>>().join(" ");
            format!("`{}`", fields.replace(" :", ":").replace(" >", ">"))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            m.number,
            m.name,
            fields,
            m.doc_text().replace("crate::", "")
        );
    }
}

/// The text of docs/protocol.md.
pub fn protocol_doc() -> String {
    let mut out = PREAMBLE.replace(
        "`9P2000.L.crossfs`",
        &format!("`{}`", String::from_utf8_lossy(VERSION_CROSSFS)),
    );
    table(&mut out, "Extension requests", Tmessage::TABLE, true);
    table(&mut out, "Extension replies", Rmessage::TABLE, true);
    let _ = writeln!(
        out,
        "\n## The plain 9P2000.L messages, for reference\n\nType numbers below {EXTENSION_FIRST}; \
         each reply is its request's number plus one (Rlerror is 7)."
    );
    table(&mut out, "Requests", Tmessage::TABLE, false);
    table(&mut out, "Replies", Rmessage::TABLE, false);
    out
}
