//! A directory's entries as the kernel lists them: what a replica hands an open directory
//! and what an open directory's stream holds (`crate::known::handle::DirStream`).

use std::sync::Arc;

use crossfs_wire::{DirEntry, Rgetattr};

/// One listed entry, with the file's attributes when the listing carried them (the
/// crossfs extension's Treaddirattr, or a directory replica).
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub entry: DirEntry,
    pub attr: Option<Arc<Rgetattr>>,
}

/// A replica's entries as a listing, in the server's order with the server's cookies
/// (names, attributes: none for "." and "..", cookies). Cookies are the server's so that
/// the kernel, which keeps listings and asks for what follows a cookie of one, may mix
/// this listing with one read from the server: a position in a replica that changed
/// since would point elsewhere.
pub(crate) fn listing_snapshot(
    listed: impl Iterator<Item = (Vec<u8>, Option<Arc<Rgetattr>>, u64)>,
) -> Arc<[Listed]> {
    listed
        .map(|(name, attr, offset)| Listed {
            entry: DirEntry {
                qid: attr.as_ref().map(|a| a.qid).unwrap_or_default(),
                offset,
                ty: attr
                    .as_ref()
                    .map_or(libc::DT_DIR, |a| ((a.mode & libc::S_IFMT) >> 12) as u8),
                name,
            },
            attr,
        })
        .collect()
}
