//! Connection settings and the record of the msize negotiation.

/// What the client asks for when it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// The msize to request (default 1 MiB). The effective value is the minimum of this, the
    /// transport's cap and the server's answer.
    pub msize: u32,
    /// The largest message the transport can carry (default: no cap). Linux caps its own
    /// socket transports at 1 MiB; crossfs's transports need not, so the caller decides.
    pub transport_max: u32,
    /// Requests that may be in flight at once (tags; default 256). Further callers wait for a
    /// tag to come free: that is the client's back-pressure. Clamped to 1..=65535.
    pub max_in_flight: u16,
    /// Ask for the crossfs extension of 9P2000.L (default true; see
    /// [`MsizeNegotiation::extensions`]). A server without it is spoken to in plain
    /// 9P2000.L either way.
    pub extensions: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            msize: crossfs_wire::DEFAULT_MSIZE,
            transport_max: u32::MAX,
            max_in_flight: 256,
            extensions: true,
        }
    }
}

/// How the msize was arrived at: every layer's limit, kept so `stats` can show which layer
/// is the bottleneck (raising one layer alone changes nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsizeNegotiation {
    /// What the configuration asked for.
    pub requested: u32,
    /// The transport's cap.
    pub transport_max: u32,
    /// The msize in the server's Rversion.
    pub server: u32,
    /// The msize in force: `min(requested, transport_max, server)`.
    pub effective: u32,
    /// Whether the server answered with the crossfs extension (`9P2000.L.crossfs`): its
    /// compound messages may be sent on this connection.
    pub extensions: bool,
    /// The server's optional behaviours (`crossfs_wire::features` bits), from its
    /// Rfeatures: 0 without the extension, or from a crossfs that predates Tfeatures.
    pub features: u64,
}
