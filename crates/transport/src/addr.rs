//! Transport addresses: [`Addr`], its text form, and [`AddrParseError`].

use std::fmt;
use std::net::Ipv6Addr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::str::FromStr;

/// vsock CID meaning "any local CID" (`VMADDR_CID_ANY`); written `any`.
pub const VSOCK_CID_ANY: u32 = u32::MAX;
/// vsock CID of the host, as seen from a guest (`VMADDR_CID_HOST`); written `host`.
pub const VSOCK_CID_HOST: u32 = 2;
/// vsock CID for loopback within one machine (`VMADDR_CID_LOCAL`); written `local`.
pub const VSOCK_CID_LOCAL: u32 = 1;
/// vsock port meaning "pick a free port" (`VMADDR_PORT_ANY`); written `any`.
pub const VSOCK_PORT_ANY: u32 = u32::MAX;

/// Longest unix socket path the kernel accepts (`sizeof sun_path`).
pub const UNIX_PATH_MAX: usize = 108;

/// The forms [`Addr`] accepts, for error messages.
const EXPECTED: &str = "unix:PATH, tcp:HOST:PORT, vsock:CID:PORT, fd:N or vhost-user-fs:PATH";

/// Where to listen or connect.
///
/// The text form (see [`FromStr`] and [`Display`](fmt::Display)) is
/// `unix:/path`, `tcp:HOST:PORT` (`tcp:[::1]:PORT` for IPv6), `vsock:CID:PORT`
/// (CID may be a number or `any`, `host`, `local`; PORT may be `any`) or
/// `fd:N`. Displaying an address and parsing the result gives the same value
/// (unix paths that are not UTF-8 excepted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Addr {
    /// A unix-domain stream socket at a filesystem path.
    Unix(PathBuf),
    /// A TCP host (name, IPv4 or unbracketed IPv6 literal) and port.
    Tcp(String, u16),
    /// An `AF_VSOCK` address (context id and port).
    Vsock {
        /// Context id; see [`VSOCK_CID_ANY`], [`VSOCK_CID_HOST`], [`VSOCK_CID_LOCAL`].
        cid: u32,
        /// Port; [`VSOCK_PORT_ANY`] lets the kernel choose when listening.
        port: u32,
    },
    /// A socket file descriptor inherited from the parent process.
    ///
    /// Using it hands ownership of descriptor N to this crate: nothing else
    /// in the process may use or close it. Each descriptor can be in use
    /// through `fd:N` by one [`Stream`](crate::Stream) or
    /// [`Listener`](crate::Listener) at a time.
    Fd(RawFd),
    /// A unix socket at a filesystem path on which a VMM (QEMU, cloud-hypervisor) connects
    /// to a vhost-user-fs backend. Not a byte stream for 9P: [`Listener::bind`] and
    /// [`connect`](crate::connect) refuse it with [`TransportError::NotAStream`]; the
    /// `crossfs-virtiofs` crate serves it.
    ///
    /// [`Listener::bind`]: crate::Listener::bind
    /// [`TransportError::NotAStream`]: crate::TransportError::NotAStream
    VhostUserFs(PathBuf),
}

/// Why a string is not a valid [`Addr`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddrParseError {
    /// The string has no `scheme:` prefix.
    #[error("address `{input}` has no transport scheme{hint}; expected {EXPECTED}")]
    MissingScheme {
        /// The whole input.
        input: String,
        /// A suggestion such as `` (did you mean `unix:/x`?)``, or empty.
        hint: String,
    },
    /// The scheme is not one crossfs knows.
    #[error("unknown transport scheme `{scheme}` in `{input}`{hint}; expected {EXPECTED}")]
    UnknownScheme {
        /// The whole input.
        input: String,
        /// The scheme as written.
        scheme: String,
        /// A suggestion such as `` (did you mean `tcp:h:1`?)``, or empty.
        hint: String,
    },
    /// A required part (path, host, port, CID, descriptor) is absent or empty.
    #[error("address `{input}` is missing the {part}; expected `{form}`")]
    MissingPart {
        /// The whole input.
        input: String,
        /// Which part is missing.
        part: &'static str,
        /// The expected form for this scheme.
        form: &'static str,
    },
    /// A port is not a number in range.
    #[error("bad port `{port}` in `{input}`: expected a number from 0 to {max}")]
    BadPort {
        /// The whole input.
        input: String,
        /// The port as written.
        port: String,
        /// The largest valid port.
        max: u32,
    },
    /// A vsock CID is neither a number nor a known name.
    #[error("bad vsock CID `{cid}` in `{input}`: expected a number or one of any, host, local")]
    BadCid {
        /// The whole input.
        input: String,
        /// The CID as written.
        cid: String,
    },
    /// An `fd:` value is not a non-negative integer.
    #[error("bad file descriptor `{fd}` in `{input}`: expected a non-negative integer")]
    BadFd {
        /// The whole input.
        input: String,
        /// The descriptor as written.
        fd: String,
    },
    /// An IPv6 host without brackets, or a bracketed host that is not IPv6.
    #[error("bad TCP host in `{input}`: write IPv6 addresses in brackets, e.g. tcp:[::1]:564")]
    BadIpv6 {
        /// The whole input.
        input: String,
    },
    /// A unix socket path longer than the kernel allows.
    #[error(
        "unix socket path in `{input}` is {len} bytes; the kernel allows at most {UNIX_PATH_MAX}"
    )]
    PathTooLong {
        /// The whole input.
        input: String,
        /// The path length in bytes.
        len: usize,
    },
}

