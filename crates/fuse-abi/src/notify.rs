//! Notifications: messages a server writes to the kernel unasked (`unique` 0, the code in
//! the header's `error`), to drop or fill what the kernel caches.

use super::notify_code;
use super::OUT_HEADER_LEN;

/// Why a notification cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotifyError {
    /// A name or data longer than the message's 32-bit length can carry.
    #[error("notification of {0} bytes is too large")]
    TooLarge(usize),
}

fn message(code: i32, body_len: usize) -> Result<Vec<u8>, NotifyError> {
    let total = OUT_HEADER_LEN + body_len;
    let len = u32::try_from(total).map_err(|_| NotifyError::TooLarge(total))?;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&len.to_le_bytes());
    m.extend_from_slice(&code.to_le_bytes());
    m.extend_from_slice(&0u64.to_le_bytes());
    Ok(m)
}

fn name_len(name: &[u8]) -> Result<u32, NotifyError> {
    u32::try_from(name.len()).map_err(|_| NotifyError::TooLarge(name.len()))
}

/// FUSE_NOTIFY_INVAL_INODE: drop node `ino`'s attributes, and its cached pages from byte
/// `offset` for `len` bytes (0: to the end; a negative `offset`: attributes only).
pub fn inval_inode(ino: u64, offset: i64, len: i64) -> Vec<u8> {
    let mut m = message(notify_code::INVAL_INODE, 24).unwrap_or_default();
    m.extend_from_slice(&ino.to_le_bytes());
    m.extend_from_slice(&offset.to_le_bytes());
    m.extend_from_slice(&len.to_le_bytes());
    m
}

/// FUSE_NOTIFY_INVAL_ENTRY: drop the name `name` in directory `parent`.
///
/// # Errors
/// [`NotifyError::TooLarge`] for a name past 4 GiB.
pub fn inval_entry(parent: u64, name: &[u8]) -> Result<Vec<u8>, NotifyError> {
    let namelen = name_len(name)?;
    let mut m = message(notify_code::INVAL_ENTRY, 16 + name.len() + 1)?;
    m.extend_from_slice(&parent.to_le_bytes());
    m.extend_from_slice(&namelen.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(name);
    m.push(0);
    Ok(m)
}

/// FUSE_NOTIFY_DELETE: the name `name` of node `child` in directory `parent` is gone (the
/// kernel also drops it from watchers' view, as a local unlink would).
///
/// # Errors
/// [`NotifyError::TooLarge`] for a name past 4 GiB.
pub fn delete(parent: u64, child: u64, name: &[u8]) -> Result<Vec<u8>, NotifyError> {
    let namelen = name_len(name)?;
    let mut m = message(notify_code::DELETE, 24 + name.len() + 1)?;
    m.extend_from_slice(&parent.to_le_bytes());
    m.extend_from_slice(&child.to_le_bytes());
    m.extend_from_slice(&namelen.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(name);
    m.push(0);
    Ok(m)
}

/// FUSE_NOTIFY_STORE: put `data` into node `ino`'s page cache at byte `offset`.
///
/// # Errors
/// [`NotifyError::TooLarge`] for data past 4 GiB.
pub fn store(ino: u64, offset: u64, data: &[u8]) -> Result<Vec<u8>, NotifyError> {
    let size = u32::try_from(data.len()).map_err(|_| NotifyError::TooLarge(data.len()))?;
    let mut m = message(notify_code::STORE, 24 + data.len())?;
    m.extend_from_slice(&ino.to_le_bytes());
    m.extend_from_slice(&offset.to_le_bytes());
    m.extend_from_slice(&size.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(data);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(m: &[u8]) -> (u32, i32, u64) {
        (
            u32::from_le_bytes(m[0..4].try_into().unwrap()),
            i32::from_le_bytes(m[4..8].try_into().unwrap()),
            u64::from_le_bytes(m[8..16].try_into().unwrap()),
        )
    }

    #[test]
    fn lengths_codes_and_names() {
        let m = inval_inode(7, -1, 0);
        assert_eq!(header(&m), (40, notify_code::INVAL_INODE, 0));
        let m = inval_entry(1, b"abc").unwrap();
        assert_eq!(header(&m), (36, notify_code::INVAL_ENTRY, 0));
        assert_eq!(&m[32..], b"abc\0");
        let m = delete(1, 9, b"x").unwrap();
        assert_eq!(header(&m), (42, notify_code::DELETE, 0));
        let m = store(3, 4096, &[1, 2, 3]).unwrap();
        assert_eq!(header(&m), (43, notify_code::STORE, 0));
        assert_eq!(u32::from_le_bytes(m[32..36].try_into().unwrap()), 3);
    }
}
