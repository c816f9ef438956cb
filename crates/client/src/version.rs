//! Version negotiation: Tversion and Rversion, before the reader thread exists.

use std::io::{self, Read, Write};

use crossfs_wire::{
    check_frame_size, decode_rframe, MessageCounters, Rmessage, Tag, Tfeatures, Tmessage, Tversion,
    MIN_MSIZE, NOTAG, VERSION_9P2000_L, VERSION_CROSSFS,
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
            Ok(mut negotiated) if negotiated.extensions => {
                negotiated.features = features(r, w, counters, negotiated.effective)?;
                return Ok(negotiated);
            }
            other => return other,
        }
    }
    exchange(r, w, config, counters, ask, VERSION_9P2000_L)
}

/// Tfeatures and its answer, on a connection that negotiated the extension: the server's
/// optional behaviours (none from a crossfs that predates the message: `EOPNOTSUPP`).
fn features(
    r: &mut impl Read,
    w: &mut impl Write,
    counters: &MessageCounters,
    msize: u32,
) -> Result<u64, ClientError> {
    let reply = round_trip(
        r,
        w,
        counters,
        Tmessage::Features(Tfeatures {}),
        Tag(0),
        msize,
    )?;
    match reply {
        Rmessage::Features(f) => Ok(f.features),
        Rmessage::Lerror(_) => {
            counters.record_error(Tfeatures::TYPE);
            Ok(0)
        }
        other => Err(unexpected(other)),
    }
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
    let version = Tmessage::Version(Tversion {
        msize: ask,
        version: version.to_vec(),
    });
    let reply = round_trip(r, w, counters, version, NOTAG, ask)?;
    match reply {
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
                features: 0,
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

/// Sends `msg` with `tag` and reads its reply (at most `max` bytes), before the reader
/// thread exists: the reply must carry the same tag.
fn round_trip(
    r: &mut impl Read,
    w: &mut impl Write,
    counters: &MessageCounters,
    msg: Tmessage,
    tag: Tag,
    max: u32,
) -> Result<Rmessage, ClientError> {
    let name = msg.name();
    let mut frame = Vec::new();
    msg.encode(tag, &mut frame);
    counters.record(msg.msg_type(), frame.len());
    w.write_all(&frame)
        .and_then(|()| w.flush())
        .map_err(|e| ClientError::Disconnected(format!("sending {name}: {e}")))?;

    let lost =
        |e: io::Error| ClientError::Disconnected(format!("reading the reply to {name}: {e}"));
    let mut size = [0u8; 4];
    r.read_exact(&mut size).map_err(lost)?;
    let len = check_frame_size(u32::from_le_bytes(size), max)
        .map_err(|e| ClientError::Protocol(format!("the reply to {name}: {e}")))?;
    frame.clear();
    frame.extend_from_slice(&size);
    frame.resize(len, 0);
    r.read_exact(&mut frame[4..]).map_err(lost)?;
    counters.record(frame[4], len);
    let reply = decode_rframe(&frame)
        .map_err(|e| ClientError::Protocol(format!("the reply to {name}: {e}")))?;
    if reply.tag != tag {
        return Err(ClientError::Protocol(format!(
            "the reply to {name} has tag {} instead of {}",
            reply.tag.0, tag.0
        )));
    }
    Ok(reply.msg)
}
