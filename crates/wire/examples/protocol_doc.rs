//! Writes docs/protocol.md from the message table: `cargo run -p crossfs-wire --example
//! protocol_doc > docs/protocol.md`. A test (`tests/protocol_doc.rs`) fails when the
//! committed file differs from what this prints.

fn main() {
    print!("{}", crossfs_wire::protocol_doc());
}
