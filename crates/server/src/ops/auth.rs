//! Shared-secret authentication: Tauth makes an auth fid, the client writes the token to it,
//! and Tattach names it as `afid`. Only when [`crate::ServerConfig::auth_token`] is set;
//! otherwise Tauth is `EOPNOTSUPP` and any `afid` but NOFID is refused.
//!
//! The token proves only that the client knows it: 9P2000.L has no encryption, so on a
//! network anyone who can read the traffic learns it. Linux's own v9fs never sends Tauth, so
//! a server with a token can only be mounted by clients that do (`crossfs mount
//! --token-file`).

use std::sync::Mutex;

use crossfs_wire::{Fid, Qid, Rauth, Rmessage, Tauth, NOFID, QID_TYPE_AUTH};
use rustix::io::Errno;

use crate::error::{OpError, OpResult};
use crate::fid::{lock, FidState};
use crate::session::Conn;

/// Most bytes an auth fid takes: a token is a short secret, not a file.
pub(crate) const MAX_TOKEN: usize = 4096;

/// An auth fid: what the client has written to it so far.
pub(crate) struct AuthFid {
    pub written: Mutex<Vec<u8>>,
}

/// Tauth: binds `afid` to an empty auth fid.
pub(crate) fn auth(conn: &Conn, m: Tauth) -> OpResult<Rmessage> {
    if conn.server.config.auth_token.is_none() {
        return Err(OpError::NotSupported);
    }
    conn.fids.insert_new(
        m.afid,
        FidState::Auth(AuthFid {
            written: Mutex::new(Vec::new()),
        }),
    )?;
    Ok(Rmessage::Auth(Rauth {
        aqid: Qid {
            ty: QID_TYPE_AUTH,
            version: 0,
            path: 0,
        },
    }))
}

/// Twrite to an auth fid: appends to the token written so far (`offset` is ignored, as a
/// stream's is).
pub(crate) fn write(a: &AuthFid, data: &[u8]) -> OpResult<usize> {
    let mut written = lock(&a.written);
    if written.len() + data.len() > MAX_TOKEN {
        return Err(OpError::Invalid("token too long"));
    }
    written.extend_from_slice(data);
    Ok(data.len())
}

/// The check Tattach makes: with a token configured, `afid` must be an auth fid holding
/// exactly the token (`EACCES` otherwise); without one, `afid` must be NOFID.
pub(crate) fn check_attach(conn: &Conn, afid: Fid) -> OpResult<()> {
    let Some(token) = &conn.server.config.auth_token else {
        if afid != NOFID {
            // Tauth is never granted, so no afid can be valid.
            return Err(OpError::Invalid("authentication is not supported"));
        }
        return Ok(());
    };
    let granted = afid != NOFID
        && match conn.fids.get(afid) {
            Ok(state) => match &*state {
                FidState::Auth(a) => token.matches(&lock(&a.written)),
                _ => false,
            },
            Err(_) => false,
        };
    if !granted {
        tracing::warn!(
            id = conn.stats.id,
            peer = %conn.stats.peer,
            "attach refused: no valid token"
        );
        return Err(Errno::ACCESS.into());
    }
    Ok(())
}
