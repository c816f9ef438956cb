//! Shared-secret authentication: Tauth, a Twrite of the token, Tattach with the afid.

mod common;

use common::{errno::*, Client, Harness, ROOT};
use crossfs_server::AuthToken;
use crossfs_wire::*;

const EACCES: i32 = 13;
const TOKEN: &[u8] = b"correct horse battery staple";

fn with_token() -> Harness {
    Harness::with(|c| c.auth_token = Some(AuthToken::new(TOKEN.to_vec()).unwrap()))
}

fn negotiated(h: &Harness) -> Client {
    let mut c = h.connect_raw();
    c.version(1 << 20, b"9P2000.L");
    c
}

fn attach(fid: Fid, afid: Fid) -> Tattach {
    Tattach {
        fid,
        afid,
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: !0,
    }
}

fn tauth(afid: Fid) -> Tauth {
    Tauth {
        afid,
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: !0,
    }
}

#[test]
fn attach_needs_the_token_written_to_an_auth_fid() {
    let h = with_token();
    std::fs::write(h.path("f"), b"x").unwrap();
    let mut c = negotiated(&h);
    // No afid at all.
    assert_eq!(c.err(attach(ROOT, NOFID)), EACCES);
    // An afid that was never made.
    assert_eq!(c.err(attach(ROOT, Fid(9))), EACCES);
    // A wrong token, a prefix of the right one, and the right one with more after it.
    for (afid, wrong) in [
        (Fid(5), &b"wrong"[..]),
        (Fid(6), &TOKEN[..TOKEN.len() - 1]),
        (Fid(7), b"correct horse battery staple!"),
    ] {
        match c.ok(tauth(afid)) {
            Rmessage::Auth(a) => assert_eq!(a.aqid.ty, QID_TYPE_AUTH),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.write(afid, 0, wrong).unwrap() as usize, wrong.len());
        assert_eq!(c.err(attach(ROOT, afid)), EACCES, "{wrong:?}");
    }
    assert_eq!(c.getattr(ROOT).unwrap_err(), EBADF);
    // The token, in two writes.
    c.ok(tauth(Fid(8)));
    c.write(Fid(8), 0, &TOKEN[..5]).unwrap();
    c.write(Fid(8), 5, &TOKEN[5..]).unwrap();
    assert_eq!(c.read(Fid(8), 0, 100).unwrap(), b"");
    c.ok(attach(ROOT, Fid(8)));
    c.walk(ROOT, Fid(1), &["f"]).unwrap();
    // An auth fid is no file, and a file fid is no auth fid.
    assert_eq!(c.walk(Fid(8), Fid(2), &["f"]).unwrap_err(), EBADF);
    assert_eq!(c.err(attach(Fid(3), Fid(1))), EACCES);
    c.clunk(Fid(8)).unwrap();
    c.close();
}

#[test]
fn auth_fids_belong_to_their_connection_and_tokens_are_bounded() {
    let h = with_token();
    let mut a = negotiated(&h);
    a.ok(tauth(Fid(5)));
    a.write(Fid(5), 0, TOKEN).unwrap();
    let mut b = negotiated(&h);
    assert_eq!(b.err(attach(ROOT, Fid(5))), EACCES);
    // No token is longer than 4096 bytes.
    b.ok(tauth(Fid(5)));
    assert_eq!(b.write(Fid(5), 0, &[b'x'; 4097]).unwrap_err(), EINVAL);
    a.ok(attach(ROOT, Fid(5)));
    a.close();
    b.close();
}

#[test]
fn without_a_token_tauth_is_not_supported() {
    let h = Harness::new();
    let mut c = negotiated(&h);
    assert_eq!(c.err(tauth(Fid(5))), EOPNOTSUPP);
    assert_eq!(c.err(attach(ROOT, Fid(5))), EINVAL);
    c.ok(attach(ROOT, NOFID));
    c.close();
    assert!(AuthToken::new(Vec::new()).is_err());
    assert!(AuthToken::new(vec![1; 4097]).is_err());
    assert_eq!(
        format!("{:?}", AuthToken::new(TOKEN.to_vec()).unwrap()),
        "AuthToken(28 bytes)"
    );
}
