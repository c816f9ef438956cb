//! Command-line arguments: what the user typed, checked and turned into library configs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use crossfs_transport::Addr;

/// Share a host directory with a VM or container over 9P2000.L.
///
/// On the host, `crossfs serve` exports a directory on one or more transports (unix socket,
/// TCP, vsock, or an inherited fd). In the guest, `crossfs mount` mounts it through FUSE with
/// large requests and negative/symlink caching, or hands the connection to the kernel's own
/// 9p client (`--kernel`). `crossfs bench` measures it all against native.
#[derive(Parser, Debug)]
#[command(name = "crossfs", version, propagate_version = true)]
pub struct Cli {
    /// More log output (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Append the log to this file instead of stderr (errors that end the command still go
    /// to stderr too).
    #[arg(long, global = true, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Export DIR over 9P2000.L on every --listen address until interrupted.
    Serve(ServeArgs),
    /// Mount a 9P2000.L export (crossfs serve, diod, ...) at MOUNTPOINT through FUSE.
    Mount(MountArgs),
    /// Print the counters of a running `crossfs serve` or `crossfs mount`.
    Stats(StatsArgs),
    /// Benchmark crossfs against native and other targets, and print the table.
    Bench(Box<crossfs_bench_args::BenchArgs>),
    /// Stream the change events of a `crossfs serve` export, one line each.
    Watch(WatchArgs),
    /// Wait until every change made on the host so far is visible in a `crossfs mount`.
    ///
    /// Returns 0 once every change made to the export before the call (on the host, or
    /// through another mount) shows through the mount, rescans the server owed the mount
    /// (it fell behind) included. It never returns early: when the mount has not caught up
    /// within 20 s in all, it fails (exit status 1) and says so, and a later sync waits
    /// again. Right after the mount appears, while it still connects its change events,
    /// a sync waits for them within the same 20 s.
    Sync(SyncArgs),
    /// In a guest: replay the host's changes on a virtiofs mount of `crossfs serve`.
    ///
    /// Follows the export's change stream through the virtiofs device itself (a hidden
    /// file of the mount; no network) and replays each change through the guest kernel, so
    /// that inotify and fanotify watchers in the guest see host changes, and the guest's
    /// dentries, attributes and page cache follow the host. `crossfs sync MOUNTPOINT` then
    /// works on the mount. Run as root, one agent per mount (packaging/crossfs-agent@.service);
    /// it runs until killed, opening the stream again whenever it ends.
    Agent(AgentArgs),
    /// Serve a directory to a VMM as virtiofsd would, from virtiofsd's command line.
    ///
    /// `crossfs virtiofsd ARGS` (or crossfs run under the name `virtiofsd`) takes the
    /// options libvirt, Kata and podman pass to virtiofsd (--shared-dir or -o source=,
    /// --socket-path or --fd, --cache, --xattr, --readonly, --log-level, --syslog, ...)
    /// and serves the directory on crossfs's vhost-user-fs door until the VMM disconnects.
    /// Options crossfs cannot honour are refused by name, with the reason.
    /// `crossfs virtiofsd --help` lists them; the README's "Drop-in for virtiofsd" says
    /// what each maps to.
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Virtiofsd(VirtiofsdArgs),
    /// Print a shell completion script: `crossfs completions bash > /etc/bash_completion.d/crossfs`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff), made from these same definitions: `crossfs man | man -l -`;
    /// `crossfs man mount` for a subcommand's page (crossfs-mount(1)).
    Man(ManArgs),
}

#[derive(Args, Debug)]
pub struct VirtiofsdArgs {
    /// virtiofsd's options, as virtiofsd takes them.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "VIRTIOFSD_ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print (default: crossfs(1)).
    pub subcommand: Option<String>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `--events`: which watcher a server uses for change events, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventsChoice {
    Off,
    On(crossfs_events::BackendKind),
}

fn parse_events(s: &str) -> Result<EventsChoice, String> {
    use crossfs_events::BackendKind as B;
    Ok(match s {
        "off" => EventsChoice::Off,
        "auto" => EventsChoice::On(B::Auto),
        "fanotify" => EventsChoice::On(B::Fanotify),
        "inotify" => EventsChoice::On(B::Inotify),
        "poll" => EventsChoice::On(B::Poll),
        _ => return Err(format!("`{s}`: use auto, fanotify, inotify, poll or off")),
    })
}

/// Parses sizes like `1048576`, `64K`, `1M`, `1MiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 65536, 64K, 1M)"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "unknown size unit `{unit}` in `{s}` (use K, M or G)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size `{s}` is too large"))
}

