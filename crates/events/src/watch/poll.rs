//! The watcher of last resort: watches nothing, so the engine polls the whole export.

use std::io;
use std::os::fd::BorrowedFd;

use super::{Raw, Watcher};
use crate::beneath::Root;
use crate::path::RelPath;
use crate::BackendKind;

/// Polling only.
#[derive(Debug, Default)]
pub(crate) struct Poll;

impl Watcher for Poll {
    fn kind(&self) -> BackendKind {
        BackendKind::Poll
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn arm(&mut self, _root: &Root) -> io::Result<()> {
        Ok(())
    }
    fn disarm(&mut self) {}
    fn read_into(&mut self, _root: &Root, _out: &mut Vec<Raw>) -> io::Result<()> {
        Ok(())
    }
    fn unwatched(&self) -> Vec<RelPath> {
        vec![RelPath::root()]
    }
}
