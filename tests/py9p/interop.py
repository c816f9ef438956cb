#!/usr/bin/env python3
"""Protocol-level checks of `crossfs serve` through py9p (PyPI `p9fs`), a 9P client that shares
no code with crossfs.

Usage: interop.py HOST PORT EXPORT [--max-msize N]

N is the largest msize the server grants (its --msize; 1048576 if not given). EXPORT is the exported directory as this host sees it: file contents and os.stat() results are
compared with what the server reports. tests/py9p_interop.rs prepares it with:
    exists_dir/            a directory holding `inner`
    dir500/                500 empty files f000 .. f499
    big.bin                a few MiB of data, not a multiple of any msize
    stat_me                a small file whose mtime has nanoseconds

Prints one line per check (`ok: ...` or `FAIL: ...`), then `N passed, N failed`, and exits
non-zero if any check failed. Every socket has a timeout, so a server that stops answering
fails the run instead of hanging it.
"""

import errno
import hashlib
import os
import socket
import stat
import sys
import traceback

from py9p import py9p

# 9P2000.L open flags (Linux's generic values, as the protocol defines them).
L_RDONLY = 0o0
L_RDWR = 0o2
L_CREATE = 0o100
L_DIRECTORY = 0o200000

# Bytes of an Rread or Rreaddir before its payload: size[4] type[1] tag[2] count[4].
RREAD_HEADER = 11

passed = 0
failed = 0