fn parse_msize(s: &str) -> Result<u32, String> {
    let n = parse_size(s)?;
    if !(u64::from(crossfs_wire::MIN_MSIZE)..=u64::from(u32::MAX)).contains(&n) {
        return Err(format!(
            "msize must be between {} and {} bytes",
            crossfs_wire::MIN_MSIZE,
            u32::MAX
        ));
    }
    Ok(n as u32)
}

/// `--idle-poll`: decided on the machine (`auto`), or a window in microseconds (0: off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePoll {
    Auto,
    Micros(u64),
}

fn parse_idle_poll(s: &str) -> Result<IdlePoll, String> {
    match s {
        "auto" => Ok(IdlePoll::Auto),
        n => n
            .parse()
            .map(IdlePoll::Micros)
            .map_err(|_| format!("`{n}`: auto, or microseconds (0: never)")),
    }
}

fn parse_buffer(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("size `{s}` is too large"))
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The directory to export. Nothing outside it is reachable by a client.
    pub dir: PathBuf,
    /// Where to listen: unix:PATH, tcp:HOST:PORT, vsock:CID:PORT (CID may be `any`), or fd:N
    /// (an inherited socket: a listening one is accepted on, a connected one is served once);
    /// or vhost-user-fs:PATH, a socket a VMM connects to for a virtio-fs device (the guest
    /// then runs `mount -t virtiofs TAG DIR`). Repeat for several transports at once.
    #[arg(
        short,
        long = "listen",
        value_name = "ADDR",
        required_unless_present = "vhost_user_fs_fd"
    )]
    pub listen: Vec<Addr>,
    /// Serve a virtio-fs device on the listening unix socket inherited as descriptor N, as
    /// virtiofsd's --fd (libvirt and Kata make the socket and pass it this way).
    #[arg(long, value_name = "N")]
    pub vhost_user_fs_fd: Option<i32>,
    /// vhost-user-fs: exit once the VMM disconnects, as virtiofsd does, rather than wait
    /// for it to connect again.
    #[arg(long)]
    pub exit_with_vmm: bool,
    /// Largest message the server accepts; clients get min(their request, this). The default
    /// is 1 MiB of data plus a page for headers. Linux's own client caps itself at 1M on
    /// tcp/unix/fd and at 512000 on virtio.
    #[arg(long, value_name = "BYTES", default_value = "1052672", value_parser = parse_msize)]
    pub msize: u32,
    /// Socket send and receive buffer size (SO_SNDBUF/SO_RCVBUF), independent of msize.
    /// Default: the kernel's autotuning.
    #[arg(long, value_name = "BYTES", value_parser = parse_buffer)]
    pub socket_buffer: Option<usize>,
    /// Refuse every change with EROFS.
    #[arg(long)]
    pub read_only: bool,
    /// Allow creating device nodes through mknod (refused by default).
    #[arg(long)]
    pub allow_devices: bool,
    /// Keep setuid and setgid bits in modes clients set (stripped by default). Only for
    /// guests trusted as root on the host: with it, a client can leave setuid programs here,
    /// owned by any uid it names when the server runs as root.
    #[arg(long)]
    pub allow_setuid: bool,
    /// Speak plain 9P2000.L only: do not offer crossfs's extension (compound messages and
    /// listings with attributes, docs/protocol.md) to `crossfs mount`. For comparisons; the
    /// kernel's 9p client never asks for it either way.
    #[arg(long)]
    pub no_extensions: bool,
    /// Copy every read's and write's data through the server's memory instead of splicing
    /// it from the file into the socket, or from the socket into the file (for
    /// comparisons: `crossfs stats` shows the bytes each path moved).
    #[arg(long)]
    pub no_splice: bool,
    /// Serve TCP on an address other than loopback (needs --token-file). 9P is not
    /// encrypted: whoever can read the traffic sees the files and the token. Use only on a
    /// private network.
    #[arg(long, requires = "token_file")]
    pub allow_remote: bool,
    /// Require clients to present the secret in this file (its bytes, less one trailing
    /// newline) before they may attach. `crossfs mount --token-file` does; Linux's own 9p
    /// client cannot.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Unix socket on which `crossfs stats` reads this server's counters.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Requests served at once per connection.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// Requests a connection may have in flight before the server stops reading from it.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub max_in_flight: u16,
    /// Fids (open handles) one connection may hold.
    #[arg(long, value_name = "N", default_value_t = 65536)]
    pub max_fids: usize,
    /// Change events, streamed to `crossfs mount` (cache coherence, inotify in the guest)
    /// and `crossfs watch`: auto (inotify on the export's directories within a watch
    /// budget, polling beyond; fanotify if inotify is unavailable), fanotify (a mark on the
    /// export's whole file system: needs CAP_SYS_ADMIN, and every change on that file
    /// system passes through the server), inotify, poll, or off. While on, a sync
    /// briefly creates a file `.crossfs-sync-*` at the top of the export (hidden from
    /// clients).
    #[arg(long, value_name = "WATCHER", default_value = "auto", value_parser = parse_events)]
    pub events: EventsChoice,
    /// Change events queued per client before it is sent one "rescan" instead (a client
    /// that falls behind never slows the server or loses a change silently).
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1048576))]
    pub event_queue: u32,
    /// Clients served at once; one more is closed at once, with a warning in the log.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Bytes of requests one connection may have queued or running before the server stops
    /// reading from it (one request is always taken, however large).
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse_buffer)]
    pub max_buffered_bytes: usize,
    /// Largest extended attribute value (or list of names) read or written (Linux's own
    /// limit is 64K).
    #[arg(long, value_name = "BYTES", default_value = "64K", value_parser = parse_buffer)]
    pub max_xattr_size: usize,
    /// Bytes of extended attribute values one connection may hold between Txattrwalk or
    /// Txattrcreate and Tclunk; past it, ENOSPC.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_buffer)]
    pub max_pending_xattr_bytes: usize,
    /// Descriptors the server may hold for all clients together, of both doors (9P and
    /// vhost-user-fs). Default: the open-file limit (raised to its hard maximum) less an
    /// eighth.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(64..))]
    pub fd_budget: Option<u64>,
    /// vhost-user-fs listeners: largest FUSE request in 4 KiB pages (FUSE_MAX_PAGES); the
    /// guest gets min(this, queue size - 4). 256 pages is 1 MiB; 32 is what a guest uses
    /// without FUSE_MAX_PAGES.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub max_pages: u32,
    /// vhost-user-fs listeners: what the guest kernel may cache, as virtiofsd's --cache
    /// (and the same words as `crossfs mount --cache`): never (nothing; direct I/O),
    /// metadata (names and attributes a day, data direct I/O), auto (names and attributes
    /// 1 s, page cache dropped at open), always (a day, page cache kept; writeback caching
    /// only with --writeback).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_virtiofs_cache)]
    pub cache: crossfs_virtiofs::CacheMode,
    /// vhost-user-fs listeners, with --cache always: offer the guest writeback caching, as
    /// virtiofsd's --writeback. Its kernel then writes through its page cache and keeps its
    /// own times and sizes of regular files; and it forgets the block count of every file
    /// it closes, so the next stat of each costs a request (without, the files a guest just
    /// made are statted from its cache).
    #[arg(long)]
    pub writeback: bool,
    /// vhost-user-fs listeners: request queues (besides the high-priority one); the VMM's
    /// num-request-queues must not exceed it.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub request_queues: u16,
    /// vhost-user-fs: answer the guest's extended attribute requests "not supported"
    /// (ENOSYS), as virtiofsd does without --xattr. The 9P door is not affected.
    #[arg(long)]
    pub no_xattr: bool,
    /// vhost-user-fs: do not offer READDIRPLUS (virtiofsd's --no-readdirplus): the guest
    /// then lists directories with READDIR and looks each name up.
    #[arg(long)]
    pub no_readdirplus: bool,
    /// vhost-user-fs: tell the guest which directories are the roots of other file systems
    /// mounted inside the export (another device than their parent's), so that it mounts
    /// each as a submount with a device number of its own, as virtiofsd's
    /// --announce-submounts. Without, the guest sees one file system, whose inode numbers
    /// may then repeat across the host's.
    #[arg(long)]
    pub announce_submounts: bool,
}

