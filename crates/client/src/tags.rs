//! The tag table: a fixed array of slots indexed by tag, plus a free list.
//!
//! Fixed size on purpose: the number of slots is the number of requests that may be in flight,
//! and a full table is what makes callers wait (back-pressure). Looking a reply's tag up is an
//! index, not a search.

use crossfs_wire::{Tag, NOTAG};

/// Slots for in-flight requests, each holding whatever the caller needs to finish one (`P`).
pub(crate) struct TagTable<P> {
    slots: Vec<Option<P>>,
    /// Free tags; popped from the end, so tag 0 is handed out first.
    free: Vec<u16>,
}

impl<P> TagTable<P> {
    /// A table of `size` slots (at least 1). NOTAG (0xffff) is never handed out, so at most
    /// 65535 slots exist.
    pub(crate) fn new(size: u16) -> Self {
        let size = size.clamp(1, NOTAG.0);
        TagTable {
            slots: (0..size).map(|_| None).collect(),
            free: (0..size).rev().collect(),
        }
    }

    /// Stores `pending` under a free tag, or hands it back when every tag is in use.
    pub(crate) fn insert(&mut self, pending: P) -> Result<Tag, P> {
        match self.free.pop() {
            Some(tag) => {
                self.slots[tag as usize] = Some(pending);
                Ok(Tag(tag))
            }
            None => Err(pending),
        }
    }

    /// The request waiting under `tag`, if any.
    pub(crate) fn get(&self, tag: Tag) -> Option<&P> {
        self.slots.get(tag.0 as usize)?.as_ref()
    }

    /// Removes the request under `tag` and frees the tag. `None` for a tag not in use (a reply
    /// nobody asked for).
    pub(crate) fn take(&mut self, tag: Tag) -> Option<P> {
        let pending = self.slots.get_mut(tag.0 as usize)?.take()?;
        self.free.push(tag.0);
        Some(pending)
    }

    /// Puts `pending` back under `tag`, which the caller just took and nobody else can have
    /// been given (the caller still holds the lock). Used to hand a freed tag straight to a
    /// request that was waiting for one.
    pub(crate) fn reuse(&mut self, tag: Tag, pending: P) {
        let pos = self.free.iter().rposition(|&t| t == tag.0);
        debug_assert_eq!(
            pos,
            Some(self.free.len() - 1),
            "tag {tag:?} was not just freed"
        );
        if let Some(pos) = pos {
            self.free.swap_remove(pos);
            self.slots[tag.0 as usize] = Some(pending);
        }
    }

    /// Removes every pending request (the connection died), freeing all tags.
    pub(crate) fn drain(&mut self) -> Vec<P> {
        let mut out = Vec::new();
        for (tag, slot) in self.slots.iter_mut().enumerate() {
            if let Some(p) = slot.take() {
                out.push(p);
                self.free.push(tag as u16);
            }
        }
        out
    }

    /// Requests in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Slots in the table.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_every_tag_once_then_refuses() {
        let mut t = TagTable::new(4);
        let tags: Vec<Tag> = (0..4).map(|i| t.insert(i).unwrap()).collect();
        assert_eq!(tags, vec![Tag(0), Tag(1), Tag(2), Tag(3)]);
        assert_eq!(t.insert(99), Err(99));
        assert_eq!(t.in_flight(), 4);
        assert_eq!(t.get(Tag(2)), Some(&2));
        assert_eq!(t.take(Tag(2)), Some(2));
        assert_eq!(t.take(Tag(2)), None, "a tag answers once");
        assert_eq!(t.insert(5), Ok(Tag(2)), "freed tag is reused");
    }

    #[test]
    fn unknown_and_out_of_range_tags_are_none() {
        let mut t: TagTable<u8> = TagTable::new(2);
        assert_eq!(t.take(Tag(0)), None);
        assert_eq!(t.take(Tag(7)), None);
        assert_eq!(t.take(NOTAG), None);
        assert!(t.get(Tag(100)).is_none());
    }

    #[test]
    fn size_is_clamped_and_never_includes_notag() {
        assert_eq!(TagTable::<()>::new(0).capacity(), 1);
        let mut t = TagTable::new(u16::MAX);
        assert_eq!(t.capacity(), 65535);
        let mut last = Tag(0);
        while let Ok(tag) = t.insert(()) {
            last = tag;
        }
        assert_eq!(last, Tag(65534));
    }

    #[test]
    fn drain_empties_and_frees_everything() {
        let mut t = TagTable::new(3);
        t.insert('a').unwrap();
        t.insert('b').unwrap();
        let mut drained = t.drain();
        drained.sort();
        assert_eq!(drained, vec!['a', 'b']);
        assert_eq!(t.in_flight(), 0);
        assert!(t.insert('c').is_ok());
    }

    #[test]
    fn reuse_rebinds_the_just_freed_tag() {
        let mut t = TagTable::new(2);
        let a = t.insert(1).unwrap();
        t.take(a).unwrap();
        t.reuse(a, 2);
        assert_eq!(t.get(a), Some(&2));
        assert_eq!(t.in_flight(), 1);
    }
}
