//! `crossfs stats`: read a control endpoint and print its counters.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::args::StatsArgs;
use crate::control;

pub fn run(args: StatsArgs) -> Result<()> {
    let socket = if args.control.is_dir() {
        mount_control(&args.control)?
    } else {
        args.control.clone()
    };
    let doc = control::query(&socket)?;
    if args.json {
        println!("{doc}");
    } else {
        print!("{}", render(&doc));
    }
    Ok(())
}

/// The control socket of the `crossfs mount` at `dir` (see [`control::mount_socket`]).
fn mount_control(dir: &Path) -> Result<PathBuf> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("mount point {}", dir.display()))?;
    let mounts = crate::mountinfo::mounts().context("reading /proc/self/mountinfo")?;
    let crossfs = crate::mountinfo::at(&mounts, &dir).is_some_and(|m| m.crossfs_addr().is_some());
    if !crossfs {
        bail!(
            "{} is not a crossfs mount (give a mount point of `crossfs mount`, or a \
             --control PATH)",
            dir.display()
        );
    }
    let device = std::fs::metadata(&dir)
        .with_context(|| format!("mount point {}", dir.display()))?
        .dev();
    let socket = control::mount_socket(device)
        .context("no runtime directory for control sockets ($XDG_RUNTIME_DIR is not set)")?;
    if !socket.exists() {
        bail!(
            "the crossfs mount at {} serves no control socket at {} (mounted by another \
             user, or by an older crossfs: give its --control PATH)",
            dir.display(),
            socket.display()
        );
    }
    Ok(socket)
}

/// A message-count table: one row per message type with count, bytes and errors.
fn message_table(out: &mut String, indent: &str, title: &str, messages: &Value) {
    out.push_str(&format!("{indent}{title}\n"));
    let Some(map) = messages.as_object() else {
        return;
    };
    out.push_str(&format!(
        "{indent}  {:<14} {:>12} {:>16} {:>8}\n",
        "message", "count", "bytes", "errors"
    ));
    // serde_json's numbers ignore width: format them as integers so the columns line up.
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    for (name, v) in map {
        if v.get("count").is_some() {
            // 9P counts carry `bytes`; FUSE opcodes of a virtio device, bytes in and out.
            let bytes = number(v, "bytes") + number(v, "bytes_in") + number(v, "bytes_out");
            out.push_str(&format!(
                "{indent}  {:<14} {:>12} {:>16} {:>8}\n",
                name,
                number(v, "count"),
                bytes,
                number(v, "errors"),
            ));
        }
    }
    for key in ["bytes_in", "bytes_out"] {
        if let Some(v) = map.get(key) {
            out.push_str(&format!("{indent}  {key}: {v}\n"));
        }
    }
}

/// A latency table: one row per request type with count and percentiles in microseconds.
fn latency_table(out: &mut String, indent: &str, title: &str, requests: &Value) {
    out.push_str(&format!("{indent}{title} (microseconds)\n"));
    let Some(map) = requests.as_object() else {
        return;
    };
    out.push_str(&format!(
        "{indent}  {:<14} {:>12} {:>10} {:>10} {:>10} {:>10}\n",
        "request", "count", "p50", "p90", "p99", "max"
    ));
    let us = |v: &Value, key: &str| v.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    for (name, v) in map {
        out.push_str(&format!(
            "{indent}  {:<14} {:>12} {:>10.1} {:>10.1} {:>10.1} {:>10.1}\n",
            name,
            v.get("count").and_then(Value::as_u64).unwrap_or(0),
            us(v, "p50_us"),
            us(v, "p90_us"),
            us(v, "p99_us"),
            us(v, "max_us"),
        ));
    }
}