impl FromStr for Addr {
    type Err = AddrParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let split = input.split_once(':').filter(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
        let Some((scheme, rest)) = split else {
            return Err(AddrParseError::MissingScheme {
                input: input.to_owned(),
                hint: suggest(input),
            });
        };
        match scheme.to_ascii_lowercase().as_str() {
            "unix" => parse_unix(input, rest),
            "tcp" => parse_tcp(input, rest),
            "vsock" => parse_vsock(input, rest),
            "fd" => parse_fd(input, rest),
            "vhost-user-fs" => {
                if rest.is_empty() {
                    return Err(missing(input, "path", "vhost-user-fs:PATH"));
                }
                let path = PathBuf::from(rest);
                check_unix_path(input, &path)?;
                Ok(Addr::VhostUserFs(path))
            }
            _ => Err(AddrParseError::UnknownScheme {
                input: input.to_owned(),
                scheme: scheme.to_owned(),
                hint: suggest(input),
            }),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Unix(path) => write!(f, "unix:{}", path.display()),
            Addr::Tcp(host, port) if host.contains(':') => write!(f, "tcp:[{host}]:{port}"),
            Addr::Tcp(host, port) => write!(f, "tcp:{host}:{port}"),
            Addr::Vsock { cid, port } => {
                f.write_str("vsock:")?;
                match *cid {
                    VSOCK_CID_ANY => f.write_str("any")?,
                    cid => write!(f, "{cid}")?,
                }
                match *port {
                    VSOCK_PORT_ANY => f.write_str(":any"),
                    port => write!(f, ":{port}"),
                }
            }
            Addr::Fd(fd) => write!(f, "fd:{fd}"),
            Addr::VhostUserFs(path) => write!(f, "vhost-user-fs:{}", path.display()),
        }
    }
}

/// Checks a unix socket path against the kernel's length limit.
pub(crate) fn check_unix_path(input: &str, path: &std::path::Path) -> Result<(), AddrParseError> {
    let len = path.as_os_str().len();
    if len > UNIX_PATH_MAX {
        return Err(AddrParseError::PathTooLong {
            input: input.to_owned(),
            len,
        });
    }
    Ok(())
}

fn parse_unix(input: &str, rest: &str) -> Result<Addr, AddrParseError> {
    if rest.is_empty() {
        return Err(missing(input, "path", "unix:PATH"));
    }
    let path = PathBuf::from(rest);
    check_unix_path(input, &path)?;
    Ok(Addr::Unix(path))
}

fn parse_tcp(input: &str, rest: &str) -> Result<Addr, AddrParseError> {
    const FORM: &str = "tcp:HOST:PORT";
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(AddrParseError::BadIpv6 {
                input: input.to_owned(),
            });
        };
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(AddrParseError::BadIpv6 {
                input: input.to_owned(),
            });
        }
        let Some(port) = after.strip_prefix(':') else {
            return Err(missing(input, "port", FORM));
        };
        (host, port)
    } else {
        let Some((host, port)) = rest.rsplit_once(':') else {
            return Err(missing(input, "port", FORM));
        };
        if host.contains(':') {
            return Err(AddrParseError::BadIpv6 {
                input: input.to_owned(),
            });
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(missing(input, "host", FORM));
    }
    if port.is_empty() {
        return Err(missing(input, "port", FORM));
    }
    let port = parse_number(port)
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| AddrParseError::BadPort {
            input: input.to_owned(),
            port: port.to_owned(),
            max: u16::MAX.into(),
        })?;
    Ok(Addr::Tcp(host.to_owned(), port))
}

