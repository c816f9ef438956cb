//! The 9P calls the mount makes, typed, and pipelined where requests are independent.
//!
//! Built on [`Client::call`] / [`Client::call_async`] only. Nothing here runs on the
//! client's reader thread except completions, which never block.

use std::sync::{mpsc, Arc};

use crossfs_client::{Client, ClientError};
use crossfs_wire::{getattr, Fid, Qid, Rgetattr, Rmessage, Tgetattr, Tmessage, Twalk};

use crate::fid::FidRef;

/// Extracts reply variant `$v` from a call's result; any other reply is a protocol error.
macro_rules! expect_reply {
    ($result:expr, $v:ident) => {
        match $result {
            Ok(::crossfs_wire::Rmessage::$v(m)) => Ok(m),
            Ok(other) => Err($crate::remote::unexpected(other)),
            Err(e) => Err(e),
        }
    };
}
pub(crate) use expect_reply;

pub(crate) fn unexpected(m: Rmessage) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {}", m.name()))
}

/// The attributes every stat needs.
pub(crate) const ATTR_MASK: u64 = getattr::BASIC;

/// Sends every message at once and waits for all replies, in order. Independent requests
/// cost one round trip together instead of one each.
pub(crate) fn call_all(client: &Client, msgs: Vec<Tmessage>) -> Vec<Result<Rmessage, ClientError>> {
    let n = msgs.len();
    if n == 1 {
        return msgs.into_iter().map(|m| client.call(m)).collect();
    }
    let (tx, rx) = mpsc::channel();
    for (i, m) in msgs.into_iter().enumerate() {
        let tx = tx.clone();
        client.call_async(
            m,
            Box::new(move |r| {
                let _ = tx.send((i, r));
            }),
        );
    }
    drop(tx);
    let mut out: Vec<Option<Result<Rmessage, ClientError>>> = (0..n).map(|_| None).collect();
    // Ends when every completion has run (each runs exactly once and drops its sender).
    for (i, r) in rx {
        out[i] = Some(r);
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(ClientError::Disconnected("reply lost".into()))))
        .collect()
}

/// The outcome of one Twalk to `newfid`: the fid is bound only if every name was walked.
fn walked(
    client: &Arc<Client>,
    newfid: Fid,
    names: usize,
    r: Result<Rmessage, ClientError>,
) -> Result<(Arc<FidRef>, Vec<Qid>), ClientError> {
    match r {
        Ok(Rmessage::Walk(w)) if w.wqids.len() == names => {
            Ok((FidRef::new(client, newfid), w.wqids))
        }
        Ok(Rmessage::Walk(_)) => {
            // A partial walk binds nothing: the name is missing (as Linux v9fs reads it).
            client.free_fid(newfid);
            Err(ClientError::Errno(libc::ENOENT))
        }
        // The server's view of the fid is unknown: leave the number unused.
        Ok(other) => Err(unexpected(other)),
        Err(e) => {
            client.free_fid(newfid);
            Err(e)
        }
    }
}

/// A new fid for the same file as `fid` (a walk of no names), to open or to xattr through.
pub(crate) fn clone_fid(client: &Arc<Client>, fid: &FidRef) -> Result<Arc<FidRef>, ClientError> {
    let newfid = client.alloc_fid();
    let r = client.call(Tmessage::Walk(Twalk {
        fid: fid.fid(),
        newfid,
        wnames: Vec::new(),
    }));
    walked(client, newfid, 0, r).map(|(f, _)| f)
}

/// Walks `dir` to each name and fetches each result's attributes: all walks in one round
/// trip, then all getattrs in another.
pub(crate) fn resolve(
    client: &Arc<Client>,
    dir: &FidRef,
    names: &[&[u8]],
) -> Vec<Result<(Arc<FidRef>, Rgetattr), ClientError>> {
    let fids: Vec<Fid> = names.iter().map(|_| client.alloc_fid()).collect();
    let walks = names
        .iter()
        .zip(&fids)
        .map(|(name, &newfid)| {
            Tmessage::Walk(Twalk {
                fid: dir.fid(),
                newfid,
                wnames: vec![name.to_vec()],
            })
        })
        .collect();
    let walked: Vec<_> = call_all(client, walks)
        .into_iter()
        .zip(&fids)
        .map(|(r, &newfid)| walked(client, newfid, 1, r).map(|(f, _)| f))
        .collect();
    let getattrs = walked
        .iter()
        .filter_map(|w| w.as_ref().ok())
        .map(|f| {
            Tmessage::Getattr(Tgetattr {
                fid: f.fid(),
                request_mask: ATTR_MASK,
            })
        })
        .collect();
    let mut attrs = call_all(client, getattrs).into_iter();
    walked
        .into_iter()
        .map(|w| {
            let fid = w?;
            let attr = attrs
                .next()
                .unwrap_or_else(|| Err(ClientError::Protocol("missing Rgetattr".into())));
            Ok((fid, expect_reply!(attr, Getattr)?))
        })
        .collect()
}

/// [`resolve`] for one name.
pub(crate) fn resolve_one(
    client: &Arc<Client>,
    dir: &FidRef,
    name: &[u8],
) -> Result<(Arc<FidRef>, Rgetattr), ClientError> {
    resolve(client, dir, &[name])
        .pop()
        .unwrap_or_else(|| Err(ClientError::Protocol("empty resolve".into())))
}