/// A byte count as people read it: `512 B`, `64.0 KiB`, `3.2 MiB`, `1.5 GiB`.
fn human_bytes(v: &Value) -> String {
    let Some(n) = v.as_u64() else {
        return v.to_string();
    };
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut size = n as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

/// Any part of a report: message maps and latency maps as tables, objects as indented
/// sections, arrays item by item, numbers and strings as `name: value`.
fn section(out: &mut String, indent: &str, key: &str, v: &Value) {
    match v {
        Value::Object(map) if map.values().any(|c| c.get("p50_us").is_some()) => {
            latency_table(out, indent, key, v)
        }
        Value::Object(map) if map.values().any(|c| c.get("count").is_some()) => {
            message_table(out, indent, key, v)
        }
        Value::Object(map) => {
            out.push_str(&format!("{indent}{key}\n"));
            let inner = format!("{indent}  ");
            for (name, value) in map {
                section(out, &inner, name, value);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                section(out, indent, &format!("{key} {i}"), item);
            }
        }
        _ => out.push_str(&format!("{indent}{key}: {v}\n")),
    }
}

/// Human-readable rendering of a server's or a mount's report.
fn render(doc: &Value) -> String {
    let mut out = String::new();
    let mut rest: Vec<(&String, &Value)> = doc.as_object().into_iter().flatten().collect();
    if doc.get("role").and_then(Value::as_str) == Some("server") {
        out.push_str(&format!("server exporting {}\n", doc["export"]));
        message_table(&mut out, "", "total", &doc["total"]);
        let live = &doc["live"];
        if live.is_object() {
            out.push_str(&format!(
                "live: {} connections holding {} fids and {} descriptors\n",
                live["connections"], live["fids"], live["fds"]
            ));
            let (handles, open) = (&live["handles"], &live["open_files"]);
            if handles.is_object() {
                out.push_str(&format!(
                    "handle descriptors: {} of {} kept, {} closed to make room, {} reopened ({})\n",
                    handles["open"],
                    handles["capacity"],
                    handles["closed"],
                    handles["reopened"],
                    if handles["by_file_handle"] == true {
                        "by file handle"
                    } else {
                        "by walking the name again"
                    }
                ));
            }
            if open.is_object() {
                out.push_str(&format!(
                    "open files: {} of {}, {} opens refused (EMFILE)\n",
                    open["held"], open["budget"], open["refused"]
                ));
            }
            let memory = &live["memory"];
            if memory.is_object() {
                out.push_str(&format!(
                    "memory: {} held by connections, {} by the handle cache ({} handles, \
                     shared by every client)\n",
                    human_bytes(&memory["connections"]),
                    human_bytes(&memory["handles"]),
                    handles["handles"]
                ));
            }
        }
        for conn in doc["connections"].as_array().into_iter().flatten() {
            let title = format!(
                "connection {} from {} (msize {}, {} fids, {} descriptors)",
                conn["id"], conn["peer"], conn["msize"], conn["fids"], conn["fds"]
            );
            message_table(&mut out, "", &title, conn);
            let m = &conn["memory"];
            if m.is_object() {
                out.push_str(&format!(
                    "  memory: {} (buffers {}, requests {}, fids {}, event queues {}, \
                     xattrs {}, structures {}; {} threads, stacks not counted)\n",
                    human_bytes(&m["bytes"]),
                    human_bytes(&m["buffers"]),
                    human_bytes(&m["requests"]),
                    human_bytes(&m["fids"]),
                    human_bytes(&m["event_queues"]),
                    human_bytes(&m["xattrs"]),
                    human_bytes(&m["structs"]),
                    m["threads"]
                ));
            }
        }
        let latency = &doc["latency"];
        if latency.is_object() {
            out.push_str("latency over all connections\n");
            for (key, what) in [
                ("reply", "from request read to reply sent"),
                ("queued", "waiting for a worker"),
                ("exec", "in the handler"),
            ] {
                if latency[key].as_object().is_some_and(|m| !m.is_empty()) {
                    latency_table(&mut out, "  ", &format!("{key}: {what}"), &latency[key]);
                }
            }
        }
        let shown = ["role", "export", "total", "live", "connections", "latency"];
        rest.retain(|(key, _)| !shown.contains(&key.as_str()));
    }
    for (key, v) in rest {
        section(&mut out, "", key, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_server_report() {
        let doc = serde_json::json!({
            "role": "server", "export": "/x",
            "total": {"Twalk": {"count": 3, "bytes": 90, "errors": 1}, "bytes_in": 90, "bytes_out": 0},
            "live": {"connections": 1, "fids": 2, "fds": 3,
                     "handles": {"handles": 7}, "memory": {"connections": 70000, "handles": 900}},
            "connections": [{"id": 1, "peer": "unix", "msize": 1048576, "fids": 2, "fds": 3,
                             "memory": {"bytes": 70000, "buffers": 65536, "requests": 0,
                                        "fids": 300, "event_queues": 0, "xattrs": 0,
                                        "structs": 4164, "threads": 5},
                             "Twalk": {"count": 3, "bytes": 90, "errors": 1}}],
            "events": {"overflows": 2},
            "latency": {"reply": {"Twalk": {"count": 3, "p50_us": 12.5, "p90_us": 20.0, "p99_us": 31.2, "max_us": 40.0, "mean_us": 15.0}}, "queued": {}},
            "virtiofs": [{"listen": "unix:/v", "ops": {"LOOKUP": {"count": 4, "errors": 0, "bytes_in": 200, "bytes_out": 100}},
                          "data": {"read_copied": 0, "read_into_guest": 1048576, "write_copied": 0, "write_from_guest": 4097}}]
        });
        let text = render(&doc);
        assert!(
            text.contains("live: 1 connections holding 2 fids and 3 descriptors"),
            "{text}"
        );
        assert!(
            text.contains("msize 1048576, 2 fids, 3 descriptors"),
            "{text}"
        );
        assert!(text.contains("Twalk"), "{text}");
        assert!(text.contains("msize 1048576"), "{text}");
        assert!(
            text.contains(
                "memory: 68.4 KiB held by connections, 900 B by the handle cache (7 handles,"
            ),
            "{text}"
        );
        assert!(
            text.contains("  memory: 68.4 KiB (buffers 64.0 KiB, requests 0 B, fids 300 B, event queues 0 B, xattrs 0 B, structures 4.1 KiB; 5 threads"),
            "{text}"
        );
        assert!(text.contains("bytes_in: 90"), "{text}");
        assert!(
            text.contains(
                "latency over all connections\n  reply: from request read to reply sent (microseconds)\n    request               count        p50"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "    Twalk                     3       12.5       20.0       31.2       40.0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("events\n  overflows: 2\n"),
            "the event engine's counters: {text}"
        );
        assert!(text.contains("virtiofs 0\n  data\n"), "{text}");
        assert!(text.contains("\n  listen: \"unix:/v\"\n  ops\n"), "{text}");
        assert!(
            text.contains("    LOOKUP                    4              300        0"),
            "{text}"
        );
        assert!(
            text.contains(
                "  data\n    read_copied: 0\n    read_into_guest: 1048576\n    write_copied: 0\n    write_from_guest: 4097\n"
            ),
            "the virtio door's bytes by path: {text}"
        );
    }

    #[test]
    fn renders_every_counter_of_a_mount() {
        let doc = serde_json::json!({
            "role": "client", "cache": "auto",
            "9p": {"Twalk": {"count": 3, "bytes": 90, "errors": 1}},
            "latency": {"reply": {"Tgetattr": {"count": 1, "p50_us": 8.0, "p90_us": 8.0, "p99_us": 8.0, "max_us": 8.1, "mean_us": 8.1}}},
            "fuse": {},
            "replicas": {"hits": 7, "entries": 12, "following": true},
            "msize": {"effective": 65536}
        });
        let text = render(&doc);
        for line in [
            "cache: \"auto\"",
            "replicas\n  entries: 12\n  following: true\n  hits: 7",
            "msize\n  effective: 65536",
            "fuse\n",
            "Twalk",
            "latency\n  reply (microseconds)\n",
            "    Tgetattr                  1        8.0        8.0        8.0        8.1\n",
        ] {
            assert!(text.contains(line), "{line:?} in {text}");
        }
    }
}
