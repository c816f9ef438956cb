//! Every operation the protocol carries, through a real mount, checked against the export.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};

use common::{each_backend, errno, Backend, Fixture, Setup};

#[test]
fn files_create_write_read_truncate_fsync() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        let mut f = fs::File::create(fx.m("a.txt")).unwrap();
        f.write_all(b"hello, world").unwrap();
        f.sync_all().unwrap();
        drop(f);
        assert_eq!(fs::read(fx.e("a.txt")).unwrap(), b"hello, world");
        assert_eq!(fs::read(fx.m("a.txt")).unwrap(), b"hello, world");

        fs::write(fx.e("host.txt"), b"from the host").unwrap();
        assert_eq!(
            fs::read_to_string(fx.m("host.txt")).unwrap(),
            "from the host"
        );

        let f = fs::OpenOptions::new()
            .write(true)
            .open(fx.m("a.txt"))
            .unwrap();
        f.set_len(5).unwrap();
        assert_eq!(fs::metadata(fx.m("a.txt")).unwrap().len(), 5);
        assert_eq!(fs::read(fx.e("a.txt")).unwrap(), b"hello");

        // Offsets, overwrite in the middle, read back at an offset.
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fx.m("a.txt"))
            .unwrap();
        f.seek(SeekFrom::Start(1)).unwrap();
        f.write_all(b"EL").unwrap();
        f.sync_data().unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hELlo");
        assert_eq!(fs::read(fx.e("a.txt")).unwrap(), b"hELlo");

        // O_TRUNC and O_EXCL.
        fs::write(fx.m("a.txt"), b"x").unwrap();
        assert_eq!(fs::read(fx.e("a.txt")).unwrap(), b"x");
        let e = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(fx.m("a.txt"))
            .unwrap_err();
        assert_eq!(errno(&e), libc::EEXIST);
        assert_eq!(errno(&fs::read(fx.m("missing")).unwrap_err()), libc::ENOENT);
    });
}

#[test]
fn directories_mkdir_readdir_rmdir() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        fs::create_dir(fx.m("d")).unwrap();
        assert!(fx.e("d").is_dir());
        // Enough entries for several Treaddir and FUSE readdir(plus) rounds.
        for i in 0..300 {
            fs::write(fx.e(&format!("d/file-{i:03}")), format!("{i}")).unwrap();
        }
        fs::create_dir(fx.e("d/sub")).unwrap();
        let mut names: Vec<String> = fs::read_dir(fx.m("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 301);
        assert_eq!(names[0], "file-000");
        assert_eq!(names[300], "sub");
        // Types from readdir, attributes from readdirplus.
        for e in fs::read_dir(fx.m("d")).unwrap() {
            let e = e.unwrap();
            let is_dir = e.file_type().unwrap().is_dir();
            assert_eq!(is_dir, e.file_name() == "sub");
            if !is_dir {
                let want = e.file_name().into_string().unwrap()[5..]
                    .parse::<u32>()
                    .unwrap();
                assert_eq!(e.metadata().unwrap().len(), want.to_string().len() as u64);
            }
        }
        let e = fs::remove_dir(fx.m("d")).unwrap_err();
        assert_eq!(errno(&e), libc::ENOTEMPTY);
        fs::remove_dir(fx.m("d/sub")).unwrap();
        assert!(!fx.e("d/sub").exists());
        fs::remove_file(fx.m("d/file-000")).unwrap();
        assert!(!fx.e("d/file-000").exists());
        assert_eq!(fs::read_dir(fx.m("d")).unwrap().count(), 299);
    });
}