fn parse_virtiofs_cache(s: &str) -> Result<crossfs_virtiofs::CacheMode, String> {
    match s {
        "never" => Ok(crossfs_virtiofs::CacheMode::Never),
        "metadata" => Ok(crossfs_virtiofs::CacheMode::Metadata),
        "auto" => Ok(crossfs_virtiofs::CacheMode::Auto),
        "always" => Ok(crossfs_virtiofs::CacheMode::Always),
        _ => Err(format!("`{s}`: expected never, metadata, auto or always")),
    }
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// A `crossfs serve` address (unix:PATH, tcp:HOST:PORT, vsock:CID:PORT), or the mount
    /// point of a `crossfs mount` (its server is then watched).
    pub target: String,
    /// Resume after event EPOCH:SEQ (as printed with --json): the events since then if the
    /// server still has them, else an explicit rescan of everything.
    #[arg(long, value_name = "EPOCH:SEQ")]
    pub since: Option<String>,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Present the secret in this file to a server started with `--token-file`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The guest's mount point of the virtiofs mount (`mount -t virtiofs TAG MOUNTPOINT`).
    pub mountpoint: PathBuf,
}

#[derive(Args, Debug)]
pub struct SyncArgs {
    /// A `crossfs mount` whose server streams change events: its mount point, or any path in
    /// it (which need not exist yet).
    pub path: PathBuf,
}

