//! `crossfs stats`: read a control endpoint and print its counters.

use anyhow::Result;
use serde_json::Value;

use crate::args::StatsArgs;
use crate::control;

pub fn run(args: StatsArgs) -> Result<()> {
    let doc = control::query(&args.control)?;
    if args.json {
        println!("{doc}");
    } else {
        print!("{}", render(&doc));
    }
    Ok(())
}

/// A message-count table: one row per message type with count, bytes and errors.
fn message_table(title: &str, messages: &Value) -> String {
    let mut out = format!("{title}\n");
    let Some(map) = messages.as_object() else {
        return out;
    };
    out.push_str(&format!(
        "  {:<14} {:>12} {:>16} {:>8}\n",
        "message", "count", "bytes", "errors"
    ));
    for (name, v) in map {
        if let Some(count) = v.get("count") {
            out.push_str(&format!(
                "  {:<14} {:>12} {:>16} {:>8}\n",
                name,
                count,
                v.get("bytes").unwrap_or(&Value::from(0)),
                v.get("errors").unwrap_or(&Value::from(0)),
            ));
        }
    }
    for key in ["bytes_in", "bytes_out"] {
        if let Some(v) = map.get(key) {
            out.push_str(&format!("  {key}: {v}\n"));
        }
    }
    out
}

/// Human-readable rendering of a server's or a mount's report.
fn render(doc: &Value) -> String {
    let mut out = String::new();
    match doc.get("role").and_then(Value::as_str) {
        Some("server") => {
            out.push_str(&format!("server exporting {}\n", doc["export"]));
            out.push_str(&message_table("total", &doc["total"]));
            let live = &doc["live"];
            if live.is_object() {
                out.push_str(&format!(
                    "live: {} connections holding {} fids and {} descriptors\n",
                    live["connections"], live["fids"], live["fds"]
                ));
            }
            for conn in doc["connections"].as_array().into_iter().flatten() {
                out.push_str(&message_table(
                    &format!(
                        "connection {} from {} (msize {}, {} fids, {} descriptors)",
                        conn["id"], conn["peer"], conn["msize"], conn["fids"], conn["fds"]
                    ),
                    conn,
                ));
            }
        }
        _ => {
            // A mount: print its sections generically.
            for (key, v) in doc.as_object().into_iter().flatten() {
                if v.is_object() {
                    out.push_str(&message_table(key, v));
                } else {
                    out.push_str(&format!("{key}: {v}\n"));
                }
            }
        }
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
            "live": {"connections": 1, "fids": 2, "fds": 3},
            "connections": [{"id": 1, "peer": "unix", "msize": 1048576, "fids": 2, "fds": 3, "Twalk": {"count": 3, "bytes": 90, "errors": 1}}]
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
        assert!(text.contains("bytes_in: 90"), "{text}");
    }
}
