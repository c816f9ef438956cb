//! Typed blocking helpers: thin wrappers over [`Client::call`] that unpack the reply.

use crossfs_wire::{
    getattr, DirEntry, DirEntryAttr, Fid, Qid, Rgetattr, Rmessage, Tattach, Tauth, Tclunk,
    Tgetattr, Tlopen, Treaddir, Treaddirattr, Treadlink, Twalk, Twalkreaddirattr,
    MAX_WALK_ELEMENTS, NOFID,
};

use crate::client::unexpected;
use crate::{Client, ClientError};

impl Client {
    /// Attaches a new fid to the root of export `aname` as user `uname` / `n_uname`, without
    /// authentication.
    ///
    /// # Errors
    /// As [`Client::call`]; the fid is returned to the pool on failure.
    pub fn attach(
        &self,
        uname: &[u8],
        aname: &[u8],
        n_uname: u32,
    ) -> Result<(Fid, Qid), ClientError> {
        self.attach_new(uname, aname, n_uname, None)
    }

    /// Attaches as [`Client::attach`] does, proving knowledge of a shared secret first, as
    /// `crossfs serve --token-file` asks: Tauth, a Twrite of `token` to the auth fid, then
    /// Tattach naming it. The auth fid is clunked afterwards, whatever the outcome.
    ///
    /// # Errors
    /// As [`Client::call`]; a wrong token is [`ClientError::Errno`] `EACCES` from Tattach,
    /// and a server without authentication answers Tauth with `EOPNOTSUPP`.
    pub fn attach_with_token(
        &self,
        uname: &[u8],
        aname: &[u8],
        n_uname: u32,
        token: &[u8],
    ) -> Result<(Fid, Qid), ClientError> {
        self.attach_new(uname, aname, n_uname, Some(token))
    }

    fn attach_new(
        &self,
        uname: &[u8],
        aname: &[u8],
        n_uname: u32,
        token: Option<&[u8]>,
    ) -> Result<(Fid, Qid), ClientError> {
        let fid = self.alloc_fid();
        match self.attach_fid(fid, uname, aname, n_uname, token) {
            Ok(qid) => Ok((fid, qid)),
            // The server's view of the fid is unknown: keep it out of the pool.
            Err(e @ ClientError::Protocol(_)) => Err(e),
            Err(e) => {
                self.free_fid(fid);
                Err(e)
            }
        }
    }

    /// Attaches `fid`, a number the caller already holds, to the export root (with the
    /// token first, if given, as [`Client::attach_with_token`] does). A restore hook (see
    /// [`Client::on_reconnect`]) binds the root fid it held again this way. The fid stays
    /// the caller's whatever the outcome.
    ///
    /// # Errors
    /// As [`Client::attach_with_token`].
    pub fn attach_fid(
        &self,
        fid: Fid,
        uname: &[u8],
        aname: &[u8],
        n_uname: u32,
        token: Option<&[u8]>,
    ) -> Result<Qid, ClientError> {
        let Some(token) = token else {
            return self.attach_afid(NOFID, fid, uname, aname, n_uname);
        };
        let afid = self.alloc_fid();
        let msg = Tauth {
            afid,
            uname: uname.to_vec(),
            aname: aname.to_vec(),
            n_uname,
        };
        match self.call(msg.into()) {
            Ok(Rmessage::Auth(_)) => {}
            Ok(other) => return Err(unexpected(other)),
            Err(e) => {
                self.free_fid(afid);
                return Err(e);
            }
        }
        let attached = self
            .write(afid, 0, token)
            .and_then(|_| self.attach_afid(afid, fid, uname, aname, n_uname));
        // Clunked even when a step failed: the server holds the fid until then.
        let clunked = self.clunk(afid);
        let root = attached?;
        clunked?;
        Ok(root)
    }

    fn attach_afid(
        &self,
        afid: Fid,
        fid: Fid,
        uname: &[u8],
        aname: &[u8],
        n_uname: u32,
    ) -> Result<Qid, ClientError> {
        let msg = Tattach {
            fid,
            afid,
            uname: uname.to_vec(),
            aname: aname.to_vec(),
            n_uname,
        };
        match self.call(msg.into())? {
            Rmessage::Attach(r) => Ok(r.qid),
            other => Err(unexpected(other)),
        }
    }