#[test]
fn rename_and_rename_flags() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        fs::create_dir(fx.m("dir")).unwrap();
        fs::write(fx.m("dir/f"), b"one").unwrap();
        fs::write(fx.m("g"), b"two").unwrap();
        // Keep the kernel's view of both alive across the renames.
        let before = fs::metadata(fx.m("dir/f")).unwrap();
        fs::rename(fx.m("dir/f"), fx.m("f2")).unwrap();
        assert_eq!(fs::read(fx.e("f2")).unwrap(), b"one");
        assert!(!fx.e("dir/f").exists());
        assert_eq!(fs::metadata(fx.m("f2")).unwrap().ino(), before.ino());
        // Over an existing file.
        fs::rename(fx.m("f2"), fx.m("g")).unwrap();
        assert_eq!(fs::read(fx.m("g")).unwrap(), b"one");
        // A directory, then something inside it by its new name.
        fs::write(fx.m("dir/inner"), b"in").unwrap();
        fs::rename(fx.m("dir"), fx.m("dir2")).unwrap();
        assert!(fx.e("dir2/inner").exists());
        if b == Backend::Crossfs {
            // diod's fids are paths: the renamed directory's fid still names "dir".
            assert_eq!(fs::read(fx.m("dir2/inner")).unwrap(), b"in");
            fs::write(fx.m("dir2/inner"), b"changed").unwrap();
            assert_eq!(fs::read(fx.e("dir2/inner")).unwrap(), b"changed");
        }
        // No atomic 9P form: refused rather than raced.
        fs::write(fx.m("x"), b"x").unwrap();
        let r = rustix::fs::renameat_with(
            rustix::fs::CWD,
            fx.m("x"),
            rustix::fs::CWD,
            fx.m("y"),
            rustix::fs::RenameFlags::NOREPLACE,
        );
        assert_eq!(r, Err(rustix::io::Errno::INVAL));
        let r = rustix::fs::renameat_with(
            rustix::fs::CWD,
            fx.m("x"),
            rustix::fs::CWD,
            fx.m("g"),
            rustix::fs::RenameFlags::EXCHANGE,
        );
        assert_eq!(r, Err(rustix::io::Errno::INVAL));
    });
}

#[test]
fn hard_links_symlinks_and_fifos() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        fs::write(fx.m("t"), b"target").unwrap();
        fs::hard_link(fx.m("t"), fx.m("l")).unwrap();
        let (t, l) = (
            fs::metadata(fx.m("t")).unwrap(),
            fs::metadata(fx.m("l")).unwrap(),
        );
        assert_eq!(t.ino(), l.ino(), "hard links share a node id");
        assert_eq!(l.nlink(), 2);
        assert_eq!(fs::metadata(fx.e("l")).unwrap().nlink(), 2);

        std::os::unix::fs::symlink("t", fx.m("s")).unwrap();
        assert_eq!(fs::read_link(fx.e("s")).unwrap().to_str(), Some("t"));
        assert_eq!(fs::read_link(fx.m("s")).unwrap().to_str(), Some("t"));
        assert_eq!(fs::read(fx.m("s")).unwrap(), b"target");
        assert!(fs::symlink_metadata(fx.m("s"))
            .unwrap()
            .file_type()
            .is_symlink());
        std::os::unix::fs::symlink("/etc/hostname", fx.e("abs")).unwrap();
        assert_eq!(
            fs::read_link(fx.m("abs")).unwrap().to_str(),
            Some("/etc/hostname")
        );

        rustix::fs::mknodat(
            rustix::fs::CWD,
            fx.m("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o640),
            0,
        )
        .unwrap();
        assert!(fs::metadata(fx.e("fifo")).unwrap().file_type().is_fifo());
        let m = fs::metadata(fx.m("fifo")).unwrap();
        assert!(m.file_type().is_fifo());
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        // A fifo through the mount is the kernel's own pipe.
        let path = fx.m("fifo");
        let writer = std::thread::spawn(move || fs::write(path, b"through the pipe").unwrap());
        assert_eq!(fs::read(fx.m("fifo")).unwrap(), b"through the pipe");
        writer.join().unwrap();

        fs::remove_file(fx.m("l")).unwrap();
        if b == Backend::Crossfs {
            // diod's fids are paths: the node, last looked up as "l", went with that name.
            assert_eq!(fs::metadata(fx.m("t")).unwrap().nlink(), 1);
        }
    });
}

