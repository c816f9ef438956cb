//! Teaching the kernel early that the mount needs no OPEN (FUSE's no-open mode), so that
//! the files a program creates cost no RELEASE.
//!
//! While opens may go unannounced (see `fs/open.rs`), the mount answers the kernel's
//! first OPEN with ENOSYS, and only then does the kernel stop sending OPEN, and RELEASE
//! at each last close. A CREATE opens its file too, and until the kernel has had that
//! ENOSYS it sends a RELEASE when the created file is closed: a program that only creates
//! files (`tar -x` into a fresh mount, a test suite writing its outputs) pays one more FUSE
//! request per file, each waking a thread of the mount for nothing (the handle a CREATE
//! gives is 0, see `MountState::created`). So after the first CREATE answered while the
//! kernel has not had its ENOSYS, a thread of the mount opens that file once for reading,
//! through the mount point, and closes it: the kernel's OPEN is answered ENOSYS and the
//! RELEASEs stop.
//!
//! What it costs and shows: one open and close per mount, answered in the guest (no
//! message to the server); a watcher in the guest that asks for open and close events of
//! that file sees them. It changes no answer: what a request on the file gets does not
//! depend on whether the kernel sends OPEN and RELEASE.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Opens that may fail (a file gone, or one the mount's user may not read) before the
/// mount stops trying: the kernel then sends RELEASE as before.
const TRIES: u32 = 8;

/// Whether the kernel has learned that the mount needs no OPEN, and whether a thread of
/// the mount is about to teach it.
#[derive(Default)]
pub(crate) struct NoOpens {
    /// An OPEN was answered ENOSYS: the kernel sends no OPEN and no RELEASE any more.
    known_to_kernel: AtomicBool,
    /// A file was handed to the thread that opens it (once per mount, unless that open
    /// could not be made).
    asked: AtomicBool,
    /// Opens that could not be made.
    failed: AtomicU32,
}

impl NoOpens {
    /// The kernel's OPEN was answered ENOSYS.
    pub(crate) fn told(&self) {
        self.known_to_kernel.store(true, Ordering::Relaxed);
    }

    /// A CREATE is answered as an unannounced open: true if a thread of the mount should
    /// now open the file, to teach the kernel (true once).
    pub(crate) fn should_show(&self) -> bool {
        !self.known_to_kernel.load(Ordering::Relaxed)
            && self.failed.load(Ordering::Relaxed) < TRIES
            && !self.asked.swap(true, Ordering::Relaxed)
    }

    /// The open could not be made (the file was gone, or the mount may not read it): the
    /// next CREATE tries again, up to [`TRIES`] failures.
    pub(crate) fn not_shown(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.asked.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_once_until_it_fails_and_never_once_the_kernel_knows() {
        let n = NoOpens::default();
        assert!(n.should_show());
        assert!(!n.should_show());
        n.not_shown();
        assert!(n.should_show());
        n.not_shown();
        n.told();
        assert!(!n.should_show());
    }

    #[test]
    fn gives_up_after_its_tries() {
        let n = NoOpens::default();
        for _ in 0..TRIES {
            assert!(n.should_show());
            n.not_shown();
        }
        assert!(!n.should_show());
    }
}