def report(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {what}", flush=True)
    else:
        failed += 1
        suffix = f" ({detail})" if detail else ""
        print(f"FAIL: {what}{suffix}", flush=True)


def errname(code):
    return errno.errorcode.get(code, str(code)) if isinstance(code, int) else repr(code)


def expect_errno(what, want, call):
    """Runs `call`, which must fail with Rlerror `want`."""
    try:
        reply = call()
    except py9p.RpcError as e:
        got = e.args[0] if e.args else None
        report(got == want, what, f"got Rlerror {errname(got)}, want {errname(want)}")
        return
    report(False, what, f"succeeded ({py9p.cmdName.get(reply.type, reply.type)}), "
           f"want Rlerror {errname(want)}")


def last_frame_size(client):
    """Size of the last reply the client received, header included. py9p's Marshal9P keeps the
    frame minus its size field in its buffer after decoding it."""
    return client.fd.marshal.length + 4


class Session:
    def __init__(self, host, port, export, max_msize):
        self.host, self.port, self.export = host, port, export
        self.max_msize = max_msize

    def connect(self, msize):
        sock = socket.create_connection((self.host, self.port), timeout=30)
        return py9p.Client(sock, py9p.Credentials("py9p"), ver=py9p.Version.v9P2000L,
                           msize=msize)

    def host_path(self, *names):
        return os.path.join(self.export, *names)


def close(client):
    client.fd.close()


def raw(client, ftype, **fields):
    """Sends a request built field by field (py9p's helpers clamp counts and pick fields)."""
    fcall = py9p.Fcall(ftype)
    for k, v in fields.items():
        setattr(fcall, k, v)
    return client._rpc(fcall)


def check_msize(s):
    for asked, want in [(8 << 20, s.max_msize), (1 << 20, min(1 << 20, s.max_msize)),
                        (64 << 10, 65536), (8192, 8192), (4096, 4096)]:
        c = s.connect(asked)
        report(c.msize == want, f"msize: asked {asked}, granted {want}",
               f"got {c.msize}")
        close(c)
    # Below 4096 the server refuses the version (py9p's login raises on the mismatch).
    try:
        c = s.connect(4095)
        report(False, "msize 4095 is refused", f"negotiated {c.msize}")
        close(c)
    except py9p.VersionError as e:
        report("unknown" in str(e), "msize 4095 is refused with version `unknown`", str(e))


def check_version_rules(s):
    c = s.connect(8192)
    r = raw(c, py9p.Tversion, msize=8192, version=b"9P2000.u")
    report(r.version == b"unknown", "Tversion 9P2000.u is answered `unknown`",
           f"got {r.version!r}")
    expect_errno("a request after a refused Tversion gets EPROTO", errno.EPROTO,
                 lambda: c._getattr(c.ROOT))
    r = raw(c, py9p.Tversion, msize=8192, version=b"9P2000.L")
    report(r.version == b"9P2000.L" and r.msize == 8192,
           "a second Tversion renegotiates 9P2000.L", f"got {r.version!r} {r.msize}")
    expect_errno("Tversion clunked the fids attached before it", errno.EBADF,
                 lambda: c._getattr(c.ROOT))
    close(c)


def check_walks(s):
    c = s.connect(65536)
    r = c._walk(c.ROOT, 100, ["exists_dir", "missing", "x"])
    report(len(r.wqid) == 1 and (r.wqid[0].type & 0xFF) == py9p.QTDIR,
           "partial walk exists_dir/missing/x returns 1 directory qid",
           f"got {r.wqid}")
    expect_errno("newfid of a partial walk stays unbound (getattr)", errno.EBADF,
                 lambda: c._getattr(100))
    expect_errno("newfid of a partial walk stays unbound (clunk)", errno.EBADF,
                 lambda: c._clunk(100))
    expect_errno("walk whose first name is missing: ENOENT", errno.ENOENT,
                 lambda: c._walk(c.ROOT, 101, ["missing", "x"]))
    expect_errno("newfid of a failed walk stays unbound", errno.EBADF,
                 lambda: c._getattr(101))

    r = c._walk(c.ROOT, 102, ["exists_dir", "inner"])
    report(len(r.wqid) == 2 and (r.wqid[1].type & 0xFF) == py9p.QTFILE,
           "full walk exists_dir/inner returns 2 qids, the last a file", f"got {r.wqid}")
    want_ino = os.stat(s.host_path("exists_dir", "inner")).st_ino
    report(r.wqid[1].path == want_ino, "qid path is the host inode number",
           f"got {r.wqid[1].path}, want {want_ino}")
    c._clunk(102)

    for name in ["..", ".", "", "a/b"]:
        expect_errno(f"walk to {name!r} refused with EINVAL", errno.EINVAL,
                     lambda: c._walk(c.ROOT, 103, [name]))
        expect_errno(f"newfid of the refused walk to {name!r} stays unbound", errno.EBADF,
                     lambda: c._getattr(103))
    # Names are all checked before any is used: no partial walk up to the bad one.
    expect_errno("walk exists_dir/.. refused whole with EINVAL", errno.EINVAL,
                 lambda: c._walk(c.ROOT, 104, ["exists_dir", ".."]))
    expect_errno("walk to a newfid already in use: EBADF", errno.EBADF,
                 lambda: c._walk(c.ROOT, c.CWD, ["exists_dir"]))
    close(c)


def check_create_names(s):
    c = s.connect(65536)
    before = sorted(os.listdir(s.export)), sorted(os.listdir(s.host_path("exists_dir")))
    c._walk(c.ROOT, 200, [])
    for name in ["..", ".", "", "exists_dir/evil"]:
        expect_errno(f"lcreate {name!r} refused with EINVAL", errno.EINVAL,
                     lambda: c._lcreate(200, name, L_RDWR | L_CREATE, 0o644, 0))
        expect_errno(f"mkdir {name!r} refused with EINVAL", errno.EINVAL,
                     lambda: c._mkdir(200, name, 0o755))
    after = sorted(os.listdir(s.export)), sorted(os.listdir(s.host_path("exists_dir")))
    report(before == after, "refused creates changed nothing on the host",
           f"before {before}, after {after}")

    # The same messages with good names work, so the refusals above were about the names.
    r = c._mkdir(200, "made_by_py9p", 0o750)
    st = os.lstat(s.host_path("made_by_py9p"))
    report(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o750
           and r.qid.path == st.st_ino,
           "mkdir made_by_py9p: a 0750 directory on the host with the qid's inode",
           f"mode {oct(st.st_mode)}, ino {st.st_ino}, qid {r.qid}")
    r = c._lcreate(200, "created_by_py9p", L_RDWR | L_CREATE, 0o640, 0)
    data = bytes(range(256)) * 40
    w = c._write(200, 0, data)
    report(w.count == len(data), "write through the created fid", f"wrote {w.count}")
    with open(s.host_path("created_by_py9p"), "rb") as f:
        on_host = f.read()
    st = os.stat(s.host_path("created_by_py9p"))
    report(on_host == data and stat.S_IMODE(st.st_mode) == 0o640,
           "lcreate + write: the host sees a 0640 file with the bytes written",
           f"{len(on_host)} bytes, mode {oct(st.st_mode)}")
    c._clunk(200)
    close(c)


def check_reply_sizes(s):
    msize = 8192
    c = s.connect(msize)
    with open(s.host_path("big.bin"), "rb") as f:
        content = f.read()

    c._walk(c.ROOT, 300, ["big.bin"])
    c._lopen(300, L_RDONLY)
    r = raw(c, py9p.Tread, fid=300, offset=0, count=100000)
    size = last_frame_size(c)
    report(0 < len(r.data) <= msize - RREAD_HEADER - 1 and size < msize,
           f"Tread count 100000 at msize {msize}: reply strictly below msize",
           f"{len(r.data)} bytes of data, frame {size}")
    report(r.data == content[:len(r.data)], "the clamped read returns the file's first bytes")
    r = raw(c, py9p.Tread, fid=300, offset=len(content) - 100, count=100000)
    report(r.data == content[-100:], "a read across EOF returns just the tail",
           f"{len(r.data)} bytes")
    r = raw(c, py9p.Tread, fid=300, offset=len(content), count=100000)
    report(r.data == b"", "a read at EOF returns no data", f"{len(r.data)} bytes")
    c._clunk(300)

    c._walk(c.ROOT, 301, ["dir500"])
    c._lopen(301, L_RDONLY | L_DIRECTORY)
    offset, names, replies, biggest = 0, [], 0, 0
    while replies < 1000:
        r = raw(c, py9p.Treaddir, fid=301, offset=offset, count=100000)
        replies += 1
        biggest = max(biggest, last_frame_size(c))
        if not r.stat:
            break
        names.extend(e.name for e in r.stat)
        offset = r.stat[-1].offset
    report(biggest < msize and replies > 2,
           f"Treaddir count 100000 at msize {msize}: every reply strictly below msize",
           f"largest frame {biggest}, {replies} replies")
    listed = [n for n in names if n not in (".", "..")]
    want = [f"f{i:03}" for i in range(500)]
    dups = sorted({n for n in listed if listed.count(n) > 1})
    report(sorted(listed) == want and not dups,
           "readdir by offsets lists all 500 names exactly once",
           f"{len(listed)} names, duplicates {dups[:5]}, missing "
           f"{sorted(set(want) - set(listed))[:5]}")
    report(names.count(".") == 1 and names.count("..") == 1,
           "readdir lists . and .. once each")
    c._clunk(301)
    close(c)


def check_content(s):
    with open(s.host_path("big.bin"), "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    for msize in [1 << 20, 65536]:
        c = s.connect(msize)
        c._walk(c.ROOT, 400, ["big.bin"])
        c._lopen(400, L_RDONLY)
        h, offset = hashlib.sha256(), 0
        while True:
            r = c._read(400, offset, msize)
            if not r.data:
                break
            h.update(r.data)
            offset += len(r.data)
        got = h.hexdigest()
        report(got == want, f"big.bin ({offset} bytes) read at msize {msize} has the host's "
               f"sha256", f"got {got[:16]}, want {want[:16]}")
        c._clunk(400)
        close(c)


def check_getattr(s):
    c = s.connect(65536)
    for name in ["stat_me", "exists_dir", "big.bin"]:
        c._walk(c.ROOT, 500, [name])
        r = c._getattr(500)
        a = r.stat[0]
        st = os.stat(s.host_path(name))
        want = (st.st_mode, st.st_uid, st.st_gid, st.st_size,
                divmod(st.st_mtime_ns, 1_000_000_000))
        got = (a.mode, a.uid, a.gid, a.length, tuple(a.mtime))
        report(got == want, f"getattr {name}: mode, uid, gid, size, mtime (s, ns) match os.stat",
               f"got {got}, want {want}")
        c._clunk(500)
    mtime_ns = os.stat(s.host_path("stat_me")).st_mtime_ns
    report(mtime_ns % 1_000_000_000 != 0, "stat_me's mtime has nanoseconds (test setup)")
    close(c)


def check_unknown_fids(s):
    c = s.connect(65536)
    expect_errno("getattr of an unknown fid: EBADF", errno.EBADF, lambda: c._getattr(4242))
    expect_errno("clunk of an unknown fid: EBADF", errno.EBADF, lambda: c._clunk(4242))
    expect_errno("walk from an unknown fid: EBADF", errno.EBADF,
                 lambda: c._walk(4242, 4243, []))
    expect_errno("lopen of an unknown fid: EBADF", errno.EBADF,
                 lambda: c._lopen(4242, L_RDONLY))
    expect_errno("read of an unknown fid: EBADF", errno.EBADF,
                 lambda: raw(c, py9p.Tread, fid=4242, offset=0, count=10))
    expect_errno("clunk twice: the second is EBADF", errno.EBADF,
                 lambda: (c._walk(c.ROOT, 600, []), c._clunk(600), c._clunk(600))[-1])
    expect_errno("read of a fid never opened: EBADF", errno.EBADF,
                 lambda: (c._walk(c.ROOT, 601, ["big.bin"]),
                          raw(c, py9p.Tread, fid=601, offset=0, count=10))[-1])
    r = c._walk(c.ROOT, 602, ["exists_dir"])
    report(len(r.wqid) == 1, "the connection still works after all those errors")
    close(c)


def main():
    args = sys.argv[1:]
    max_msize = 1 << 20
    if len(args) == 5 and args[3] == "--max-msize":
        max_msize = int(args.pop(4))
        args.pop(3)
    if len(args) != 3:
        print("usage: interop.py HOST PORT EXPORT [--max-msize N]", file=sys.stderr)
        sys.exit(2)
    s = Session(args[0], int(args[1]), args[2], max_msize)
    for group in [check_msize, check_version_rules, check_walks, check_create_names,
                  check_reply_sizes, check_content, check_getattr, check_unknown_fids]:
        try:
            group(s)
        except Exception as e:  # one broken group must not hide the others
            traceback.print_exc(file=sys.stdout)
            report(False, f"{group.__name__} raised", f"{type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
