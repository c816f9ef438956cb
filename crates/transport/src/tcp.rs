//! TCP: resolving hosts, the loopback-only listening policy, binding and
//! connecting.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{sockopt, AddressFamily};

use crate::addr::Addr;
use crate::error::TransportError;
use crate::options::{apply, apply_buffers, ListenOptions, SocketOptions};
use crate::socket::{self, peer_name, stream_socket, to_addr, BACKLOG};
use crate::stream::Stream;

/// Resolves `host:port` (IP literals without a lookup).
fn resolve(addr: &Addr, host: &str, port: u16) -> Result<Vec<SocketAddr>, TransportError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|source| TransportError::Resolve {
            addr: addr.to_string(),
            source,
        })?
        .collect();
    if found.is_empty() {
        return Err(TransportError::NoAddresses {
            addr: addr.to_string(),
        });
    }
    Ok(found)
}

/// Whether `ip` is a loopback address (including IPv4-mapped IPv6).
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

fn family(sa: &SocketAddr) -> AddressFamily {
    match sa {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    }
}

/// Enforces the loopback-only policy on resolved listening addresses.
fn check_policy(addr: &Addr, ips: &[SocketAddr], allow_remote: bool) -> Result<(), TransportError> {
    let Some(remote) = ips.iter().find(|sa| !is_loopback(sa.ip())) else {
        return Ok(());
    };
    if !allow_remote {
        return Err(TransportError::RemoteTcpRefused {
            addr: addr.to_string(),
            ip: remote.ip(),
        });
    }
    tracing::warn!(
        %addr,
        "listening on a non-loopback TCP address: 9P2000.L is not encrypted, so anyone who \
         can read the traffic to {} sees what crosses it",
        remote.ip()
    );
    Ok(())
}