#[test]
fn chmod_chown_utimens() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        fs::write(fx.m("f"), b"x").unwrap();
        fs::set_permissions(fx.m("f"), fs::Permissions::from_mode(0o604)).unwrap();
        assert_eq!(fs::metadata(fx.e("f")).unwrap().mode() & 0o7777, 0o604);
        assert_eq!(fs::metadata(fx.m("f")).unwrap().mode() & 0o7777, 0o604);

        std::os::unix::fs::chown(fx.m("f"), Some(1234), Some(4321)).unwrap();
        let m = fs::metadata(fx.e("f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 4321));
        let m = fs::metadata(fx.m("f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 4321));

        use rustix::fs::{utimensat, AtFlags, Timespec, Timestamps, CWD, UTIME_NOW};
        let ts = Timestamps {
            last_access: Timespec {
                tv_sec: 1_000_000_000,
                tv_nsec: 123_456_789,
            },
            last_modification: Timespec {
                tv_sec: -86_400,
                tv_nsec: 5,
            },
        };
        utimensat(CWD, fx.m("f"), &ts, AtFlags::empty()).unwrap();
        for p in [fx.e("f"), fx.m("f")] {
            let m = fs::metadata(p).unwrap();
            assert_eq!((m.atime(), m.atime_nsec()), (1_000_000_000, 123_456_789));
            assert_eq!((m.mtime(), m.mtime_nsec()), (-86_400, 5));
        }
        let now = Timestamps {
            last_access: Timespec {
                tv_sec: 0,
                tv_nsec: UTIME_NOW,
            },
            last_modification: Timespec {
                tv_sec: 0,
                tv_nsec: UTIME_NOW,
            },
        };
        utimensat(CWD, fx.m("f"), &now, AtFlags::empty()).unwrap();
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let m = fs::metadata(fx.e("f")).unwrap();
        assert!((m.mtime() - secs).abs() < 5 && (m.atime() - secs).abs() < 5);
    });
}

#[test]
fn xattrs() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        fs::write(fx.m("f"), b"x").unwrap();
        rustix::fs::setxattr(
            fx.m("f"),
            "user.color",
            b"blue",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let mut buf = vec![0u8; 64];
        let n = rustix::fs::getxattr(fx.e("f"), "user.color", &mut buf).unwrap();
        assert_eq!(&buf[..n], b"blue");
        let n = rustix::fs::getxattr(fx.m("f"), "user.color", &mut buf).unwrap();
        assert_eq!(&buf[..n], b"blue");
        // Size query, then a too-small buffer.
        assert_eq!(
            rustix::fs::getxattr_query(fx.m("f"), "user.color").unwrap(),
            4usize
        );
        let mut small = [0u8; 2];
        assert_eq!(
            rustix::fs::getxattr(fx.m("f"), "user.color", &mut small),
            Err(rustix::io::Errno::RANGE)
        );
        let big = vec![7u8; 3000]; // ext4 keeps values within one block
        rustix::fs::setxattr(fx.m("f"), "user.big", &big, rustix::fs::XattrFlags::CREATE).unwrap();
        let mut back = vec![0u8; 20_000];
        let n = rustix::fs::getxattr(fx.m("f"), "user.big", &mut back).unwrap();
        assert_eq!(&back[..n], &big[..]);
        if b == Backend::Crossfs {
            // diod ignores XATTR_CREATE.
            assert_eq!(
                rustix::fs::setxattr(fx.m("f"), "user.big", b"", rustix::fs::XattrFlags::CREATE),
                Err(rustix::io::Errno::EXIST)
            );
        }
        let mut list = vec![0u8; 256];
        let n = rustix::fs::listxattr(fx.m("f"), &mut list).unwrap();
        let mut names: Vec<&[u8]> = list[..n]
            .split(|&c| c == 0)
            .filter(|s| !s.is_empty())
            .collect();
        names.sort();
        assert_eq!(names, vec![&b"user.big"[..], b"user.color"]);
        rustix::fs::removexattr(fx.m("f"), "user.color").unwrap();
        assert_eq!(
            rustix::fs::getxattr(fx.e("f"), "user.color", &mut buf),
            Err(rustix::io::Errno::NODATA)
        );
        assert_eq!(
            rustix::fs::getxattr(fx.m("f"), "user.color", &mut buf),
            Err(rustix::io::Errno::NODATA)
        );
    });
}

