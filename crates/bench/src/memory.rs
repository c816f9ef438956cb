//! Memory of the processes behind a target, from `/proc/PID/status`.

use serde::Serialize;

/// Peak and current resident set of one process, in KiB as the kernel reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessMemory {
    pub role: String,
    pub pid: u32,
    /// VmHWM: the peak resident set over the process's life.
    pub vm_hwm_kib: Option<u64>,
    /// VmRSS: the resident set when the bench finished.
    pub vm_rss_kib: Option<u64>,
    /// Why the figures are missing (process gone, /proc unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Read VmHWM and VmRSS of `pid`; failures become an explicit `error`.
pub fn read_process_memory(role: &str, pid: u32) -> ProcessMemory {
    let path = format!("/proc/{pid}/status");
    match std::fs::read_to_string(&path) {
        Ok(status) => ProcessMemory {
            role: role.to_owned(),
            pid,
            vm_hwm_kib: status_field_kib(&status, "VmHWM"),
            vm_rss_kib: status_field_kib(&status, "VmRSS"),
            error: None,
        },
        Err(e) => ProcessMemory {
            role: role.to_owned(),
            pid,
            vm_hwm_kib: None,
            vm_rss_kib: None,
            error: Some(format!("reading {path}: {e}")),
        },
    }
}

/// Parse a line such as `VmHWM:\t   12345 kB`.
fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let value = words.next()?.parse().ok()?;
        // The kernel always says kB here; anything else is not a format we know.
        (words.next() == Some("kB")).then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_fields() {
        let status =
            "Name:\tcrossfs\nVmPeak:\t  20000 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n";
        assert_eq!(status_field_kib(status, "VmHWM"), Some(5120));
        assert_eq!(status_field_kib(status, "VmRSS"), Some(4096));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
    }

    #[test]
    fn reads_own_process() {
        let m = read_process_memory("self", std::process::id());
        assert!(m.error.is_none());
        assert!(m.vm_hwm_kib.unwrap() >= m.vm_rss_kib.unwrap() / 2);
    }

    #[test]
    fn missing_process_is_an_explicit_error() {
        // pid_max is at most 2^22, so this pid cannot exist.
        let m = read_process_memory("server", u32::MAX);
        assert!(m.error.is_some());
        assert_eq!(m.vm_rss_kib, None);
    }
}
