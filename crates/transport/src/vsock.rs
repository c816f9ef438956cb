//! `AF_VSOCK` stream sockets, with errors that say which vsock transport
//! the kernel is missing.

use std::os::fd::{AsFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::AddressFamily;

use crate::addr::{Addr, VSOCK_CID_ANY, VSOCK_CID_HOST, VSOCK_CID_LOCAL};
use crate::error::TransportError;
use crate::options::{apply, apply_buffers, ListenOptions, SocketOptions};
use crate::socket::{self, peer_name, stream_socket, to_addr, BACKLOG};
use crate::stream::Stream;
use crate::sys::{self, VsockAddr};

/// This machine's own vsock CID (`IOCTL_VM_SOCKETS_GET_LOCAL_CID` on
/// `/dev/vsock`): the CID a peer connects to in order to reach us. Reading
/// `/dev/vsock` may need privileges.
pub fn vsock_local_cid() -> Result<u32, TransportError> {
    sys::vsock_local_cid().map_err(|source| TransportError::Sys {
        addr: "/dev/vsock".into(),
        op: "ioctl(IOCTL_VM_SOCKETS_GET_LOCAL_CID)",
        source,
    })
}

/// Maps an errno to [`TransportError::VsockUnavailable`] when it means a
/// missing vsock transport, else to [`TransportError::Sys`].
fn error(addr: &Addr, op: &'static str, errno: Errno, cid: u32) -> TransportError {
    match hint(errno, cid) {
        Some(hint) => TransportError::VsockUnavailable {
            addr: addr.to_string(),
            op,
            source: errno.into(),
            hint,
        },
        None => TransportError::sys(addr, op, errno),
    }
}

const LOOPBACK: &str =
    "the vsock loopback transport (CONFIG_VSOCKETS_LOOPBACK, module vsock_loopback)";

/// Says which vsock transport is missing, if that is what `errno` means.
fn hint(errno: Errno, cid: u32) -> Option<String> {
    let is_local = || {
        cid == VSOCK_CID_LOCAL || (cid != VSOCK_CID_ANY && sys::vsock_local_cid().ok() == Some(cid))
    };
    Some(match errno {
        Errno::AFNOSUPPORT => {
            "this kernel has no AF_VSOCK support (CONFIG_VSOCKETS, module vsock)".to_owned()
        }
        Errno::ADDRNOTAVAIL | Errno::NODEV if is_local() => {
            format!("CID {cid} is this machine, which needs {LOOPBACK}")
        }
        // With a loopback transport, an unbound port on CID 1 is refused at
        // once; without one, the kernel hands CID 1 to the guest-to-host
        // transport and the hypervisor drops it, so the connect times out.
        Errno::TIMEDOUT if cid == VSOCK_CID_LOCAL => format!(
            "no reply from CID 1: without {LOOPBACK}, the kernel sends CID 1 traffic to the \
             hypervisor, which drops it"
        ),
        Errno::ADDRNOTAVAIL => {
            let own =
                sys::vsock_local_cid().map_or(String::new(), |c| format!(" (its CID is {c})"));
            format!("CID {cid} is not a CID of this machine{own}; listen on vsock:any:PORT instead")
        }
        Errno::NODEV if cid == VSOCK_CID_HOST => "no vsock transport reaches the host: this \
                                                  machine has no virtio-vsock (or VMCI or \
                                                  Hyper-V) device"
            .to_owned(),
        Errno::NODEV => format!(
            "no vsock transport reaches CID {cid}: a guest can reach only the host (CID 2), \
             and a host needs the vhost_vsock module to reach guests"
        ),
        _ => return None,
    })
}

/// Binds and listens on `cid:port`; returns the socket and its actual
/// address (with the chosen port when `port` is `any`).
pub(crate) fn bind(
    addr: &Addr,
    cid: u32,
    port: u32,
    opts: &ListenOptions,
) -> Result<(OwnedFd, Addr), TransportError> {
    let fd = stream_socket(AddressFamily::VSOCK).map_err(|e| error(addr, "socket", e, cid))?;
    apply_buffers(fd.as_fd(), AddressFamily::VSOCK, addr, &opts.stream)?;
    rustix::net::bind(&fd, &VsockAddr { cid, port }).map_err(|e| error(addr, "bind", e, cid))?;
    rustix::net::listen(&fd, BACKLOG).map_err(|e| TransportError::sys(addr, "listen", e))?;
    let local =
        rustix::net::getsockname(&fd).map_err(|e| TransportError::sys(addr, "getsockname", e))?;
    let local = to_addr(&local).unwrap_or_else(|| addr.clone());
    Ok((fd, local))
}

/// Connects to `cid:port`.
pub(crate) fn connect(
    addr: &Addr,
    cid: u32,
    port: u32,
    opts: &SocketOptions,
) -> Result<Stream, TransportError> {
    let fd = stream_socket(AddressFamily::VSOCK).map_err(|e| error(addr, "socket", e, cid))?;
    apply(fd.as_fd(), AddressFamily::VSOCK, addr, opts)?;
    socket::connect(fd.as_fd(), &VsockAddr { cid, port })
        .map_err(|e| error(addr, "connect", e, cid))?;
    let peer = peer_name(fd.as_fd(), addr);
    Ok(Stream::new(fd, addr.clone(), peer, None))
}

#[cfg(test)]
mod tests {
    //! These tests adapt to what the kernel offers, but every outcome is
    //! asserted: either the operation works, or it fails with the typed,
    //! clearly worded error for the missing vsock transport.

    use super::{apply, stream_socket, sys, vsock_local_cid, AddressFamily, AsFd, Errno};
    use crate::addr::VSOCK_PORT_ANY;
    use crate::addr::{Addr, VSOCK_CID_ANY, VSOCK_CID_LOCAL};
    use crate::error::TransportError;
    use crate::options::{ListenOptions, SocketOptions};
    use crate::testutil::{echo, errno};
    use crate::{connect, Listener};

    /// A port unlikely to have a listener.
    const UNUSED_PORT: u32 = 0x7a11_0c0d;

    fn no_af_vsock(err: &TransportError) -> bool {
        matches!(err, TransportError::VsockUnavailable { op: "socket", .. })
            && errno(err) == libc::EAFNOSUPPORT
            && err.to_string().contains("no AF_VSOCK support")
    }

    #[test]
    fn listen_on_any_cid_picks_a_port() {
        let addr: Addr = "vsock:any:any".parse().unwrap();
        match Listener::bind(&addr, &ListenOptions::default()) {
            Ok(listener) => match *listener.local_addr() {
                Addr::Vsock { cid, port } => {
                    assert_eq!(cid, VSOCK_CID_ANY);
                    assert_ne!(port, VSOCK_PORT_ANY, "local_addr reports the chosen port");
                }
                ref other => panic!("not vsock: {other}"),
            },
            Err(err) => assert!(no_af_vsock(&err), "{err}"),
        }
    }

    #[test]
    fn loopback_listen_and_connect() {
        let addr: Addr = "vsock:local:any".parse().unwrap();
        let listener = match Listener::bind(&addr, &ListenOptions::default()) {
            Ok(listener) => listener,
            Err(err) if no_af_vsock(&err) => return,
            Err(err) => {
                eprintln!("vsock loopback unavailable: {err}");
                assert!(
                    matches!(err, TransportError::VsockUnavailable { op: "bind", .. }),
                    "{err}"
                );
                assert!(
                    matches!(errno(&err), libc::EADDRNOTAVAIL | libc::ENODEV),
                    "{err}"
                );
                let msg = err.to_string();
                assert!(msg.starts_with("vsock:1:any: vsock bind failed: "), "{msg}");
                assert!(msg.contains("needs the vsock loopback transport"), "{msg}");
                assert!(msg.contains("module vsock_loopback"), "{msg}");
                return;
            }
        };
        let Addr::Vsock { cid: 1, port } = *listener.local_addr() else {
            panic!("unexpected local address {}", listener.local_addr());
        };
        let target = Addr::Vsock {
            cid: VSOCK_CID_LOCAL,
            port,
        };
        let mut client = connect(&target, &SocketOptions::default()).unwrap();
        let mut server = listener.accept().unwrap();
        echo(&mut client, &mut server);
        assert!(server.peer().starts_with("vsock:1:"), "{}", server.peer());
    }

    /// Connecting to CID 1 with nobody listening: refused at once with a
    /// loopback transport; without one, it times out (the hypervisor drops
    /// it) or has no device, and the error says loopback is missing.
    #[test]
    fn connect_to_local_cid_without_listener() {
        let addr = Addr::Vsock {
            cid: VSOCK_CID_LOCAL,
            port: UNUSED_PORT,
        };
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        eprintln!("connect {addr}: {err}");
        check_connect_error(&addr, &err);
    }

    /// The same via this machine's own CID (as reported by /dev/vsock).
    #[test]
    fn connect_to_own_cid_without_listener() {
        let cid = match vsock_local_cid() {
            Ok(cid) => cid,
            Err(err) => {
                // No /dev/vsock (or no permission): the error says so.
                assert!(err.to_string().starts_with("/dev/vsock: ioctl"), "{err}");
                return;
            }
        };
        let addr = Addr::Vsock {
            cid,
            port: UNUSED_PORT,
        };
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        eprintln!("local CID {cid}; connect {addr}: {err}");
        check_connect_error(&addr, &err);
    }

    fn check_connect_error(addr: &Addr, err: &TransportError) {
        if no_af_vsock(err) {
            return;
        }
        match err {
            TransportError::Sys { op: "connect", .. } => {
                assert!(
                    matches!(errno(err), libc::ECONNRESET | libc::ECONNREFUSED),
                    "{err}"
                );
            }
            TransportError::VsockUnavailable { op: "connect", .. } => {
                assert!(
                    matches!(errno(err), libc::ENODEV | libc::ETIMEDOUT),
                    "{err}"
                );
                assert!(err.to_string().contains("module vsock_loopback"), "{err}");
            }
            _ => panic!("unexpected error: {err}"),
        }
        assert!(err.to_string().starts_with(&format!("{addr}: ")), "{err}");
    }

    #[test]
    fn buffer_size_option() {
        let addr: Addr = "vsock:any:any".parse().unwrap();
        let fd = match stream_socket(AddressFamily::VSOCK) {
            Ok(fd) => fd,
            Err(e) => {
                assert_eq!(e, Errno::AFNOSUPPORT);
                return;
            }
        };
        let want = 1 << 20;
        let opts = SocketOptions {
            recv_buffer: Some(want),
            ..SocketOptions::default()
        };
        apply(fd.as_fd(), AddressFamily::VSOCK, &addr, &opts).unwrap();
        assert!(sys::vsock_buffer_size(fd.as_fd()).unwrap() >= want as u64);
    }
}
