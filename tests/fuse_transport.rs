//! The mount's FUSE transports: with the kernel offering FUSE over io_uring
//! (`enable_uring`, set to Y for these tests and put back after), a mount with
//! `--io-uring` serves requests through its rings, and what goes through them reads back as
//! written; a request that waits for the server does not hold its CPU's ring (another
//! thread of the queue takes it); without it (the default) every request comes through
//! `/dev/fuse`. `crossfs stats` counts requests per transport.

mod common;
mod tools;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Mutex;

use common::*;
use tools::assert_root;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Serializes the tests that change the kernel's parameter, which is the machine's.
static PARAMETER: Mutex<()> = Mutex::new(());

/// `enable_uring` set to Y while held, put back as it was when dropped.
struct UringEnabled {
    before: String,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl UringEnabled {
    fn set() -> UringEnabled {
        let serial = PARAMETER.lock().unwrap_or_else(|e| e.into_inner());
        let before = std::fs::read_to_string(ENABLE_URING)
            .unwrap_or_else(|e| panic!("{ENABLE_URING}: {e} (a kernel before 6.14?)"));
        std::fs::write(ENABLE_URING, "Y").unwrap();
        UringEnabled {
            before: before.trim().to_string(),
            _serial: serial,
        }
    }
}

impl Drop for UringEnabled {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING, &self.before);
    }
}

/// Pins the calling thread to CPU 0, so that its FUSE requests go to the ring of CPU 0's
/// queue.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
    // sched_setaffinity reads `size_of` bytes of it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        r,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// fgetxattr of `security.capability` (a FUSE request each time: the kernel keeps no
