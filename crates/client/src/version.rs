//! Version negotiation: Tversion and Rversion, before the reader thread exists.

use std::io::{self, Read, Write};

use crossfs_wire::{
    check_frame_size, decode_rframe, MessageCounters, Rmessage, Tmessage, Tversion, MIN_MSIZE,
    NOTAG, VERSION_9P2000_L, VERSION_CROSSFS,
};

use crate::client::unexpected;
use crate::conn::sane_errno;
use crate::{ClientConfig, ClientError, MsizeNegotiation};

/// Sends Tversion and reads Rversion, before the reader thread exists.
pub(crate) fn negotiate(
    r: &mut impl Read,
    w: &mut impl Write,
    config: &ClientConfig,
    counters: &MessageCounters,
) -> Result<MsizeNegotiation, ClientError> {
    // Like Linux, never ask the server for more than the transport can carry.
    let ask = config.msize.min(config.transport_max);
    if ask < MIN_MSIZE {
        return Err(ClientError::InvalidConfig(format!(
            "msize {ask} is below the minimum {MIN_MSIZE}"
        )));
    }
    if config.extensions {
        // A server that does not know the extension may answer "unknown" or an error
        // rather than plain 9P2000.L (diod does): then ask again for plain 9P2000.L, on the
        // same connection, as 9P allows.
        match exchange(r, w, config, counters, ask, VERSION_CROSSFS) {
            Err(ClientError::Protocol(_) | ClientError::Errno(_)) => {}
            other => return other,
        }
    }
    exchange(r, w, config, counters, ask, VERSION_9P2000_L)
}

/// One Tversion asking for `version`, and its Rversion.
fn exchange(
    r: &mut impl Read,
    w: &mut impl Write,
    config: &ClientConfig,
    counters: &MessageCounters,
    ask: u32,
    version: &[u8],
) -> Result<MsizeNegotiation, ClientError> {
    let mut frame = Vec::new();
    Tmessage::Version(Tversion {
        msize: ask,
        version: version.to_vec(),
    })
    .encode(NOTAG, &mut frame);
    counters.record(Tversion::TYPE, frame.len());
    w.write_all(&frame)
        .and_then(|()| w.flush())
        .map_err(|e| ClientError::Disconnected(format!("sending Tversion: {e}")))?;

    let lost = |e: io::Error| ClientError::Disconnected(format!("reading Rversion: {e}"));
    let mut size = [0u8; 4];
    r.read_exact(&mut size).map_err(lost)?;
    let len = check_frame_size(u32::from_le_bytes(size), ask)
        .map_err(|e| ClientError::Protocol(format!("Rversion: {e}")))?;
    frame.clear();
    frame.extend_from_slice(&size);
    frame.resize(len, 0);
    r.read_exact(&mut frame[4..]).map_err(lost)?;
    counters.record(frame[4], len);
    let reply =
        decode_rframe(&frame).map_err(|e| ClientError::Protocol(format!("Rversion: {e}")))?;
    if reply.tag != NOTAG {
        return Err(ClientError::Protocol(format!(
            "Rversion with tag {} instead of NOTAG",
            reply.tag.0
        )));
    }
    match reply.msg {
        // Linux accepts any version string that starts with 9P2000.L.
        Rmessage::Version(v) if v.version.starts_with(VERSION_9P2000_L) => {
            // Adopt a smaller server msize, never a larger one.
            let effective = ask.min(v.msize);
            if effective < MIN_MSIZE {
                return Err(ClientError::Protocol(format!(
                    "server msize {} is below the minimum {MIN_MSIZE}",
                    v.msize
                )));
            }
            Ok(MsizeNegotiation {
                requested: config.msize,
                transport_max: config.transport_max,
                server: v.msize,
                effective,
                extensions: v.version == VERSION_CROSSFS,
            })
        }
        Rmessage::Version(v) => Err(ClientError::Protocol(format!(
            "server speaks {:?}, not 9P2000.L",
            String::from_utf8_lossy(&v.version)
        ))),
        Rmessage::Lerror(e) => {
            counters.record_error(Tversion::TYPE);
            Err(ClientError::Errno(sane_errno(e.ecode)))
        }
        other => Err(unexpected(other)),
    }
}
