//! Fids owned by the mount, clunked when their last user is done.

use std::fmt;
use std::sync::Arc;

use crossfs_client::{Client, ClientError};
use crossfs_wire::{Fid, Tclunk, Tmessage};

/// A bound fid. Inodes and open handles hold it in an `Arc`; every request in flight on it
/// holds a clone, so the Tclunk is sent only after the last reply that needs it, whichever
/// thread that lands on. Clunking is asynchronous, so dropping is safe on the client's
/// reader thread too.
pub(crate) struct FidRef {
    client: Arc<Client>,
    fid: Fid,
    /// Already clunked by [`FidRef::clunk_now`].
    clunked: bool,
}

impl FidRef {
    /// Takes ownership of `fid`, which the server has bound.
    pub(crate) fn new(client: &Arc<Client>, fid: Fid) -> Arc<FidRef> {
        Arc::new(FidRef {
            client: client.clone(),
            fid,
            clunked: false,
        })
    }

    /// For a fid about to be consumed by Tremove (which clunks it on the server whatever
    /// the outcome): marks it so that no Tclunk follows. The caller must hold the only
    /// reference.
    pub(crate) fn forget_clunked(self: Arc<Self>) {
        if let Ok(mut me) = Arc::try_unwrap(self) {
            me.clunked = true;
        }
    }

    /// Clunks now and reports the server's answer, for fids whose clunk carries a result
    /// (an xattr written through Txattrcreate is set by the clunk). If someone else still
    /// holds the fid, the last holder clunks it as usual and this returns Ok.
    pub(crate) fn clunk_now(self: Arc<Self>) -> Result<(), ClientError> {
        match Arc::try_unwrap(self) {
            Ok(mut me) => {
                me.clunked = true;
                me.client
                    .call(Tmessage::Clunk(Tclunk { fid: me.fid }))
                    .map(|_| ())
            }
            Err(_) => Ok(()),
        }
    }

    pub(crate) fn fid(&self) -> Fid {
        self.fid
    }
}

impl Drop for FidRef {
    fn drop(&mut self) {
        if !self.clunked && self.client.is_connected() {
            self.client
                .call_async(Tmessage::Clunk(Tclunk { fid: self.fid }), Box::new(|_| {}));
        }
    }
}

impl fmt::Debug for FidRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fid {}", self.fid.0)
    }
}