/// Binds and listens on the first address `host` resolves to that works;
/// returns the socket and its actual address (with the chosen port).
pub(crate) fn bind(
    addr: &Addr,
    host: &str,
    port: u16,
    opts: &ListenOptions,
) -> Result<(OwnedFd, Addr), TransportError> {
    let ips = resolve(addr, host, port)?;
    check_policy(addr, &ips, opts.allow_remote_tcp)?;
    let mut last = None;
    for sa in &ips {
        match bind_one(addr, sa, opts) {
            Ok(bound) => return Ok(bound),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("resolve returns at least one address"))
}

fn bind_one(
    addr: &Addr,
    sa: &SocketAddr,
    opts: &ListenOptions,
) -> Result<(OwnedFd, Addr), TransportError> {
    let fd = stream_socket(family(sa)).map_err(|e| TransportError::sys(addr, "socket", e))?;
    sockopt::set_socket_reuseaddr(&fd, true)
        .map_err(|e| TransportError::sys(addr, "setsockopt(SO_REUSEADDR)", e))?;
    apply_buffers(fd.as_fd(), family(sa), addr, &opts.stream)?;
    rustix::net::bind(&fd, sa).map_err(|e| TransportError::sys(addr, "bind", e))?;
    rustix::net::listen(&fd, BACKLOG).map_err(|e| TransportError::sys(addr, "listen", e))?;
    let local =
        rustix::net::getsockname(&fd).map_err(|e| TransportError::sys(addr, "getsockname", e))?;
    let local = to_addr(&local).unwrap_or_else(|| addr.clone());
    Ok((fd, local))
}

/// Connects to the first address `host` resolves to that accepts.
pub(crate) fn connect(
    addr: &Addr,
    host: &str,
    port: u16,
    opts: &SocketOptions,
) -> Result<Stream, TransportError> {
    let mut last = None;
    for sa in resolve(addr, host, port)? {
        let fd = stream_socket(family(&sa)).map_err(|e| TransportError::sys(addr, "socket", e))?;
        // Buffers before connect, so that TCP's window scale reflects them.
        apply(fd.as_fd(), family(&sa), addr, opts)?;
        match socket::connect(fd.as_fd(), &sa) {
            Ok(()) => {
                let peer = peer_name(fd.as_fd(), addr);
                return Ok(Stream::new(fd, addr.clone(), peer, None));
            }
            Err(e) => {
                tracing::debug!(%addr, %sa, "connect failed: {e}");
                last = Some(TransportError::sys(addr, "connect", e));
            }
        }
    }
    Err(last.expect("resolve returns at least one address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{echo, errno};
    use crate::{connect, Listener};

    fn local_port(listener: &Listener) -> u16 {
        match listener.local_addr() {
            Addr::Tcp(_, port) => *port,
            other => panic!("not tcp: {other}"),
        }
    }

    #[test]
    fn listen_connect_echo_ipv4() {
        let listener = Listener::bind(
            &"tcp:127.0.0.1:0".parse().unwrap(),
            &ListenOptions::default(),
        )
        .unwrap();
        let port = local_port(&listener);
        assert_ne!(port, 0, "local_addr reports the chosen port");
        assert_eq!(listener.local_addr(), &Addr::Tcp("127.0.0.1".into(), port));
        let mut client = crate::connect(listener.local_addr(), &SocketOptions::default()).unwrap();
        let mut server = listener.accept().unwrap();
        echo(&mut client, &mut server);
        assert_eq!(client.peer(), format!("tcp:127.0.0.1:{port}"));
        assert!(
            server.peer().starts_with("tcp:127.0.0.1:"),
            "{}",
            server.peer()
        );
        // nodelay is on by default, on both ends.
        assert!(sockopt::tcp_nodelay(&client).unwrap());
        assert!(sockopt::tcp_nodelay(&server).unwrap());
    }

    #[test]
    fn listen_connect_echo_ipv6_and_hostname() {
        let listener =
            Listener::bind(&"tcp:[::1]:0".parse().unwrap(), &ListenOptions::default()).unwrap();
        assert!(listener.local_addr().to_string().starts_with("tcp:[::1]:"));
        let mut client = connect(listener.local_addr(), &SocketOptions::default()).unwrap();
        echo(&mut client, &mut listener.accept().unwrap());

        // A host name that resolves to loopback is allowed.
        let listener = Listener::bind(
            &"tcp:localhost:0".parse().unwrap(),
            &ListenOptions::default(),
        )
        .unwrap();
        let port = local_port(&listener);
        let by_name = Addr::Tcp("localhost".into(), port);
        let mut client = connect(&by_name, &SocketOptions::default()).unwrap();
        echo(&mut client, &mut listener.accept().unwrap());
    }

    #[test]
    fn non_loopback_refused_without_flag() {
        for text in ["tcp:0.0.0.0:0", "tcp:[::]:0", "tcp:192.0.2.1:564"] {
            let err =
                Listener::bind(&text.parse().unwrap(), &ListenOptions::default()).unwrap_err();
            assert!(
                matches!(err, TransportError::RemoteTcpRefused { .. }),
                "{text}: {err}"
            );
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("refusing to listen on {text}: ")),
                "{msg}"
            );
            assert!(msg.contains("is not a loopback address") && msg.contains("allow_remote_tcp"));
        }
    }

    #[test]
    fn non_loopback_allowed_with_flag() {
        let opts = ListenOptions {
            allow_remote_tcp: true,
            ..ListenOptions::default()
        };
        let listener = Listener::bind(&"tcp:0.0.0.0:0".parse().unwrap(), &opts).unwrap();
        let port = local_port(&listener);
        assert_eq!(listener.local_addr(), &Addr::Tcp("0.0.0.0".into(), port));
        let mut client = connect(
            &Addr::Tcp("127.0.0.1".into(), port),
            &SocketOptions::default(),
        )
        .unwrap();
        echo(&mut client, &mut listener.accept().unwrap());
    }

    #[test]
    fn connect_refused_names_address() {
        let listener = Listener::bind(
            &"tcp:127.0.0.1:0".parse().unwrap(),
            &ListenOptions::default(),
        )
        .unwrap();
        let addr = listener.local_addr().clone();
        drop(listener);
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        assert_eq!(errno(&err), libc::ECONNREFUSED);
        assert!(
            err.to_string()
                .starts_with(&format!("{addr}: connect failed: ")),
            "{err}"
        );
    }

    #[test]
    fn unresolvable_host() {
        let addr: Addr = "tcp:no-such-host.invalid:564".parse().unwrap();
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        assert!(matches!(err, TransportError::Resolve { .. }), "{err}");
        assert!(err
            .to_string()
            .starts_with("tcp:no-such-host.invalid:564: cannot resolve host"));
    }

    #[test]
    fn loopback_detection() {
        for ip in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "0.0.0.0",
            "::",
            "10.0.0.1",
            "::ffff:10.0.0.1",
            "192.168.1.1",
        ] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }
}
