//! Which crossfs mounts this process sees: the mount crate's reading of
//! /proc/self/mountinfo (`crossfs_mount::table`). `crossfs watch` reads a mount's server
//! address, `crossfs sync` the mount point of a path inside, `crossfs mount` refuses a point
//! that already has a mount, and mount(8)'s helper waits for the mount to appear.

pub use crossfs_mount::table::{at, containing, mounts};
