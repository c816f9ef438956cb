//! `Client::attach_with_token` against crossfs's server with and without a token.

use std::os::unix::net::UnixStream;
use std::sync::Arc;

use crossfs_client::{Client, ClientConfig, ClientError};
use crossfs_server::{AuthToken, Server, ServerConfig};

fn client_of(token: Option<&[u8]>) -> (tempfile::TempDir, Arc<Client>) {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("file"), b"x").unwrap();
    let server = Server::new(ServerConfig {
        export: export.path().to_path_buf(),
        auth_token: token.map(|t| AuthToken::new(t.to_vec()).unwrap()),
        ..Default::default()
    })
    .unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let w = theirs.try_clone().unwrap();
    std::thread::spawn(move || server.serve_connection(theirs, w, "test".into()));
    let client =
        Client::connect(ours.try_clone().unwrap(), ours, &ClientConfig::default()).unwrap();
    (export, client)
}

#[test]
fn the_right_token_attaches_and_nothing_else_does() {
    let (_export, c) = client_of(Some(b"s3cret"));
    assert!(matches!(
        c.attach(b"u", b"", !0),
        Err(ClientError::Errno(libc::EACCES))
    ));
    assert!(matches!(
        c.attach_with_token(b"u", b"", !0, b"s3cre"),
        Err(ClientError::Errno(libc::EACCES))
    ));
    let (root, _) = c.attach_with_token(b"u", b"", !0, b"s3cret").unwrap();
    let fid = c.alloc_fid();
    assert_eq!(c.walk(root, fid, &[b"file"]).unwrap().len(), 1);
}

#[test]
fn a_server_without_a_token_says_so() {
    let (_export, c) = client_of(None);
    assert!(matches!(
        c.attach_with_token(b"u", b"", !0, b"s3cret"),
        Err(ClientError::Errno(libc::EOPNOTSUPP))
    ));
    c.attach(b"u", b"", !0).unwrap();
}
