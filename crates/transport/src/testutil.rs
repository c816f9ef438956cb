//! Helpers shared by the unit tests.

use std::io::{Read, Write};

use crate::Stream;

/// Sends a message each way between two ends of a connection.
pub(crate) fn echo(client: &mut Stream, server: &mut Stream) {
    client.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    server.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    server.write_all(b"pong").unwrap();
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong");
}

/// The OS error number of a transport error, for assertions.
pub(crate) fn errno(err: &crate::TransportError) -> i32 {
    err.raw_os_error()
        .unwrap_or_else(|| panic!("expected an OS error, got: {err}"))
}
