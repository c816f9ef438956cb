//! Random requests with sound framing: every one is answered, nothing panics or hangs, and
//! nothing appears outside the export.

mod common;

use common::{Harness, ROOT};
use crossfs_wire::*;

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const TYPES: [u8; 27] = [
    8, 12, 14, 16, 18, 20, 22, 24, 26, 30, 32, 40, 50, 52, 54, 70, 72, 74, 76, 102, 104, 108, 110,
    116, 118, 120, 122,
];

#[test]
fn random_requests_are_answered_one_for_one() {
    let outside = tempfile::tempdir().unwrap();
    let h = Harness::new();
    std::fs::create_dir(h.path("d")).unwrap();
    std::fs::write(h.path("d/f"), b"content").unwrap();
    std::os::unix::fs::symlink(outside.path(), h.path("out")).unwrap();
    let mut c = h.connect_msize(8192);
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    c.walk(ROOT, Fid(2), &["d", "f"]).unwrap();
    c.walk(ROOT, Fid(3), &["out"]).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let words: [&[u8]; 8] = [b"d", b"f", b"out", b"..", b".", b"x", b"", b"a/b"];
    for i in 0..3000u32 {
        let ty = TYPES[rng.below(TYPES.len() as u64) as usize];
        let mut body = Vec::new();
        // Mostly real fids, so handlers get past the fid lookup.
        body.extend_from_slice(&(rng.below(5) as u32).to_le_bytes());
        for _ in 0..rng.below(6) {
            match rng.below(4) {
                0 => body.extend_from_slice(&(rng.below(5) as u32).to_le_bytes()),
                1 => {
                    let w = words[rng.below(words.len() as u64) as usize];
                    body.extend_from_slice(&(w.len() as u16).to_le_bytes());
                    body.extend_from_slice(w);
                }
                2 => body.extend_from_slice(&rng.next().to_le_bytes()),
                _ => body.push(rng.next() as u8),
            }
        }
        let tag = (i % 1000) as u16;
        let mut frame = ((7 + body.len()) as u32).to_le_bytes().to_vec();
        frame.push(ty);
        frame.extend_from_slice(&tag.to_le_bytes());
        frame.extend_from_slice(&body);
        c.send_raw(&frame);
        let r = c.recv();
        assert_eq!(r.tag, Tag(tag), "request {i} of type {ty}");
    }
    // The connection is still usable afterwards (fid 0 may have been clunked at random).
    c.attach(Fid(60));
    c.walk(Fid(60), Fid(61), &[]).unwrap();
    c.close();
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    let totals = h.server.message_totals();
    let answered: u64 = totals
        .messages
        .iter()
        .filter(|(n, _)| n.starts_with('R'))
        .map(|(_, c)| c.count)
        .sum();
    let asked: u64 = totals
        .messages
        .iter()
        .filter(|(n, _)| !n.starts_with('R'))
        .map(|(_, c)| c.count)
        .sum();
    assert_eq!(answered, asked);
}