fn parse_vsock(input: &str, rest: &str) -> Result<Addr, AddrParseError> {
    const FORM: &str = "vsock:CID:PORT";
    let Some((cid, port)) = rest.split_once(':') else {
        let part = if rest.is_empty() { "CID" } else { "port" };
        return Err(missing(input, part, FORM));
    };
    if cid.is_empty() {
        return Err(missing(input, "CID", FORM));
    }
    if port.is_empty() {
        return Err(missing(input, "port", FORM));
    }
    let cid_value = match cid.to_ascii_lowercase().as_str() {
        "any" => Some(VSOCK_CID_ANY),
        "host" => Some(VSOCK_CID_HOST),
        "local" => Some(VSOCK_CID_LOCAL),
        _ => parse_number(cid).and_then(|c| u32::try_from(c).ok()),
    };
    let cid = cid_value.ok_or_else(|| AddrParseError::BadCid {
        input: input.to_owned(),
        cid: cid.to_owned(),
    })?;
    let port_value = if port.eq_ignore_ascii_case("any") {
        Some(VSOCK_PORT_ANY)
    } else {
        parse_number(port).and_then(|p| u32::try_from(p).ok())
    };
    let port = port_value.ok_or_else(|| AddrParseError::BadPort {
        input: input.to_owned(),
        port: port.to_owned(),
        max: u32::MAX,
    })?;
    Ok(Addr::Vsock { cid, port })
}

fn parse_fd(input: &str, rest: &str) -> Result<Addr, AddrParseError> {
    if rest.is_empty() {
        return Err(missing(input, "file descriptor number", "fd:N"));
    }
    let fd = parse_number(rest)
        .and_then(|n| RawFd::try_from(n).ok())
        .ok_or_else(|| AddrParseError::BadFd {
            input: input.to_owned(),
            fd: rest.to_owned(),
        })?;
    Ok(Addr::Fd(fd))
}

/// Parses plain decimal digits (no sign, no spaces).
fn parse_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn missing(input: &str, part: &'static str, form: &'static str) -> AddrParseError {
    AddrParseError::MissingPart {
        input: input.to_owned(),
        part,
        form,
    }
}