/// A server address as the user wrote it, and what it means. The mount table shows it as
/// written (the source of an fstab line), so that mount(8) and findmnt recognise the mount.
#[derive(Clone, Debug)]
pub struct GivenAddr {
    pub given: String,
    pub addr: Addr,
}

impl std::str::FromStr for GivenAddr {
    type Err = crossfs_transport::AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(GivenAddr {
            given: s.to_owned(),
            addr: s.parse()?,
        })
    }
}

impl std::ops::Deref for GivenAddr {
    type Target = Addr;

    fn deref(&self) -> &Addr {
        &self.addr
    }
}

impl std::fmt::Display for GivenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.given)
    }
}

#[derive(Args, Debug)]
pub struct MountArgs {
    /// The export: unix:PATH, tcp:HOST:PORT, vsock:CID:PORT or fd:N. The mount table shows
    /// it, as written, as the mount's source (type fuse.crossfs).
    pub addr: GivenAddr,
    /// Where to mount it (an existing directory).
    pub mountpoint: PathBuf,
    /// Options as mount(8) and sshfs take them, comma-separated: each flag below without
    /// its dashes (`cache=always`, `negative_ttl=0`, `no-events`), `ro`, and sshfs's
    /// `default_permissions`, `allow_other`, `reconnect`, `uid=N`, `gid=N`; mount(8)'s own
    /// (`defaults`, `nofail`, `_netdev`, `x-*`, ...) are accepted. The same words as in
    /// fstab (mount.crossfs); an option crossfs cannot honour is refused by name.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Mount even when MOUNTPOINT already has a mount (of crossfs or anything else but
    /// autofs), over it. Refused by default: a second mount there is most often a mistake
    /// (`mount -a` again, a unit started twice), and hides the first.
    #[arg(long)]
    pub allow_stacked: bool,
    /// Export name sent in Tattach (diod wants the exported path; crossfs ignores it).
    #[arg(long, default_value = "")]
    pub aname: String,
    /// Message size to ask for; the effective one is min(this, transport cap, server's). The
    /// default, 1 MiB of data plus a page for headers, lets every FUSE request of 1 MiB
    /// travel as one 9P message.
    #[arg(long, value_name = "BYTES", default_value = "1052672", value_parser = parse_msize)]
    pub msize: u32,
    /// FUSE request size in 4 KiB pages (default: the kernel's maximum). 32 = 128 KiB, the
    /// kernel's default without FUSE_MAX_PAGES.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_pages: Option<u32>,
    /// Cache policy: never (every access asks the server), metadata (attributes and entries
    /// cached, data never), auto (default: page cache kept while the file is unchanged),
    /// always (writeback cache; for exports nobody else changes). While change events are
    /// followed (the default, see --no-events), every mode but never keeps names,
    /// attributes and listings until an event says they changed; without events, auto
    /// trusts them for 1 s, metadata and always for 24 h.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub cache: crossfs_mount::CacheMode,
    /// Directory entries kept in directory replicas, all directories together (0: none).
    /// While events are followed and the server speaks crossfs's extension, the first
    /// lookup in a directory fetches it whole with every entry's attributes; lookups,
    /// stats and listings in it are then answered here until an event says otherwise.
    /// Least recently used directories go first; each entry takes about 300 bytes.
    #[arg(long, value_name = "N", default_value_t = crossfs_mount::DEFAULT_REPLICA_ENTRIES)]
    pub replica_entries: usize,
    /// How long a missing name stays known to be missing, in milliseconds (0: never cached,
    /// -1: until the name is created through this mount). Default: follows --cache (off for
    /// never, 10 s for auto, 24 h for metadata and always; while change events are
    /// followed, until an event creates the name). A file created on the host under a name
    /// this mount found missing stays invisible here for that long.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub negative_ttl: Option<i64>,
    /// Mount read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Do not let programs on the mount be executed (mount(8)'s `noexec`).
    #[arg(long)]
    pub noexec: bool,
    /// Do not update access times on the mount (mount(8)'s `noatime`).
    #[arg(long)]
    pub noatime: bool,
    /// Let users other than the one mounting access the mount (the kernel then checks each
    /// user's permissions against the modes and owners shown, FUSE `default_permissions`,
    /// as on a local file system). The default for a mount made by root, as at boot; a
    /// mount made by another user is private unless this is given (and /etc/fuse.conf
    /// has `user_allow_other`).
    #[arg(long, conflicts_with = "private")]
    pub allow_other: bool,
    /// Have the kernel check every caller's permissions against the modes and owners
    /// shown, as on a local file system (FUSE `default_permissions`), also on a private
    /// mount. On whenever other users may use the mount, and with --changes behind.
    #[arg(long)]
    pub default_permissions: bool,
    /// Only the user who mounts may use the mount, even when that is root (FUSE without
    /// `allow_other`: the kernel refuses every other user, whatever the modes say).
    #[arg(long)]
    pub private: bool,
    /// Show every file as owned by this uid.
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// Show every file as owned by this gid.
    #[arg(long, value_name = "GID")]
    pub gid: Option<u32>,
    /// FUSE worker threads.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub threads: usize,
    /// Serve FUSE over io_uring where the kernel offers it (Linux 6.14+ with
    /// /sys/module/fuse/parameters/enable_uring set to Y), as libfuse 3.18's `-o io_uring`:
    /// one ring per CPU served by threads pinned to it (a handler that waits for the server
    /// frees the ring for another), beside the --threads /dev/fuse workers, which serve
    /// alone when the kernel does not offer it or refuses it. Off by default: measured on a
    /// 2-core VM, it halves what a request the mount answers itself costs but small reads
    /// and writes that wait for the server cost a thread hop more, docs/bench.md. `crossfs
    /// stats` counts the requests each transport served.
    #[arg(long)]
    pub io_uring: bool,
    /// Keep the CPUs this mount runs on from halting for US microseconds after each FUSE
    /// request (0: never), by a thread per CPU that spins at the lowest priority
    /// (SCHED_IDLE: it yields to anything else that runs there, and sleeps once no request
    /// came for US). In a VM whose idle vCPUs halt at once, waking one is most of what a
    /// request costs (docs/bench.md): the spinning spends idle CPU time to save it, which
    /// `top` shows as the mount's (threads crossfs-poll-N). `auto`, the default: 200 in a
    /// virtual machine of at most 4 CPUs, unless its kernel polls before halting
    /// (cpuidle-haltpoll with guest_halt_poll_ns above 0) or a cgroup CPU quota applies (the
    /// spinning would spend it); 0 elsewhere (on more CPUs every one would spin after each
    /// request). The log says what auto chose and why.
    #[arg(long, value_name = "auto|US", default_value = "auto", value_parser = parse_idle_poll)]
    pub idle_poll: IdlePoll,
    /// Copy every read's data through the mount's memory instead of splicing it from the
    /// socket into /dev/fuse (for comparisons: `crossfs stats` shows the bytes each path
    /// moved).
    #[arg(long)]
    pub no_splice: bool,
    /// Socket send and receive buffer size, independent of msize.
    #[arg(long, value_name = "BYTES", value_parser = parse_buffer)]
    pub socket_buffer: Option<usize>,
    /// Unix socket on which `crossfs stats` reads this mount's counters.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Do not follow the server's change events (a second connection that keeps the
    /// caches coherent and replays host changes for watchers in the guest). Without
    /// them, host changes show once the cache timeouts of --cache pass.
    #[arg(long)]
    pub no_events: bool,
    /// Send every open and close of a file or directory to the mount (FUSE OPEN, FLUSH,
    /// RELEASE, OPENDIR, RELEASEDIR), and POSIX locks (fcntl) on to the server. By default,
    /// in auto mode with change events followed, the kernel opens and closes files and
    /// directories without asking the mount (FUSE's no-open and no-opendir modes: both cost
    /// no request, and each file's pages and each directory's listing stay cached across
    /// opens until an event says it changed), and keeps POSIX locks itself, as virtiofsd
    /// and sshfs do: exact between the processes of this guest, but not seen by the host
    /// or other mounts. See the README's differences.
    #[arg(long)]
    pub send_opens: bool,
    /// When changes reach the server. exact (default): every change waits for the
    /// server's answer. behind: a chmod, utimens, chown to the owner a file already has,
    /// a write of up to 64 KiB, the create of a regular file whose name the directory's
    /// replica shows missing, the removal of a file of up to 1 MiB the replica shows, or
    /// the rename of a file the mount made or opened within its directory onto a free
    /// name, the removal of a directory the replica shows empty, or a mkdir whose name
    /// the replica shows missing, whose outcome the mount can tell from what it holds, is
    /// answered at once and sent to the server after, in order (other renames, links and
    /// truncations still wait; a name a host program took first keeps the host's file, a
    /// created file or directory of the guest's going beside it as
    /// NAME.crossfs-conflict-N, a removal or rename refused). A change the server then refuses
    /// fails the file's next fsync (with --send-opens, or its next close by the process
    /// that made it), and the next `crossfs sync`; fsync, `crossfs
    /// sync` and unmount wait until what was sent behind is on the host. Needs change
    /// events and a crossfs server; turns on default_permissions. See the README's
    /// "Changes sent behind".
    #[arg(long, value_name = "MODE", default_value = "exact")]
    pub changes: crossfs_mount::ChangeMode,
    /// Hand the connection to the kernel's 9p client (mount -t 9p -o trans=fd) instead of
    /// FUSE, so vsock and unix sockets work with it too. Needs a kernel with 9p.
    #[arg(long)]
    pub kernel: bool,
    /// Present the secret in this file to a server started with `--token-file` (its bytes,
    /// less one trailing newline). Not with --kernel: Linux's 9p client cannot send it.
    #[arg(long, value_name = "PATH", conflicts_with = "kernel")]
    pub token_file: Option<PathBuf>,
    /// When the connection to the server is lost (say the server was restarted), calls in
    /// flight fail with EIO and crossfs dials again, re-attaches, and binds the mount's
    /// files and open files again; calls made meanwhile wait for that up to this many
    /// seconds after the loss, then fail with EIO until the server is back. A waiting call
    /// whose process gets a signal returns EINTR (within about 50 ms), whatever this says.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub reconnect_wait: u64,
    /// Do not reconnect: once the connection is lost, every call fails with EIO.
    #[arg(long, conflicts_with = "reconnect_wait")]
    pub no_reconnect: bool,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// The control socket given to `crossfs serve --control` or `crossfs mount --control`,
    /// or the mount point of a `crossfs mount` (every mount serves its counters there too).
    #[arg(value_name = "CONTROL|MOUNTPOINT")]
    pub control: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `crossfs bench` arguments live beside the bench command.
pub mod crossfs_bench_args {
    pub use crate::cmd::bench::BenchArgs;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_msize("100").is_err());
        assert_eq!(parse_msize("1M"), Ok(1 << 20));
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