#[test]
fn statfs_matches_the_export() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        let (m, e) = (
            rustix::fs::statvfs(fx.mnt.path()).unwrap(),
            rustix::fs::statvfs(fx.export.path()).unwrap(),
        );
        assert_eq!(m.f_blocks * m.f_frsize, e.f_blocks * e.f_frsize);
        assert_eq!(m.f_files, e.f_files);
        assert!(m.f_namemax > 0);
    });
}

/// By default (opens unannounced where events allow, `--send-opens` off) the kernel keeps
/// POSIX locks itself: they conflict between open files of the mount as on a local file
/// system, and the host does not see them.
#[test]
fn kernel_keeps_its_locks() {
    use common::fcntl_lock;
    use libc::{F_GETLK, F_OFD_SETLK, F_RDLCK, F_UNLCK, F_WRLCK};
    let fx = Fixture::new(Backend::Crossfs);
    fs::write(fx.e("f"), b"locked").unwrap();
    let open = |p: std::path::PathBuf| {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .unwrap()
    };
    let (host, a, b) = (open(fx.e("f")), open(fx.m("f")), open(fx.m("f")));
    fcntl_lock(&a, F_OFD_SETLK, F_WRLCK).unwrap();
    let e = fcntl_lock(&b, F_OFD_SETLK, F_RDLCK).unwrap_err();
    assert!(matches!(errno(&e), libc::EAGAIN | libc::EACCES), "{e}");
    let (ty, _) = fcntl_lock(&b, F_GETLK, F_RDLCK).unwrap();
    assert_eq!(ty, F_WRLCK, "F_GETLK reports the other open file's lock");
    // The host's lock is the host's alone.
    fcntl_lock(&host, F_OFD_SETLK, F_WRLCK).unwrap();
    fcntl_lock(&host, F_OFD_SETLK, F_UNLCK).unwrap();
    drop(a);
    fcntl_lock(&b, F_OFD_SETLK, F_WRLCK).unwrap();
}