/// Guesses what a scheme-less address meant, for error messages.
fn suggest(input: &str) -> String {
    if input.starts_with(['/', '.', '~']) {
        return format!(" (did you mean `unix:{input}`?)");
    }
    if input.parse::<std::net::SocketAddr>().is_ok() {
        return format!(" (did you mean `tcp:{input}`?)");
    }
    match input.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty() && !host.contains(':') && parse_number(port).is_some() =>
        {
            format!(" (did you mean `tcp:{input}`?)")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Addr, AddrParseError> {
        s.parse()
    }

    #[test]
    fn round_trips() {
        let cases = [
            (
                "unix:/run/crossfs.sock",
                Addr::Unix("/run/crossfs.sock".into()),
            ),
            ("unix:relative/sock", Addr::Unix("relative/sock".into())),
            ("tcp:127.0.0.1:564", Addr::Tcp("127.0.0.1".into(), 564)),
            ("tcp:localhost:0", Addr::Tcp("localhost".into(), 0)),
            ("tcp:[::1]:65535", Addr::Tcp("::1".into(), 65535)),
            ("vsock:3:564", Addr::Vsock { cid: 3, port: 564 }),
            (
                "vsock:any:any",
                Addr::Vsock {
                    cid: VSOCK_CID_ANY,
                    port: VSOCK_PORT_ANY,
                },
            ),
            ("fd:3", Addr::Fd(3)),
            (
                "vhost-user-fs:/run/fs.sock",
                Addr::VhostUserFs("/run/fs.sock".into()),
            ),
            ("fd:0", Addr::Fd(0)),
        ];
        for (text, addr) in cases {
            assert_eq!(parse(text).unwrap(), addr, "parsing {text}");
            assert_eq!(addr.to_string(), text, "displaying {addr:?}");
            assert_eq!(parse(&addr.to_string()).unwrap(), addr);
        }
    }

    #[test]
    fn vsock_cid_names() {
        assert_eq!(
            parse("vsock:host:5").unwrap(),
            Addr::Vsock { cid: 2, port: 5 }
        );
        assert_eq!(
            parse("vsock:local:5").unwrap(),
            Addr::Vsock { cid: 1, port: 5 }
        );
        assert_eq!(
            parse("vsock:ANY:5").unwrap(),
            Addr::Vsock {
                cid: u32::MAX,
                port: 5
            }
        );
        // Names display as numbers (except `any`) and still round-trip by value.
        let host = parse("vsock:host:5").unwrap();
        assert_eq!(host.to_string(), "vsock:2:5");
        assert_eq!(parse(&host.to_string()).unwrap(), host);
    }

    #[test]
    fn scheme_is_case_insensitive() {
        assert_eq!(parse("TCP:h:1").unwrap(), Addr::Tcp("h".into(), 1));
    }

    #[test]
    fn bad_ports() {
        for text in [
            "tcp:h:65536",
            "tcp:h:-1",
            "tcp:h:+5",
            "tcp:h:x",
            "tcp:[::1]:99999",
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                matches!(err, AddrParseError::BadPort { max: 65535, .. }),
                "{text}: {err}"
            );
            assert!(err.to_string().contains(text), "{err}");
        }
        let err = parse("vsock:3:4294967296").unwrap_err();
        assert!(
            matches!(err, AddrParseError::BadPort { max: u32::MAX, .. }),
            "{err}"
        );
    }

    #[test]
    fn missing_parts() {
        let cases = [
            ("unix:", "path"),
            ("tcp:host", "port"),
            ("tcp:host:", "port"),
            ("tcp::564", "host"),
            ("tcp:[::1]", "port"),
            ("vsock:", "CID"),
            ("vsock:3", "port"),
            ("vsock::5", "CID"),
            ("vsock:3:", "port"),
            ("fd:", "file descriptor number"),
        ];
        for (text, want) in cases {
            match parse(text) {
                Err(AddrParseError::MissingPart { part, .. }) => assert_eq!(part, want, "{text}"),
                other => panic!("{text}: expected missing {want}, got {other:?}"),
            }
        }
        let msg = parse("tcp:host").unwrap_err().to_string();
        assert_eq!(
            msg,
            "address `tcp:host` is missing the port; expected `tcp:HOST:PORT`"
        );
    }

    #[test]
    fn bad_values() {
        assert!(matches!(
            parse("vsock:guest:5"),
            Err(AddrParseError::BadCid { .. })
        ));
        assert!(matches!(
            parse("vsock:-1:5"),
            Err(AddrParseError::BadCid { .. })
        ));
        assert!(matches!(parse("fd:-3"), Err(AddrParseError::BadFd { .. })));
        assert!(matches!(parse("fd:3x"), Err(AddrParseError::BadFd { .. })));
        assert!(matches!(
            parse("fd:99999999999"),
            Err(AddrParseError::BadFd { .. })
        ));
        assert!(matches!(
            parse("tcp:::1:564"),
            Err(AddrParseError::BadIpv6 { .. })
        ));
        assert!(matches!(
            parse("tcp:[nope]:564"),
            Err(AddrParseError::BadIpv6 { .. })
        ));
        assert!(matches!(
            parse("tcp:[::1:564"),
            Err(AddrParseError::BadIpv6 { .. })
        ));
        let long = format!("unix:/{}", "a".repeat(UNIX_PATH_MAX));
        assert!(matches!(
            parse(&long),
            Err(AddrParseError::PathTooLong { len: 109, .. })
        ));
    }

    #[test]
    fn unknown_scheme_is_helpful() {
        let err = parse("udp:1.2.3.4:5").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown transport scheme `udp` in `udp:1.2.3.4:5`; \
             expected unix:PATH, tcp:HOST:PORT, vsock:CID:PORT, fd:N or vhost-user-fs:PATH"
        );
        let err = parse("localhost:564").unwrap_err();
        assert!(
            matches!(err, AddrParseError::UnknownScheme { ref scheme, .. } if scheme == "localhost")
        );
        assert!(
            err.to_string()
                .contains("did you mean `tcp:localhost:564`?"),
            "{err}"
        );
        let err = parse("[::1]:564").unwrap_err();
        assert!(matches!(err, AddrParseError::MissingScheme { .. }));
        assert!(
            err.to_string().contains("did you mean `tcp:[::1]:564`?"),
            "{err}"
        );
    }

    #[test]
    fn missing_scheme_is_helpful() {
        let err = parse("/run/crossfs.sock").unwrap_err();
        assert!(matches!(err, AddrParseError::MissingScheme { .. }));
        assert!(
            err.to_string()
                .contains("did you mean `unix:/run/crossfs.sock`?"),
            "{err}"
        );
        let err = parse("").unwrap_err();
        assert!(err.to_string().contains("expected unix:PATH"), "{err}");
    }
}