    /// Clunks `fid` but leaves the number with the caller, who still owns it: for a restore
    /// hook that bound a fid to the wrong file (see [`Client::on_reconnect`]).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn unbind_fid(&self, fid: Fid) -> Result<(), ClientError> {
        self.call_keep_fid(Tclunk { fid }.into()).map(drop)
    }

    /// Walks from `fid` through `names`, binding the result to `newfid`. Returns one qid per
    /// name walked.
    ///
    /// `newfid` may equal `fid` for at most 16 names; but some servers (diod) move `fid` even
    /// when such a walk stops early, so prefer a fresh `newfid` for multi-name walks.
    ///
    /// More than 16 names are sent as several Twalks. A walk that stops early returns `Ok`
    /// with fewer qids than names, and `newfid` is then not bound (the caller still owns the
    /// number: reuse it or [`Client::free_fid`] it). A later Twalk of a long walk that fails
    /// at its first name counts as stopping early.
    ///
    /// # Errors
    /// [`ClientError::Errno`] when the first name fails; EINVAL for `fid == newfid` with
    /// more than 16 names (the fid would be left half-walked on failure); otherwise as
    /// [`Client::call`].
    pub fn walk(&self, fid: Fid, newfid: Fid, names: &[&[u8]]) -> Result<Vec<Qid>, ClientError> {
        if names.len() <= MAX_WALK_ELEMENTS {
            let qids = self.walk_once(fid, newfid, names)?;
            if qids.len() < names.len() && fid != newfid {
                // The protocol says a partial walk leaves newfid unbound, but diod binds it to
                // the last name it reached (np_walk), so make sure, as Linux does (it clunks
                // newfid after any short walk). Only multi-name walks can stop partway; a
                // single-name lookup that fails gets Rlerror and costs nothing extra.
                self.unbind(newfid);
            }
            return Ok(qids);
        }
        if fid == newfid {
            return Err(ClientError::Errno(libc::EINVAL));
        }
        let mut qids = Vec::with_capacity(names.len());
        let mut from = fid;
        for (i, chunk) in names.chunks(MAX_WALK_ELEMENTS).enumerate() {
            let got = match self.walk_once(from, newfid, chunk) {
                Ok(got) => got,
                // A server answers Rlerror when the first name of a Twalk fails; past the
                // first Twalk, that is a walk stopping early.
                Err(ClientError::Errno(_)) if i > 0 => Vec::new(),
                Err(e) => {
                    if i > 0 {
                        self.unbind(newfid);
                    }
                    return Err(e);
                }
            };
            let complete = got.len() == chunk.len();
            qids.extend(got);
            if !complete {
                // Earlier Twalks bound newfid to an intermediate directory; a short first
                // Twalk may have too (see above).
                self.unbind(newfid);
                return Ok(qids);
            }
            from = newfid;
        }
        Ok(qids)
    }

    fn walk_once(&self, fid: Fid, newfid: Fid, names: &[&[u8]]) -> Result<Vec<Qid>, ClientError> {
        let msg = Twalk {
            fid,
            newfid,
            wnames: names.iter().map(|n| n.to_vec()).collect(),
        };
        match self.call(msg.into())? {
            Rmessage::Walk(r) if r.wqids.len() <= names.len() => Ok(r.wqids),
            Rmessage::Walk(r) => Err(ClientError::Protocol(format!(
                "Rwalk with {} qids for {} names",
                r.wqids.len(),
                names.len()
            ))),
            other => Err(unexpected(other)),
        }
    }

    /// Clunks `fid` on the server but keeps the number out of the pool, for a caller that
    /// still owns it. Failures are ignored: a dead connection holds no fids.
    fn unbind(&self, fid: Fid) {
        if let Err(e) = self.call_keep_fid(Tclunk { fid }.into()) {
            tracing::debug!(fid = fid.0, error = %e, "clunk after a partial walk failed");
        }
    }

    /// Clunks `fid` and waits for the reply. The fid returns to the pool once answered, even
    /// with an error (the server forgets it either way).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn clunk(&self, fid: Fid) -> Result<(), ClientError> {
        match self.call(Tclunk { fid }.into())? {
            Rmessage::Clunk(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Clunks `fid` without waiting (FUSE forget and release). The fid returns to the pool
    /// when the reply arrives; a failure is only logged.
    pub fn clunk_async(&self, fid: Fid) {
        self.call_async(
            Tclunk { fid }.into(),
            Box::new(move |reply| {
                if let Err(e) = reply {
                    tracing::debug!(fid = fid.0, error = %e, "clunk failed");
                }
            }),
        );
    }

    /// The attributes of `fid` selected by `mask` (bits of `crossfs_wire::getattr`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn getattr(&self, fid: Fid, mask: u64) -> Result<Rgetattr, ClientError> {
        let msg = Tgetattr {
            fid,
            request_mask: mask,
        };
        match self.call(msg.into())? {
            Rmessage::Getattr(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Opens `fid` with `flags` (`crossfs_wire::open_flags`); returns its qid and iounit.
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn lopen(&self, fid: Fid, flags: u32) -> Result<(Qid, u32), ClientError> {
        match self.call(Tlopen { fid, flags }.into())? {
            Rmessage::Lopen(r) => Ok((r.qid, r.iounit)),
            other => Err(unexpected(other)),
        }
    }

    /// Directory entries of the open directory `fid` from cookie `offset` (0 to start), in a
    /// reply of at most `count` bytes (at most [`Client::max_io`]). An empty result means
    /// the end of the directory.
    ///
    /// # Errors
    /// As [`Client::call`]; [`ClientError::Protocol`] for a payload that does not decode.
    pub fn readdir(&self, fid: Fid, offset: u64, count: u32) -> Result<Vec<DirEntry>, ClientError> {
        let msg = Treaddir { fid, offset, count };
        match self.call(msg.into())? {
            Rmessage::Readdir(r) => DirEntry::iter(&r.data.0)
                .collect::<Result<_, _>>()
                .map_err(|e| ClientError::Protocol(format!("Rreaddir: {e}"))),
            other => Err(unexpected(other)),
        }
    }

    /// Directory entries of `fid` (open or not) from cookie `offset`, each with its file's
    /// attributes: the crossfs extension's Treaddirattr (see [`Client::has_extensions`]).
    /// "." and ".." come with attributes whose `valid` is 0 (none); an empty list is the end.
    ///
    /// # Errors
    /// As [`Client::call`]; `EOPNOTSUPP` from a server without the extension.
    pub fn readdirattr(
        &self,
        fid: Fid,
        offset: u64,
        count: u32,
    ) -> Result<Vec<DirEntryAttr>, ClientError> {
        let msg = Treaddirattr {
            fid,
            offset,
            count,
            request_mask: getattr::BASIC,
        };
        match self.call(msg.into())? {
            Rmessage::Readdirattr(r) => entries_with_attrs(&r.data.0, "Rreaddirattr"),
            other => Err(unexpected(other)),
        }
    }

    /// [`Client::readdirattr`] of the directory reached by walking `names` from `fid` to
    /// `newfid`, in one round trip (Twalkreaddirattr): the qids walked, and the entries.
    /// `newfid` is bound only if both steps succeed.
    ///
    /// # Errors
    /// As [`Client::call`]; `EOPNOTSUPP` from a server without the message.
    pub fn walkreaddirattr(
        &self,
        (fid, newfid): (Fid, Fid),
        names: Vec<Vec<u8>>,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<Qid>, Vec<DirEntryAttr>), ClientError> {
        let msg = Twalkreaddirattr {
            fid,
            newfid,
            wnames: names,
            offset,
            count,
            request_mask: getattr::BASIC,
        };
        match self.call(msg.into())? {
            Rmessage::Walkreaddirattr(r) => {
                Ok((r.wqids, entries_with_attrs(&r.data.0, "Rwalkreaddirattr")?))
            }
            other => Err(unexpected(other)),
        }
    }

    /// The target of the symbolic link `fid`.
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn readlink(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        match self.call(Treadlink { fid }.into())? {
            Rmessage::Readlink(r) => Ok(r.target),
            other => Err(unexpected(other)),
        }
    }
}

fn entries_with_attrs(data: &[u8], reply: &str) -> Result<Vec<DirEntryAttr>, ClientError> {
    DirEntryAttr::iter(data)
        .collect::<Result<_, _>>()
        .map_err(|e| ClientError::Protocol(format!("{reply}: {e}")))
}
