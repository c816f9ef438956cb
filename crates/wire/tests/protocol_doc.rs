//! docs/protocol.md is generated from the message table; this keeps the committed copy true.

#[test]
fn docs_protocol_md_matches_the_message_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated = crossfs_wire::protocol_doc();
    assert!(
        committed == generated,
        "docs/protocol.md is out of date: run \
         `cargo run -p crossfs-wire --example protocol_doc > docs/protocol.md`"
    );
    // Every extension message is documented with its number.
    for m in crossfs_wire::Tmessage::TABLE
        .iter()
        .chain(crossfs_wire::Rmessage::TABLE)
    {
        assert!(committed.contains(&format!("| {} | {} |", m.number, m.name)));
        assert!(!m.doc_text().is_empty(), "{} has no doc comment", m.name);
    }
}
