//! The wire decoder on arbitrary bytes: it must never panic, and whatever it accepts must
//! encode back to the same bytes (so no two readings of one frame can disagree).
#![no_main]

use crossfs_wire::{decode_rframe, decode_tframe, DirEntryAttr, FileData, Rmessage, Tfsync};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = decode_tframe(data) {
        if let Ok(msg) = frame.msg {
            // Tfsync's short form is accepted and re-encoded long: skip the byte comparison.
            if frame.msg_type != Tfsync::TYPE {
                let mut out = Vec::new();
                msg.encode(frame.tag, &mut out);
                assert_eq!(out, data, "request re-encoded differently");
            }
        }
    }
    if let Ok(frame) = decode_rframe(data) {
        // Payloads packed in their own layout decode without panicking too.
        match &frame.msg {
            Rmessage::Readfiles(r) => FileData::iter(&r.data.0).for_each(drop),
            Rmessage::Readdirattr(r) => DirEntryAttr::iter(&r.data.0).for_each(drop),
            Rmessage::Walkreaddirattr(r) => DirEntryAttr::iter(&r.data.0).for_each(drop),
            _ => {}
        }
        let mut out = Vec::new();
        frame.msg.encode(frame.tag, &mut out);
        assert_eq!(out, data, "reply re-encoded differently");
    }
});