#[test]
fn posix_locks_reach_the_server() {
    use common::fcntl_lock;
    use libc::{F_GETLK, F_OFD_SETLK, F_RDLCK, F_SETLK, F_SETLKW, F_UNLCK, F_WRLCK};
    each_backend(|b| {
        if b == Backend::Diod {
            eprintln!("skipping: diod's Tlock does not take a lock the host can see");
            return;
        }
        // Locks go to the server only with `send_opens` (otherwise the kernel keeps them:
        // `kernel_keeps_its_locks` below).
        let mut setup = Setup::new(b);
        setup.config.send_opens = true;
        let fx = Fixture::with(setup);
        fs::write(fx.e("f"), b"locked").unwrap();
        let host = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fx.e("f"))
            .unwrap();
        let mnt = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fx.m("f"))
            .unwrap();
        // An OFD lock on the host conflicts with any lock the server takes for the mount.
        fcntl_lock(&host, F_OFD_SETLK, F_WRLCK).unwrap();
        let e = fcntl_lock(&mnt, F_SETLK, F_WRLCK).unwrap_err();
        assert!(matches!(errno(&e), libc::EAGAIN | libc::EACCES), "{e}");
        let (ty, _) = fcntl_lock(&mnt, F_GETLK, F_RDLCK).unwrap();
        assert_eq!(ty, F_WRLCK, "F_GETLK reports the host's lock");
        fcntl_lock(&host, F_OFD_SETLK, F_UNLCK).unwrap();
        assert_eq!(fcntl_lock(&mnt, F_GETLK, F_WRLCK).unwrap().0, F_UNLCK);

        // A read lock through a descriptor that cannot write: no FLUSH is sent at its
        // close, and the lock goes with the open file (RELEASE, a moment after close).
        let reader = fs::File::open(fx.m("f")).unwrap();
        fcntl_lock(&reader, F_SETLK, F_RDLCK).unwrap();
        let e = fcntl_lock(&host, F_OFD_SETLK, F_WRLCK).unwrap_err();
        assert!(matches!(errno(&e), libc::EAGAIN | libc::EACCES), "{e}");
        drop(reader);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while fcntl_lock(&host, F_OFD_SETLK, F_WRLCK).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the read lock outlived its descriptor's close by 5 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        fcntl_lock(&host, F_OFD_SETLK, F_UNLCK).unwrap();

        // Now the mount holds it and the host is refused.
        fcntl_lock(&mnt, F_SETLK, F_WRLCK).unwrap();
        assert!(fcntl_lock(&host, F_OFD_SETLK, F_RDLCK).is_err());
        // Closing the mount's descriptor drops the lock (FLUSH).
        drop(mnt);
        fcntl_lock(&host, F_OFD_SETLK, F_WRLCK).unwrap();

        // F_SETLKW waits (polling the server) until the host lets go; meanwhile the mount
        // keeps answering everything else.
        fs::write(fx.m("other"), b"other").unwrap();
        let mnt = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fx.m("f"))
            .unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| fcntl_lock(&mnt, F_SETLKW, F_WRLCK));
            std::thread::sleep(std::time::Duration::from_millis(100));
            for _ in 0..50 {
                assert_eq!(fs::read(fx.m("other")).unwrap(), b"other");
                fs::metadata(fx.m("f")).unwrap();
            }
            assert!(!waiter.is_finished(), "the lock is still held by the host");
            fcntl_lock(&host, F_OFD_SETLK, F_UNLCK).unwrap();
            waiter.join().unwrap().unwrap();
        });
        assert!(fcntl_lock(&host, F_OFD_SETLK, F_WRLCK).is_err());
    });
}

#[test]
fn append_direct_io_and_mmap() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        // O_APPEND: appends land at the server's end of file, even after the host grew it.
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(fx.m("log"))
            .unwrap();
        f.write_all(b"a").unwrap();
        let mut host = fs::OpenOptions::new()
            .append(true)
            .open(fx.e("log"))
            .unwrap();
        host.write_all(b"HOST").unwrap();
        f.write_all(b"b").unwrap();
        drop(f);
        assert_eq!(fs::read(fx.e("log")).unwrap(), b"aHOSTb");

        // O_DIRECT: no alignment needed, straight to the server.
        let mut d = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(libc::O_DIRECT)
            .open(fx.m("direct"))
            .unwrap();
        d.write_all(&[5u8; 10_000]).unwrap();
        assert_eq!(fs::read(fx.e("direct")).unwrap(), vec![5u8; 10_000]);
        d.seek(SeekFrom::Start(9_990)).unwrap();
        let mut tail = Vec::new();
        d.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, vec![5u8; 10]);

        // mmap: read a file, then change it through a shared writable mapping.
        fs::write(fx.e("map"), vec![b'x'; 8192]).unwrap();
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fx.m("map"))
            .unwrap();
        common::with_shared_mapping(&f, 8192, |mem| {
            assert!(mem.iter().all(|&c| c == b'x'));
            mem[100..105].copy_from_slice(b"hello");
        });
        f.sync_all().unwrap();
        drop(f);
        let host = fs::read(fx.e("map")).unwrap();
        assert_eq!(&host[100..105], b"hello");
        assert_eq!(host.len(), 8192);
    });
}
