//! Transport and attach failures as the user reads them: the address once, what went
//! wrong, and the flag or the step that fixes it.
//!
//! `crossfs-transport`'s errors name the address and the system call for any caller; the
//! binary adds its own context ("connecting to ADDR"), and the two together would say the
//! address twice and the OS error twice (once in the message, once as its source). These
//! functions build the whole message instead, from the error's parts.

use std::io;

use crossfs_transport::{Addr, TransportError};

/// What to check when nothing answers at an address.
const NO_SERVER_HINT: &str = "is `crossfs serve` running?";

/// The message for a failed connect to `addr`.
pub fn connect_failed(addr: &Addr, err: TransportError) -> anyhow::Error {
    match os_error(&err) {
        Some(e) => {
            let hint = match e.kind() {
                io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => {
                    format!(" ({NO_SERVER_HINT})")
                }
                _ => String::new(),
            };
            anyhow::anyhow!("connecting to {addr}: {}{hint}", plain(&e))
        }
        // Its own message names the address and says what is wrong.
        None => anyhow::Error::new(err),
    }
}

/// The message for a failed `--listen ADDR`.
pub fn listen_failed(addr: &Addr, err: TransportError) -> anyhow::Error {
    match &err {
        TransportError::RemoteTcpRefused { ip, .. } => anyhow::anyhow!(
            "refusing to listen on {addr}: {ip} is not a loopback address, and 9P2000.L has \
             no encryption; to serve other machines anyway, add --allow-remote \
             --token-file PATH (clients then need the token)"
        ),
        TransportError::AddrInUse { .. } => address_in_use(addr),
        _ => match os_error(&err) {
            Some(e) if e.kind() == io::ErrorKind::AddrInUse => address_in_use(addr),
            Some(e) => anyhow::anyhow!("listening on {addr}: {}", plain(&e)),
            None => anyhow::Error::new(err),
        },
    }
}

fn address_in_use(addr: &Addr) -> anyhow::Error {
    anyhow::anyhow!(
        "listening on {addr}: the address is in use (another `crossfs serve` or another \
         program listens there); stop it or choose another --listen"
    )
}

/// The message for a failed Tattach to `addr`, `with_token` if the command was given
/// `--token-file`: a refusal (EACCES) is most often a missing or wrong token.
pub fn attach_failed(
    addr: &Addr,
    err: crossfs_client::ClientError,
    with_token: bool,
) -> anyhow::Error {
    let refused =
        err == crossfs_client::ClientError::Errno(rustix::io::Errno::ACCESS.raw_os_error());
    match (refused, with_token) {
        (true, false) => anyhow::anyhow!(
            "attaching to {addr}: the server refused (permission denied); if it was started \
             with --token-file, give the same secret with --token-file PATH"
        ),
        (true, true) => anyhow::anyhow!(
            "attaching to {addr}: the server refused the token (permission denied); \
             --token-file must hold the secret of the server's --token-file"
        ),
        (false, _) => anyhow::Error::new(err).context(format!("attaching to {addr}")),
    }
}

/// The operating-system error behind `err`, if a system call is what failed.
fn os_error(err: &TransportError) -> Option<io::Error> {
    match err {
        TransportError::Sys { .. } => err.raw_os_error().map(io::Error::from_raw_os_error),
        _ => None,
    }
}

/// An OS error's text without Rust's " (os error N)" suffix: the words are what the user
/// acts on.
fn plain(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connect_names_the_address_once_and_hints_at_the_server() {
        let addr: Addr = "tcp:127.0.0.1:9".parse().unwrap();
        let err = TransportError::Sys {
            addr: addr.to_string(),
            op: "connect",
            // ECONNREFUSED on Linux.
            source: io::Error::from_raw_os_error(111),
        };
        assert_eq!(
            format!("{:#}", connect_failed(&addr, err)),
            "connecting to tcp:127.0.0.1:9: Connection refused (is `crossfs serve` running?)"
        );
    }
}