/// extended attributes, and a descriptor needs no path walked), returning the errno.
fn capability_errno(file: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    // SAFETY: an open descriptor and a NUL-terminated name; a zero size asks for no value.
    let r = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(r, -1, "no capability");
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// fchmod of `file` to `mode`, from a thread on CPU 0 (a SETATTR, which waits for the
/// server in its handler).
fn chmod_on_cpu0(file: &std::fs::File, mode: u32) -> std::thread::JoinHandle<std::io::Result<()>> {
    use std::os::unix::fs::PermissionsExt;
    let file = file.try_clone().unwrap();
    std::thread::spawn(move || {
        pin_to_cpu0();
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    })
}

/// Stops the server (SIGSTOP) and waits until every thread of it has stopped.
fn stop(serve: &Serve) {
    let pid = serve.child.id();
    run_ok(std::process::Command::new("kill").args(["-STOP", &pid.to_string()]));
    let stopped = |task: std::fs::DirEntry| {
        std::fs::read_to_string(task.path().join("stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')))
    };
    wait_until(
        "the server's threads to stop",
        std::time::Duration::from_secs(30),
        || {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .all(|t| stopped(t.unwrap()))
        },
    );
}

fn resume(serve: &Serve) {
    run_ok(std::process::Command::new("kill").args(["-CONT", &serve.child.id().to_string()]));
}

fn transport(mount: &Mount) -> (u64, u64, u64) {
    let t = &mount.stats()["fuse_transport"];
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("no {k} in {t}"));
    (n("dev_fuse"), n("io_uring"), n("io_uring_queues"))
}

/// Names, attributes, a large write and its read, a listing: requests of each kind.
fn work(mnt: &Path, export: &Path) {
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(mnt.join("d").join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let mut f = std::fs::File::create(mnt.join("big")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::read(export.join("big")).unwrap(), data);
    let mut back = Vec::new();
    std::fs::File::open(mnt.join("big"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, data);
    let mut names: Vec<_> = std::fs::read_dir(mnt.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 20);
    assert_eq!(std::fs::read_to_string(mnt.join("d/f7")).unwrap(), "file 7");
    std::fs::rename(mnt.join("d/f7"), mnt.join("d/g7")).unwrap();
    std::fs::remove_file(mnt.join("d/g7")).unwrap();
    assert!(!export.join("d/f7").exists() && !export.join("d/g7").exists());
}

fn served(extra: &[&str], check: impl FnOnce(&Mount, &Path)) {
    served_by(extra, |_, mount, export| check(mount, export));
}

fn served_by(extra: &[&str], check: impl FnOnce(&Serve, &Mount, &Path)) {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, extra);
    mount.wait_following();
    check(&serve, &mount, &export);
}

/// A file written on the host reads back through the mount's READs (their payload read
/// from the 9P socket into the ring entries' buffers).
fn read_host_file(mount: &Mount, export: &Path) {
    let data: Vec<u8> = (0..5 << 20).map(|i: u32| (i % 253) as u8).collect();
    std::fs::write(export.join("host"), &data).unwrap();
    // The mount knows of the host's new file once it has applied the change events.
    run_ok(
        std::process::Command::new(crossfs_bin())
            .arg("sync")
            .arg(&mount.mountpoint),
    );
    let before = mount.stats()["data"]["read_copied"].as_u64().unwrap();
    assert_eq!(std::fs::read(mount.mountpoint.join("host")).unwrap(), data);
    let after = mount.stats()["data"]["read_copied"].as_u64().unwrap();
    assert!(after - before >= data.len() as u64, "{before} -> {after}");
}

#[test]
fn io_uring_serves_where_the_kernel_offers_it_and_the_mount_asks() {
    assert_root();
    let _enabled = UringEnabled::set();
    served(&["--io-uring"], |mount, export| {
        work(&mount.mountpoint, export);
        read_host_file(mount, export);
        let (_, ring, queues) = transport(mount);
        assert!(ring > 0, "no request came through io_uring");
        assert!(queues >= 1);
    });
}

/// With the server stopped, a chmod made on CPU 0 waits for it in its handler; requests the
/// mount answers itself, made on CPU 0 meanwhile, are still answered through CPU 0's ring
/// (its leading thread freed the ring before it waited, and another thread took it when
/// they came). Once the server goes on, the chmod is answered and made. Every request goes
/// through open descriptors: no path is walked, so none waits for the server on its way.
#[test]
fn a_request_waiting_for_the_server_leaves_its_cpus_ring_serving() {
    use std::os::unix::fs::PermissionsExt;
    assert_root();
    let _enabled = UringEnabled::set();
    served_by(&["--io-uring"], |serve, mount, export| {
        std::fs::write(mount.mountpoint.join("local"), "here").unwrap();
        let file = std::fs::File::open(mount.mountpoint.join("local")).unwrap();
        // A first wait for the server on CPU 0's ring, which starts the thread that will
        // take the ring the next time.
        chmod_on_cpu0(&file, 0o640).join().unwrap().unwrap();
        assert_eq!(capability_errno(&file), libc::ENODATA);
        let before = mount.stats()["fuse_transport"].clone();
        stop(serve);
        let chmod = chmod_on_cpu0(&file, 0o600);
        // The chmod's handler waits before these start: its Tsetattrget is in the socket.
        wait_until(
            "the chmod to wait",
            std::time::Duration::from_secs(30),
            || {
                mount.stats()["fuse_transport"]["io_uring_handovers"].as_u64()
                    > before["io_uring_handovers"].as_u64()
            },
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let again = file.try_clone().unwrap();
        std::thread::spawn(move || {
            pin_to_cpu0();
            let answers: Vec<i32> = (0..200).map(|_| capability_errno(&again)).collect();
            let _ = tx.send(answers);
        });
        let answers = rx.recv_timeout(std::time::Duration::from_secs(20));
        let during = mount.stats()["fuse_transport"].clone();
        resume(serve);
        let answers = answers.expect("requests the mount answers waited for the stopped server");
        assert!(answers.iter().all(|&e| e == libc::ENODATA), "{answers:?}");
        let n = |t: &serde_json::Value, k: &str| t[k].as_u64().unwrap();
        assert!(
            n(&during, "io_uring") >= n(&before, "io_uring") + 200,
            "not through the rings: {before} -> {during}"
        );
        assert!(
            n(&during, "io_uring_takeovers") > n(&before, "io_uring_takeovers"),
            "no other thread took the ring: {before} -> {during}"
        );
        chmod
            .join()
            .unwrap()
            .expect("the chmod, once the server went on");
        let mode = std::fs::metadata(export.join("local"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    });
}

#[test]
fn by_default_the_mount_keeps_to_dev_fuse_where_io_uring_is_offered() {
    assert_root();
    let _enabled = UringEnabled::set();
    served(&[], |mount, export| {
        work(&mount.mountpoint, export);
        let (dev, ring, queues) = transport(mount);
        assert!(dev > 0);
        assert_eq!((ring, queues), (0, 0));
    });
}
