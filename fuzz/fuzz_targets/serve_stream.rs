//! A server's request handling on arbitrary bytes: the input is one connection's whole
//! input stream, served by a fresh `crossfs_server::Server` on a fresh temporary export, with
//! the replies thrown away. The server must return (the stream ends, so every request is
//! answered or abandoned) without panicking; libFuzzer's `-timeout` catches a hang.
//!
//! A panic inside a request handler is caught by the server and answered EIO; the fuzzer
//! still sees it, because libfuzzer-sys installs a panic hook that aborts on any panic, on
//! any thread, caught or not.
//!
//! One change to the input: a Tmknod of a fifo makes a regular file instead. Opening a fifo
//! waits for its other end (a documented limit of the server: it blocks one worker), and no
//! input can provide that other end, so every such input would be reported as a hang.
#![no_main]

use std::io::Cursor;

use crossfs_server::{Server, ServerConfig};
use libfuzzer_sys::fuzz_target;

/// Tmknod's type number; its body is dfid[4] name[s] mode[4] major[4] minor[4] gid[4].
const TMKNOD: u8 = 18;
const S_IFMT: u32 = 0o170000;
const S_IFIFO: u32 = 0o010000;
const S_IFREG: u32 = 0o100000;

/// Rewrites the fifo type of every complete Tmknod frame to a regular file, in place.
fn no_fifos(data: &mut [u8]) {
    let mut at = 0;
    while at + 7 <= data.len() {
        let size = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        if size < 7 || at + size > data.len() {
            return;
        }
        let frame = &mut data[at..at + size];
        if frame[4] == TMKNOD && frame.len() >= 13 {
            let name_len = u16::from_le_bytes([frame[11], frame[12]]) as usize;
            let mode_at = 13 + name_len;
            if let Some(mode) = frame.get_mut(mode_at..mode_at + 4) {
                let m = u32::from_le_bytes(mode[..].try_into().unwrap());
                if m & S_IFMT == S_IFIFO {
                    mode.copy_from_slice(&((m & !S_IFMT) | S_IFREG).to_le_bytes());
                }
            }
        }
        at += size;
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = data.to_vec();
    no_fifos(&mut input);
    // tmpfs where there is one: fsync is free there, and inputs sync a lot.
    let export = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    std::fs::create_dir(export.path().join("d")).unwrap();
    std::fs::write(export.path().join("d/f"), b"content").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", export.path().join("l")).unwrap();
    let server = Server::new(ServerConfig {
        export: export.path().to_path_buf(),
        workers_per_connection: 2,
        fd_budget: Some(512),
        ..Default::default()
    })
    .unwrap();
    server.serve_connection(Cursor::new(input), std::io::sink(), "fuzz".into());
});
