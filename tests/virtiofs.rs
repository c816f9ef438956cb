//! The virtio door: `crossfs serve --listen vhost-user-fs:SOCK` as the backend of a
//! vhost-user-fs-pci device in a QEMU guest (TCG), mounted with the guest kernel's own
//! virtiofs driver. The ops script must print what it prints on a local directory; a file
//! opened with `O_TMPFILE`, written and linked reaches the host under its name, one never
//! linked leaves nothing; large
//! reads must arrive as FUSE READs of the negotiated size; a missing name must be looked up
//! once however often it is asked for; a VMM that goes away and comes back is served
//! again by the same process; and in the guest, fsx finds no corruption and pjdfstest passes
//! everything it passes on a local directory of the host, but the README's differences.
//! crossfs started as libvirt starts virtiofsd (`--fd=3` of a listening socket,
//! `--shared-dir`, ...) serves the ops script the same way.
//!
//! Needs the guest image with the virtiofs module (`scripts/guest/build-image.sh`, run by
//! `scripts/test`); the test fails, not skips, without it.

mod common;
mod tools;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Starts `crossfs serve EXPORT --listen vhost-user-fs:SOCK` with `extra` options and waits
/// for the vhost-user socket.
fn serve_virtiofs(export: &Path, sock: &Path, extra: &[&str]) -> Serve {
    let serve = Serve::start(export, &format!("vhost-user-fs:{}", sock.display()), extra);
    wait_for_socket(sock);
    serve
}

fn wait_for_socket(sock: &Path) {
    // Not probed by connecting: the device would take the probe for a VMM.
    wait_until("the vhost-user socket", Duration::from_secs(20), || {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(sock).is_ok_and(|m| m.file_type().is_socket())
    });
}

/// Boots the guest with a vhost-user-fs device on `sock` (tag `crossfs`) and `script` as its
/// test; returns what it printed.
fn run_guest(sock: &Path, script: &str) -> String {
    run_guest_with(sock, script, &[])
}

/// As [`run_guest`], with more `run.sh` arguments (`--add`, `--add-binary`).
fn run_guest_with(sock: &Path, script: &str, extra: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    // No 9P here: the forward is never used.
    let out = guest_command(dir.path(), script, 1, 150)
        .args(["--mem", "768"])
        .args(extra)
        .arg("--virtiofs")
        .arg(format!("{}:crossfs", sock.display()))
        .output()
        .expect("running scripts/guest/run.sh");
    guest_stdout(out)
}

/// Mounts the device, raises the mount's readahead to 1 MiB (buffered reads are otherwise
/// capped at 128 KiB whatever FUSE negotiated), and reads the 64 MiB file `big`.
const READ_BIG: &str = r#"
d=$(stat -c %d /mnt)
bdi=$(( (d >> 8) & 0xfff )):$(( (d & 0xff) | ((d >> 12) & 0xfff00) ))
echo 1024 > /sys/class/bdi/$bdi/read_ahead_kb
echo "=== big begin"
md5sum /mnt/big
echo "=== big end"
"#;

