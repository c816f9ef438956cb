//! The 9P calls the mount makes, typed, and pipelined where requests are independent.
//!
//! Built on [`Client::call`] / [`Client::call_async`] only. Nothing here runs on the
//! client's reader thread except completions, which never block.

pub(crate) mod support;

use std::sync::Arc;

use crossfs_client::{Client, ClientError};
use crossfs_wire::{
    getattr, Fid, Qid, Rgetattr, Rmessage, Tgetattr, Tmessage, Twalk, Twalkgetattr,
};

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

/// Sends every message at once and waits for all replies, in order (see
/// [`Client::call_all`]).
pub(crate) fn call_all(client: &Client, msgs: Vec<Tmessage>) -> Vec<Result<Rmessage, ClientError>> {
    client.call_all(msgs)
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

fn getattr_msg(fid: Fid) -> Tmessage {
    Tmessage::Getattr(Tgetattr {
        fid,
        request_mask: ATTR_MASK,
    })
}

/// A fid just walked, with the file's attributes if they came with the walk.
type Walked = (Arc<FidRef>, Option<Rgetattr>);

/// A name resolved: a fid for its file, and the file's attributes.
pub(crate) type Resolved = Result<(Arc<FidRef>, Rgetattr), ClientError>;

/// A file a name was last seen to lead to: its node's fid and `qid.path`.
pub(crate) type Expected = Option<(Arc<FidRef>, u64)>;

/// Walks `dir` to each name and fetches each result's attributes.
///
/// A name whose file the mount already knows (`expected`, one per name: a LOOKUP that
/// revalidates a dentry, or an entry listed again) costs one round trip: the Twalk goes
/// with a Tgetattr of the known node's fid, two independent requests, and if the walk finds
/// the same `qid.path` that reply is the file's (the node's fid keeps the file, and so its
/// inode number, alive on servers whose fids hold files; on servers whose fids name paths
/// it names the same path). Otherwise, and for names not known, the getattrs of the fids
/// just walked follow in a second round trip. A Tgetattr is never sent behind the Twalk
/// that binds its fid: 9P does not order a connection's requests, and diod, which runs
/// them concurrently, drops the connection when a request names a fid being created.
pub(crate) fn resolve(
    client: &Arc<Client>,
    dir: &FidRef,
    names: &[&[u8]],
    expected: Vec<Expected>,
) -> Vec<Resolved> {
    if client.has_extensions() {
        return walkgetattr_each(client, dir, names);
    }
    let fids: Vec<Fid> = names.iter().map(|_| client.alloc_fid()).collect();
    let mut msgs = Vec::with_capacity(names.len() * 2);
    for ((name, &newfid), known) in names.iter().zip(&fids).zip(&expected) {
        msgs.push(Tmessage::Walk(Twalk {
            fid: dir.fid(),
            newfid,
            wnames: vec![name.to_vec()],
        }));
        if let Some((fid, _)) = known {
            msgs.push(getattr_msg(fid.fid()));
        }
    }
    let mut replies = call_all(client, msgs).into_iter();
    let mut out: Vec<Result<Walked, ClientError>> = fids
        .iter()
        .zip(expected)
        .map(|(&newfid, known)| {
            let walk = replies.next().unwrap_or_else(lost);
            let attr = known.map(|(fid, path)| {
                let attr = replies.next().unwrap_or_else(lost);
                drop(fid);
                (attr, path)
            });
            let (fid, qids) = walked(client, newfid, 1, walk)?;
            let same = |path: u64| qids.first().is_some_and(|q| q.path == path);
            let attr = match attr {
                Some((Ok(Rmessage::Getattr(a)), path)) if same(path) && a.qid.path == path => {
                    Some(a)
                }
                _ => None,
            };
            Ok((fid, attr))
        })
        .collect();
    // Walks whose attributes are still missing: one more round trip for all of them.
    let retry: Vec<usize> = (0..out.len())
        .filter(|&i| matches!(&out[i], Ok((_, None))))
        .collect();
    if !retry.is_empty() {
        let msgs = retry
            .iter()
            .filter_map(|&i| out[i].as_ref().ok().map(|(f, _)| getattr_msg(f.fid())))
            .collect();
        for (&i, r) in retry.iter().zip(call_all(client, msgs)) {
            out[i] = match std::mem::replace(&mut out[i], Err(lost_error())) {
                Ok((fid, _)) => expect_reply!(r, Getattr).map(|a| (fid, Some(a))),
                Err(e) => Err(e),
            };
        }
    }
    out.into_iter()
        .map(|r| {
            let (fid, attr) = r?;
            Ok((fid, attr.ok_or_else(lost_error)?))
        })
        .collect()
}

/// [`resolve`] with the crossfs extension: one Twalkgetattr per name, all sent at once, so
/// every name costs one round trip whether known or not.
fn walkgetattr_each(client: &Arc<Client>, dir: &FidRef, names: &[&[u8]]) -> Vec<Resolved> {
    let fids: Vec<Fid> = names.iter().map(|_| client.alloc_fid()).collect();
    let msgs = names
        .iter()
        .zip(&fids)
        .map(|(name, &newfid)| {
            Tmessage::Walkgetattr(Twalkgetattr {
                fid: dir.fid(),
                newfid,
                wnames: vec![name.to_vec()],
                request_mask: ATTR_MASK,
            })
        })
        .collect();
    call_all(client, msgs)
        .into_iter()
        .zip(fids)
        .map(|(r, newfid)| match r {
            Ok(Rmessage::Walkgetattr(w)) => Ok((FidRef::new(client, newfid), w.attr)),
            // The server's view of the fid is unknown: leave the number unused.
            Ok(other) => Err(unexpected(other)),
            Err(e) => {
                client.free_fid(newfid);
                Err(e)
            }
        })
        .collect()
}

/// [`resolve`] for names a Treaddir just listed, each with the `qid.path` the listing gave.
///
/// A name whose known node (`expected`) has the listed `qid.path` costs one Tgetattr of the
/// node's fid and no walk: the listing already says where the name leads, and the reply's
/// qid confirms the fid still reaches that file. That is what a repeated listing (`ls -l`,
/// `git status`) is made of, and it saves the walk, its second fid and that fid's clunk.
/// Every other name, and one whose Tgetattr disagrees, is resolved as [`resolve`] does.
pub(crate) fn resolve_listed(
    client: &Arc<Client>,
    dir: &FidRef,
    names: &[&[u8]],
    listed: &[u64],
    expected: Vec<Expected>,
) -> Vec<Resolved> {
    let mut out: Vec<Option<Resolved>> = names.iter().map(|_| None).collect();
    let mut known = Vec::new();
    let mut rest = Vec::new();
    for (i, e) in expected.into_iter().enumerate() {
        match e {
            Some((fid, path)) if listed.get(i) == Some(&path) => known.push((i, fid, path)),
            e => rest.push((i, e)),
        }
    }
    let msgs = known
        .iter()
        .map(|(_, fid, _)| getattr_msg(fid.fid()))
        .collect();
    for ((i, fid, path), r) in known.into_iter().zip(call_all(client, msgs)) {
        match r {
            Ok(Rmessage::Getattr(a)) if a.qid.path == path => out[i] = Some(Ok((fid, a))),
            _ => rest.push((i, None)),
        }
    }
    if !rest.is_empty() {
        let rest_names: Vec<&[u8]> = rest.iter().map(|&(i, _)| names[i]).collect();
        let (idx, rest_expected): (Vec<usize>, Vec<Expected>) = rest.into_iter().unzip();
        for (i, r) in idx
            .into_iter()
            .zip(resolve(client, dir, &rest_names, rest_expected))
        {
            out[i] = Some(r);
        }
    }
    out.into_iter().map(|r| r.unwrap_or_else(lost)).collect()
}

fn lost_error() -> ClientError {
    ClientError::Disconnected("reply lost".into())
}

fn lost<T>() -> Result<T, ClientError> {
    Err(lost_error())
}

/// [`resolve`] for one name.
pub(crate) fn resolve_one(
    client: &Arc<Client>,
    dir: &FidRef,
    name: &[u8],
    expected: Expected,
) -> Result<(Arc<FidRef>, Rgetattr), ClientError> {
    resolve(client, dir, &[name], vec![expected])
        .pop()
        .unwrap_or_else(|| Err(ClientError::Protocol("empty resolve".into())))
}

/// A fid for `name` in `dir`, without its attributes (one Twalk).
pub(crate) fn walk_name(
    client: &Arc<Client>,
    dir: &FidRef,
    name: &[u8],
) -> Result<(Arc<FidRef>, Qid), ClientError> {
    let newfid = client.alloc_fid();
    match client.walk(dir.fid(), newfid, &[name]) {
        Ok(q) if q.len() == 1 => Ok((FidRef::new(client, newfid), q[0])),
        Ok(_) => {
            client.free_fid(newfid);
            Err(ClientError::Errno(libc::ENOENT))
        }
        Err(e) => {
            client.free_fid(newfid);
            Err(e)
        }
    }
}
