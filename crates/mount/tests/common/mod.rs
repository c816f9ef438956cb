//! Shared fixture: serve a temporary export (with crossfs's own server or diod), connect a
//! client, mount it in another temporary directory, and always unmount on drop.
#![allow(dead_code)]

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use crossfs_client::{Client, ClientConfig};
use crossfs_mount::{mount, MountConfig, MountHandle};
use crossfs_server::{Server, ServerConfig};
use crossfs_wire::CounterSnapshot;

pub const DIOD: &str = "/usr/sbin/diod";

/// Which 9P server the fixture runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// crossfs's own server, in process, over a socket pair.
    Crossfs,
    /// diod 1.0.24, a child process serving one connection on its stdin/stdout.
    Diod,
}

pub struct Fixture {
    pub export: tempfile::TempDir,
    pub mnt: tempfile::TempDir,
    pub client: Arc<Client>,
    pub server: Option<Arc<Server>>,
    handle: Option<MountHandle>,
    diod: Option<Child>,
}

/// Options beyond the mount config.
pub struct Setup {
    pub backend: Backend,
    pub config: MountConfig,
    /// msize the client asks for (and the crossfs server allows).
    pub msize: u32,
    /// Whether crossfs's server offers its extension of 9P2000.L (and the client asks).
    pub extensions: bool,
}

impl Setup {
    pub fn new(backend: Backend) -> Self {
        Setup {
            backend,
            config: MountConfig::default(),
            msize: 1 << 20,
            extensions: std::env::var_os("CROSSFS_TEST_PLAIN_9P").is_none(),
        }
    }
}

fn tempdir(prefix: &str) -> tempfile::TempDir {
    // /tmp is ext4 here: user xattrs, fifos and locks all work.
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

impl Fixture {
    pub fn new(backend: Backend) -> Fixture {
        Fixture::with(Setup::new(backend))
    }

    pub fn with(setup: Setup) -> Fixture {
        let export = tempdir("crossfs-export-");
        let mnt = tempdir("crossfs-mnt-");
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut server = None;
        let mut diod = None;
        match setup.backend {
            Backend::Crossfs => {
                let s = Server::new(ServerConfig {
                    export: export.path().to_path_buf(),
                    max_msize: setup.msize,
                    extensions: setup.extensions,
                    ..Default::default()
                })
                .unwrap();
                let (s2, w) = (s.clone(), theirs.try_clone().unwrap());
                std::thread::spawn(move || s2.serve_socket(theirs, w, "test".into()));
                server = Some(s);
            }
            Backend::Diod => {
                let child = Command::new(DIOD)
                    .args(["-f", "-n", "-N", "-r", "0", "-w", "1", "-L", "stderr", "-e"])
                    .arg(export.path())
                    .stdin(Stdio::from(std::os::fd::OwnedFd::from(
                        theirs.try_clone().unwrap(),
                    )))
                    .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("diod");
                diod = Some(child);
            }
        }
        let closer = ours.try_clone().unwrap();
        let client = Client::connect_with_closer(
            ours.try_clone().unwrap(),
            ours,
            &ClientConfig {
                msize: setup.msize,
                transport_max: u32::MAX,
                max_in_flight: 256,
                extensions: setup.extensions,
            },
            move || {
                let _ = closer.shutdown(std::net::Shutdown::Both);
            },
        )
        .expect("connect");
        let aname = export.path().as_os_str().as_encoded_bytes().to_vec();
        let root = client.attach(b"root", &aname, 0).expect("attach");
        let handle = mount(client.clone(), root, mnt.path(), &setup.config).expect("mount");
        Fixture {
            export,
            mnt,
            client,
            server,
            handle: Some(handle),
            diod,
        }
    }

    /// A path inside the mount.
    pub fn m(&self, rel: &str) -> PathBuf {
        self.mnt.path().join(rel)
    }

    /// The same path in the exported directory.
    pub fn e(&self, rel: &str) -> PathBuf {
        self.export.path().join(rel)
    }

    pub fn handle(&self) -> &MountHandle {
        self.handle.as_ref().unwrap()
    }

    pub fn take_handle(&mut self) -> MountHandle {
        self.handle.take().unwrap()
    }

    /// The client's count of 9P message `name` so far.
    pub fn count(&self, name: &str) -> u64 {
        self.client
            .counters()
            .messages
            .get(name)
            .map_or(0, |c| c.count)
    }

    /// Messages that walk a name: Twalk, and the extension's Twalkgetattr and Twalkopen.
    pub fn walks(&self) -> u64 {
        ["Twalk", "Twalkgetattr", "Twalkopen"]
            .iter()
            .map(|m| self.count(m))
            .sum()
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.client.counters()
    }

    pub fn kill_server(&mut self) {
        if let Some(mut c) = self.diod.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            if h.unmount().is_err() {
                force_unmount(self.mnt.path());
            }
        }
        force_unmount(self.mnt.path());
        self.client.shutdown();
        self.kill_server();
    }
}

/// Last resort, so a failing test never leaves a mount behind.
pub fn force_unmount(path: &Path) {
    let _ = rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH);
}

pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Runs `f` against every backend available.
pub fn each_backend(f: impl Fn(Backend)) {
    for b in [Backend::Crossfs, Backend::Diod] {
        if b == Backend::Diod && !Path::new(DIOD).exists() {
            eprintln!("skipping diod: {DIOD} not installed");
            continue;
        }
        eprintln!("--- backend {b:?}");
        f(b);
    }
}

/// fcntl record locks on the whole file, for tests: `cmd` is F_SETLK, F_SETLKW, F_GETLK or
/// their F_OFD_ forms. Returns the (possibly updated) lock type and pid.
pub fn fcntl_lock(fd: &impl std::os::fd::AsRawFd, cmd: i32, typ: i32) -> io::Result<(i32, i32)> {
    // SAFETY: an all-zero flock is valid (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: fd is open for the call's duration and fl is a valid flock.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &mut fl) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((i32::from(fl.l_type), fl.l_pid))
}

/// Maps `len` bytes of `file` shared and writable, runs `f` on them, syncs and unmaps.
pub fn with_shared_mapping(file: &std::fs::File, len: usize, f: impl FnOnce(&mut [u8])) {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh mapping of an open file; nothing else aliases it while `f` runs.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap: {}", io::Error::last_os_error());
        f(std::slice::from_raw_parts_mut(p.cast::<u8>(), len));
        assert_eq!(libc::msync(p, len, libc::MS_SYNC), 0);
        libc::munmap(p, len);
    }
}