/// The 64 MiB file the guest reads, and its md5sum line as the guest prints it.
fn make_big(export: &Path) -> String {
    let data: Vec<u8> = (0..64u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(export.join("big"), &data).unwrap();
    let out = Command::new("md5sum")
        .arg(export.join("big"))
        .output()
        .unwrap();
    let sum = String::from_utf8(out.stdout).unwrap();
    format!("{}  /mnt/big\n", sum.split_whitespace().next().unwrap())
}

/// tests/scripts/tmpfile.c, built static for the guest (busybox has nothing that opens a
/// file with `O_TMPFILE` or links one by its descriptor).
fn tmpfile_helper(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("tmpfile");
    run_ok(
        Command::new("cc")
            .args(["-static", "-O2", "-o"])
            .arg(&out)
            .arg(repo_root().join("tests/scripts/tmpfile.c")),
    );
    out
}

/// What the guest part with the helper prints: a tmpfile written, linked and read back by
/// its name, another closed without a name, and the directory holding only the first.
const TMPFILE_GUEST: &str = r#"
mkdir /mnt/tmpfile
echo "=== tmpfile begin"
tmpfile /mnt/tmpfile linked "made unnamed"
tmpfile /mnt/tmpfile - "never linked"
ls -a1 /mnt/tmpfile
echo "=== tmpfile end"
"#;

const TMPFILE_PRINTED: &str = "tmpfile: made, 12 bytes, 0 links
tmpfile: linked as linked, 1 links
tmpfile: read back made unnamed
tmpfile: made, 12 bytes, 0 links
tmpfile: closed unlinked
.
..
linked
";

fn read_stats(serve: &Serve) -> serde_json::Value {
    let stats = serve.stats();
    let dev = stats["virtiofs"][0].clone();
    assert!(dev.is_object(), "no virtiofs section in the stats: {stats}");
    dev
}

#[test]
fn virtiofs_guest_sees_what_a_local_program_sees() {
    let work = tempfile::tempdir().unwrap();
    let (export, local) = (work.path().join("export"), work.path().join("local"));
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&local).unwrap();
    let expected = run_ops_script(&local);
    let sock = work.path().join("vfs.sock");
    let serve = serve_virtiofs(&export, &sock, &[]);
    let helper = tmpfile_helper(work.path());

    let stdout = run_guest_with(
        &sock,
        &format!(
            r#"
set -e
mount -t virtiofs crossfs /mnt
echo "=== ops begin"
sh /test/ops.sh /mnt
echo "=== ops end"
{TMPFILE_GUEST}
umount /mnt
"#
        ),
        &[
            "--add-binary".into(),
            format!("{}:/usr/local/bin/tmpfile", helper.display()),
        ],
    );
    let through = section(&stdout, "ops");
    println!("--- ops.sh through virtiofs ---\n{through}");
    assert_same_output("local ext4", &expected, "virtiofs", through);
    // O_TMPFILE in the guest is FUSE_TMPFILE: the linked file is on the host with its data,
    // the other left nothing.
    assert_eq!(section(&stdout, "tmpfile"), TMPFILE_PRINTED);
    let names: Vec<_> = std::fs::read_dir(export.join("tmpfile"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["linked"]);
    assert_eq!(
        std::fs::read(export.join("tmpfile/linked")).unwrap(),
        b"made unnamed"
    );
    let tmpfiles = &read_stats(&serve)["ops"]["FUSE_TMPFILE"];
    assert_eq!(
        (&tmpfiles["count"], &tmpfiles["errors"]),
        (&2.into(), &0.into())
    );

    // The same process serves a new VMM on the same socket, here with a large read.
    let md5 = make_big(&export);
    let before = read_stats(&serve);
    let stdout = run_guest(
        &sock,
        &format!("set -e\nmount -t virtiofs crossfs /mnt\n{READ_BIG}\numount /mnt\n"),
    );
    assert_eq!(section(&stdout, "big"), md5);
    let after = read_stats(&serve);
    println!("virtiofs stats after the second guest:\n{after:#}");
    assert_eq!(after["init"]["max_pages"], 256, "min(256, 1024 - 4)");
    assert_eq!(after["init"]["queue_size"], 1024);
    assert_eq!(
        after["connections"], 2,
        "the first VMM came and went, then a second"
    );
    let read = &after["ops"]["FUSE_READ"];
    assert_eq!(read["max_data"], 1 << 20, "{read}");
    let mib_reads = read["sizes"]["1048576"].as_u64().unwrap_or(0)
        - before["ops"]["FUSE_READ"]["sizes"]["1048576"]
            .as_u64()
            .unwrap_or(0);
    // 64 MiB in 1 MiB requests (the first readahead windows are smaller).
    assert!(
        (56..=64).contains(&mib_reads),
        "READs of 1 MiB for a 64 MiB file: {mib_reads}: {read}"
    );
    assert_eq!(after["malformed"], 0);
}

/// The sizes around every boundary of the virtio door's data paths: 0, 1, a page and either
/// side of it, 1 MiB (the largest READ and WRITE a guest sends: 256 pages, its kernel's
/// ceiling before 6.18, within the queue's 1024 - 4) and either side of it, 64 MiB and a
/// byte.
const BOUNDARY_SIZES: [usize; 9] = [
    0,
    1,
    4095,
    4096,
    4097,
    (1 << 20) - 1,
    1 << 20,
    (1 << 20) + 1,
    (64 << 20) + 1,
];

/// One guest boot for every size: files made on the host are read in the guest (through
/// its page cache, and with `O_DIRECT`, so that READs come at exactly the sizes read),
/// copied within the mount in writes of 1 MiB and of 4097 bytes (1 MiB for the 64 MiB one;
/// without writeback caching each write is a WRITE of its size, at its offset), and the
/// copies read back after the
/// guest dropped its caches, every read compared by md5 with the host's file; the copies on
/// the host equal the originals. Every byte of file data went straight
/// between the files and the guest's memory: the door's counters show the READ and WRITE
/// data on that path, and none copied.
#[test]
fn virtiofs_data_at_every_boundary_goes_straight_to_and_from_guest_memory() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir_all(export.join("r")).unwrap();
    let mut rng = Rng(0x5eed_1e55_c0ff_ee01);
    for size in BOUNDARY_SIZES {
        let data: Vec<u8> = (0..size).map(|_| rng.below(256) as u8).collect();
        std::fs::write(export.join(format!("r/{size}")), data).unwrap();
    }
    let md5 = |dir: &Path| {
        let out = run_ok(
            Command::new("sh")
                .arg("-c")
                .arg("md5sum *")
                .current_dir(dir),
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let expected = md5(&export.join("r"));
    let total: u64 = BOUNDARY_SIZES.iter().map(|&s| s as u64).sum();
    let sock = work.path().join("vfs.sock");
    let serve = serve_virtiofs(&export, &sock, &[]);
    let stdout = run_guest(
        &sock,
        r#"
set -e
mount -t virtiofs crossfs /mnt
d=$(stat -c %d /mnt)
echo 1024 > /sys/class/bdi/$(( (d >> 8) & 0xfff )):$(( (d & 0xff) | ((d >> 12) & 0xfff00) ))/read_ahead_kb
cd /mnt/r
echo "=== buffered begin"
md5sum *
echo "=== buffered end"
echo "=== direct begin"
for f in *; do echo "$(dd if=$f bs=1M iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)  $f"; done
echo "=== direct end"
mkdir /mnt/w /mnt/d
for f in *; do
    dd if=$f of=/mnt/w/$f bs=1M 2>/dev/null
    # 16,000 WRITEs for the largest file would cost a minute under TCG: 1 MiB ones do.
    bs=4097; [ $f -gt 2097152 ] && bs=1M
    dd if=$f of=/mnt/d/$f bs=$bs 2>/dev/null
done
cd /
sync; echo 3 > /proc/sys/vm/drop_caches
echo "=== back begin"
cd /mnt/w && md5sum *
echo "=== back end"
echo "=== back-4097 begin"
cd /mnt/d && md5sum *
echo "=== back-4097 end"
cd /
umount /mnt
"#,
    );
    for name in ["buffered", "direct", "back", "back-4097"] {
        assert_eq!(section(&stdout, name), expected, "{name}");
    }
    assert_eq!(
        md5(&export.join("w")),
        expected,
        "the copies in 1 MiB writes"
    );
    assert_eq!(
        md5(&export.join("d")),
        expected,
        "the copies in 4097-byte writes"
    );

    let dev = read_stats(&serve);
    println!("virtiofs stats after the boundary sizes:\n{dev:#}");
    let data = &dev["data"];
    let bytes = |key: &str| data[key].as_u64().unwrap_or_else(|| panic!("{key}: {dev}"));
    // Read in the guest: each original twice (buffered, direct), each copy once to make it
    // (read through the page cache the first pass filled: not counted) and once back.
    assert!(bytes("read_into_guest") >= 4 * total, "{data}");
    assert_eq!(bytes("read_copied"), 0, "{data}");
    assert!(bytes("write_from_guest") >= 2 * total, "{data}");
    assert_eq!(bytes("write_copied"), 0, "{data}");
    assert_eq!(dev["ops"]["FUSE_READ"]["max_data"], 1 << 20, "{dev}");
    assert_eq!(dev["ops"]["FUSE_WRITE"]["max_data"], 1 << 20, "{dev}");
    assert_eq!(dev["malformed"], 0);
}

/// Starts crossfs as libvirt starts virtiofsd: run under the name `virtiofsd`, handed the
/// vhost-user socket already listening as descriptor 3 (libvirt makes it where QEMU's
/// chardev points, and closes its own copy), with `--fd=3`, `--shared-dir` and the
/// options of a `<filesystem type='mount'><driver type='virtiofs'/>` with a cache mode, a
/// sandbox, extended attributes and a thread pool.
fn start_as_libvirt_starts_virtiofsd(
    work: &Path,
    export: &Path,
    sock: &Path,
) -> std::process::Child {
    use std::os::fd::AsRawFd;
    let bin = work.join("libexec");
    std::fs::create_dir(&bin).unwrap();
    let virtiofsd = bin.join("virtiofsd");
    std::os::unix::fs::symlink(crossfs_bin(), &virtiofsd).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(sock).unwrap();
    let raw = listener.as_raw_fd();
    let log = std::fs::File::create(work.join("virtiofsd.log")).unwrap();
    let mut cmd = Command::new(&virtiofsd);
    cmd.arg("--fd=3")
        .arg("--shared-dir")
        .arg(export)
        .args(["--cache", "auto", "--sandbox", "chroot", "--xattr"])
        .arg("--thread-pool-size=16")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    pass_as_fd3(&mut cmd, raw);
    let child = cmd.spawn().expect("starting crossfs as virtiofsd");
    // As libvirt (VIR_COMMAND_PASS_FD_CLOSE_PARENT): only the child holds the socket now.
    drop(listener);
    child
}

/// crossfs started as libvirt starts virtiofsd serves the guest: the ops script prints what
/// it prints on a local directory, and, as virtiofsd, the process exits once the VMM has
/// gone, saying in its log which options it accepted as already met.
#[test]
fn crossfs_as_virtiofsd_serves_a_guest_as_libvirt_starts_it() {
    let work = tempfile::tempdir().unwrap();
    let (export, local) = (work.path().join("export"), work.path().join("local"));
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&local).unwrap();
    let expected = run_ops_script(&local);
    let sock = work.path().join("vfs.sock");
    let mut child = start_as_libvirt_starts_virtiofsd(work.path(), &export, &sock);
    let stdout = run_guest(
        &sock,
        r#"
set -e
mount -t virtiofs crossfs /mnt
echo "=== ops begin"
sh /test/ops.sh /mnt
echo "=== ops end"
umount /mnt
"#,
    );
    let through = section(&stdout, "ops");
    assert_same_output("local ext4", &expected, "crossfs as virtiofsd", through);
    // QEMU has exited: so must the backend, by itself and cleanly.
    let mut status = None;
    wait_until(
        "crossfs as virtiofsd to exit after the VMM",
        Duration::from_secs(30),
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
    );
    let log = std::fs::read_to_string(work.path().join("virtiofsd.log")).unwrap();
    println!("--- crossfs as virtiofsd ---\n{log}");
    assert!(status.unwrap().success(), "{log}");
    assert!(
        log.contains("--sandbox=chroot: crossfs makes no namespace and no chroot"),
        "{log}"
    );
    assert!(log.contains("vhost-user-fs: VMM disconnected"), "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

/// A tmpfs mounted on the host inside the shared directory, unmounted again on drop.
struct HostTmpfs(std::path::PathBuf);

impl HostTmpfs {
    fn mount(at: &Path) -> HostTmpfs {
        std::fs::create_dir(at).unwrap();
        run_ok(Command::new("mount").args(["-t", "tmpfs", "tmpfs"]).arg(at));
        HostTmpfs(at.to_path_buf())
    }
}

impl Drop for HostTmpfs {
    fn drop(&mut self) {
        // Lazily: a server that failed the test may still hold descriptors in it.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// As virtiofsd by default, crossfs as virtiofsd announces a directory on another file
/// system than its parent's (a tmpfs mounted inside the shared directory on the host): the
/// guest mounts it as a submount with a device number of its own, where the rest of the
/// directory shares the mount's.
#[test]
fn crossfs_as_virtiofsd_announces_a_mount_inside_the_directory_as_a_submount() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir_all(export.join("plain")).unwrap();
    let tmpfs = HostTmpfs::mount(&export.join("sub"));
    std::fs::write(export.join("sub/f"), "on tmpfs\n").unwrap();
    let sock = work.path().join("vfs.sock");
    let mut child = start_as_libvirt_starts_virtiofsd(work.path(), &export, &sock);
    // stat(2) does not cross into an automount: the read of sub/f does, and `sub/.` is
    // then the submount's root.
    let stdout = run_guest(
        &sock,
        r#"
set -e
mount -t virtiofs crossfs /mnt
echo "=== dev begin"
[ "$(stat -c %d /mnt)" = "$(stat -c %d /mnt/plain)" ] && echo "plain: the mount's device"
cat /mnt/sub/f
[ "$(stat -c %d /mnt)" != "$(stat -c %d /mnt/sub/.)" ] && echo "sub: a device of its own"
grep -c " /mnt/sub virtiofs " /proc/mounts
echo "=== dev end"
umount /mnt/sub
umount /mnt
"#,
    );
    assert_eq!(
        section(&stdout, "dev"),
        "plain: the mount's device\non tmpfs\nsub: a device of its own\n1\n"
    );
    wait_until(
        "crossfs as virtiofsd to exit",
        Duration::from_secs(30),
        || child.try_wait().unwrap().is_some(),
    );
    drop(tmpfs);
}

#[test]
fn virtiofs_max_pages_and_negative_entries() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let md5 = make_big(&export);
    let sock = work.path().join("vfs.sock");
    let serve = serve_virtiofs(&export, &sock, &["--max-pages", "32", "--cache", "always"]);
    let stdout = run_guest(
        &sock,
        &format!(
            r#"
set -e
mount -t virtiofs crossfs /mnt
{READ_BIG}
i=0
while [ $i -lt 1000 ]; do
    if stat /mnt/missing.h >/dev/null 2>&1; then echo "missing.h exists?"; exit 1; fi
    i=$((i + 1))
done
echo "=== stats done"
umount /mnt
"#
        ),
    );
    assert_eq!(section(&stdout, "big"), md5);
    assert!(stdout.contains("=== stats done"), "{stdout}");
    let dev = read_stats(&serve);
    println!("virtiofs stats with --max-pages 32 --cache always:\n{dev:#}");
    assert_eq!(dev["init"]["max_pages"], 32);
    assert_eq!(dev["init"]["configured_max_pages"], 32);
    let read = &dev["ops"]["FUSE_READ"];
    assert_eq!(read["max_data"], 128 << 10, "{read}");
    assert!(read["count"].as_u64().unwrap() >= 512, "{read}");
    // One LOOKUP for `big`, one for `missing.h`: the other 999 stats were answered by the
    // guest's negative entry.
    assert_eq!(dev["ops"]["FUSE_LOOKUP"]["count"], 2, "{dev}");
}

/// `touch` of 500 new files in one directory, then `stat` of them, in the guest with
/// `--cache always`: the creates already told the guest every file's attributes, so the
/// stats cost no request. Counted by the door, for the whole boot: one GETATTR per create
/// (of the directory, whose attributes the guest drops after each create and needs for
/// the next name's permission check) and one LOOKUP per file (the name was missing; its
/// negative entry lets the create go without a second one, which virtiofsd sends). With
/// `--writeback` the guest forgets a file's block count at each close, and then asks a
/// GETATTR per file for the stats: why `always` alone does not offer writeback caching.
#[test]
fn virtiofs_stats_of_files_just_created_cost_no_request() {
    const FILES: u64 = 500;
    let getattrs_and_lookups = |extra: &[&str]| {
        let work = tempfile::tempdir().unwrap();
        let export = work.path().join("export");
        std::fs::create_dir(&export).unwrap();
        let sock = work.path().join("vfs.sock");
        let serve = serve_virtiofs(&export, &sock, &[&["--cache", "always"], extra].concat());
        let stdout = run_guest(
            &sock,
            &format!(
                r#"
set -e
mount -t virtiofs crossfs /mnt
mkdir /mnt/w && cd /mnt/w
seq 1 {FILES} | sed "s/^/f/" > /tmp/names
xargs touch < /tmp/names
xargs stat -c %s < /tmp/names | sort | uniq -c
echo "=== stats done"
cd / && umount /mnt
"#
            ),
        );
        assert!(stdout.contains(&format!("{FILES} 0\n")), "{stdout}");
        assert!(stdout.contains("=== stats done"), "{stdout}");
        assert_eq!(
            std::fs::read_dir(export.join("w")).unwrap().count() as u64,
            FILES
        );
        let dev = read_stats(&serve);
        let count = |op: &str| dev["ops"][op]["count"].as_u64().unwrap_or(0);
        assert_eq!(count("FUSE_CREATE"), FILES, "{dev}");
        (count("FUSE_GETATTR"), count("FUSE_LOOKUP"))
    };
    let (getattrs, lookups) = getattrs_and_lookups(&[]);
    println!("--cache always: {getattrs} GETATTRs, {lookups} LOOKUPs for {FILES} files");
    assert!(
        getattrs <= FILES + 10,
        "{getattrs} GETATTRs for {FILES} files"
    );
    assert!(lookups <= FILES + 10, "{lookups} LOOKUPs for {FILES} files");
    let (wb_getattrs, wb_lookups) = getattrs_and_lookups(&["--writeback"]);
    println!("--cache always --writeback: {wb_getattrs} GETATTRs, {wb_lookups} LOOKUPs");
    assert!(
        wb_getattrs >= getattrs + FILES - 10,
        "{wb_getattrs} against {getattrs}"
    );
}

/// fsx (the pinned Rust port, as in tests/data_integrity.rs) in the guest on the virtiofs
/// mount with writeback caching (`--cache always --writeback`), with and without mmap:
/// every read must return what was written, and the host file must equal the guest's view
/// at the end.
#[test]
fn virtiofs_fsx_in_the_guest() {
    let fsx = tools::tool("fsx", "0.3.2");
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let config = work.path().join("fsx.toml");
    std::fs::write(
        &config,
        "flen = 1048576\n[opsize]\nmax = 262144\n[weights]\nclose_open = 1\nread = 10\n\
         write = 10\ntruncate = 2\nfsync = 1\nfdatasync = 1\nposix_fallocate = 1\n\
         punch_hole = 0\nsendfile = 1\nposix_fadvise = 1\ncopy_file_range = 1\n\
         mapread = 5\nmapwrite = 5\ninvalidate = 1\n",
    )
    .unwrap();
    let sock = work.path().join("vfs.sock");
    let _serve = serve_virtiofs(&export, &sock, &["--cache", "always", "--writeback"]);
    let stdout = run_guest_with(
        &sock,
        r#"
set -e
mount -t virtiofs crossfs /mnt
fsx -f /test/fsx.toml -N 3000 -S 7 -P /tmp /mnt/fsx7 > /tmp/fsx.out 2>&1 || { cat /tmp/fsx.out; exit 1; }
tail -n 1 /tmp/fsx.out
md5sum /mnt/fsx7 | cut -d' ' -f1 > /tmp/sum
umount /mnt
echo "=== sum begin"
cat /tmp/sum
echo "=== sum end"
"#,
        &[
            "--add".into(),
            format!("{}:/test/fsx.toml", config.display()),
            "--add-binary".into(),
            format!("{}:/usr/local/bin/fsx", fsx.display()),
        ],
    );
    assert!(
        stdout.contains("All operations completed A-OK!"),
        "fsx in the guest failed"
    );
    let host = Command::new("md5sum")
        .arg(export.join("fsx7"))
        .output()
        .unwrap();
    let host = String::from_utf8(host.stdout).unwrap();
    assert_eq!(
        section(&stdout, "sum").trim(),
        host.split_whitespace().next().unwrap(),
        "the host's file differs from the guest's after umount"
    );
}

/// pjdfstest (the pinned Rust rewrite, as in tests/pjdfstest.rs) in the guest on the
/// virtiofs mount, against a server that allows device nodes and set-id bits as the 9P
/// door's conformance test does: every test that passes on a local directory of the host
/// passes in the guest, except the differences the README lists.
#[test]
fn pjdfstest_in_the_guest_matches_local_directory() {
    tools::assert_root();
    let pjdfstest = tools::tool("pjdfstest", tools::PJDFSTEST_VERSION);
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("pjdfstest.toml");
    std::fs::write(&config, tools::PJDFSTEST_CONFIG).unwrap();
    // The users pjdfstest switches to, as the host has them (scripts/install-test-deps.sh).
    let passwd = work.path().join("passwd");
    let group = work.path().join("group");
    std::fs::write(
        &passwd,
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n\
         tests:x:999:995::/:/bin/false\n",
    )
    .unwrap();
    std::fs::write(&group, "root:x:0:\nnogroup:x:65534:\ntests:x:995:\n").unwrap();

    let local = tempfile::tempdir().unwrap();
    tools::open_to_all(local.path());
    let second = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
    tools::open_to_all(second.path());
    let out = Command::new(&pjdfstest)
        .arg("-c")
        .arg(&config)
        .arg("-p")
        .arg(local.path())
        .arg("-s")
        .arg(second.path())
        .current_dir(local.path())
        .output()
        .unwrap();
    let native = tools::parse_outcomes(&String::from_utf8_lossy(&out.stdout), "local directory");

    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = work.path().join("vfs.sock");
    let _serve = serve_virtiofs(&export, &sock, &["--allow-devices", "--allow-setuid"]);
    let stdout = run_guest_with(
        &sock,
        r#"
cp /test/passwd /etc/passwd; cp /test/group /etc/group
mount -t virtiofs crossfs /mnt
chmod 777 /mnt; mkdir -p /dev/shm/second; chmod 777 /dev/shm/second
cd /mnt
echo "=== pjdfstest begin"
pjdfstest -c /test/pjdfstest.toml -p /mnt -s /dev/shm/second 2>&1
echo "=== pjdfstest end"
cd /; umount /mnt
"#,
        &[
            "--add".into(),
            format!("{}:/test/pjdfstest.toml", config.display()),
            "--add".into(),
            format!("{}:/test/passwd", passwd.display()),
            "--add".into(),
            format!("{}:/test/group", group.display()),
            "--add-binary".into(),
            format!("{}:/usr/local/bin/pjdfstest", pjdfstest.display()),
        ],
    );
    let guest = tools::parse_outcomes(section(&stdout, "pjdfstest"), "virtiofs in the guest");
    let lost = tools::lost(&native, &guest);
    let known = tools::documented_differences();
    let new: Vec<_> = lost.difference(&known).collect();
    assert!(
        new.is_empty(),
        "passing on a local directory but not in the guest, and not in the README: {new:?}"
    );
}

/// A server whose open-file limit is 256 serves a 5,000-entry tree to the guest's virtiofs
/// driver with no error: the guest extracts it, reads every file back against a copy the
/// host made, and lists and greps it twice. The node ids the guest holds keep handles whose
/// descriptors are the export's cache (crates/export/src/handles.rs). 5,000 entries, not the
/// 20,000 of tests/small_limits.rs: a TCG guest takes minutes over 20,000, and 10,000
/// entries seen (the copy and the extraction) are already 40 times the limit.
#[test]
fn virtiofs_under_a_256_descriptor_limit_serves_a_5000_entry_tree() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    let src = export.join("src");
    std::fs::create_dir_all(&src).unwrap();
    make_source_tree(&src, 250);
    run_ok(
        Command::new("tar")
            .arg("-cf")
            .arg(export.join("src.tar"))
            .arg("-C")
            .arg(&src)
            .arg("."),
    );
    let sock = work.path().join("vfs.sock");
    let serve = Serve::start_limited(
        &export,
        &format!("vhost-user-fs:{}", sock.display()),
        &[],
        256,
    );
    wait_for_socket(&sock);
    let stdout = run_guest(
        &sock,
        r#"
set -e
mount -t virtiofs crossfs /mnt
mkdir /mnt/x
tar -xf /mnt/src.tar -C /mnt/x
diff -r /mnt/src /mnt/x
for i in 1 2; do
    echo "dirs $(find /mnt/x -type d | wc -l)"
    echo "hits $(grep -r -l 'int x' /mnt/x | wc -l)"
done
echo "=== done"
umount /mnt
"#,
    );
    assert!(stdout.contains("=== done"), "{stdout}");
    assert_eq!(stdout.matches("dirs 251").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("hits 4750").count(), 2, "{stdout}");
    let live = &serve.stats()["live"];
    assert!(live["handles"]["closed"].as_u64().unwrap() > 0, "{live}");
    assert_eq!(live["open_files"]["refused"], 0, "{live}");
}
