//! Does watching slow the writer? (Lesson 5: VsChromium's watcher made file creation 10x
//! slower on Windows.) Creates and deletes 1,000 files in a directory, without a watcher and
//! with each watcher running (a subscriber attached and draining), and prints the ratios.
//!
//!     cargo run --release -p crossfs-events --example watch_cost [DIR]
//!
//! DIR defaults to a fresh directory under the system temp dir.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossfs_events::{BackendKind, EventHub, HubConfig};

const FILES: usize = 1000;
const ROUNDS: usize = 9;

fn churn(dir: &Path) -> Duration {
    let t = Instant::now();
    for i in 0..FILES {
        std::fs::write(dir.join(format!("f{i}")), b"x").expect("create");
    }
    for i in 0..FILES {
        std::fs::remove_file(dir.join(format!("f{i}"))).expect("delete");
    }
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One round in a fresh export directory under `base`, with `backend` watching it (a
/// subscriber attached and draining) or nothing. Returns the churn time and event bytes read.
fn round(base: &Path, tag: &str, backend: Option<BackendKind>) -> Option<(Duration, u64)> {
    let dir = base.join(tag);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let hub = match backend {
        None => None,
        Some(b) => {
            let cfg = HubConfig {
                backend: b,
                ..HubConfig::default()
            };
            match EventHub::start(&dir, cfg) {
                Ok(h) => Some(h),
                Err(e) => {
                    eprintln!("{b:?}: {e}");
                    return None;
                }
            }
        }
    };
    let sub = hub.as_ref().map(|h| h.subscribe());
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut n = 0u64;
            if let Some(sub) = &sub {
                while !stop.load(Ordering::Relaxed) {
                    n += sub
                        .read_blocking(64 * 1024, Duration::from_millis(20))
                        .len() as u64;
                }
            }
            n
        });
        let t = churn(&dir);
        if let Some(h) = &hub {
            let _ = h.sync_cookie();
        }
        stop.store(true, Ordering::Relaxed);
        (t, reader.join().unwrap_or(0))
    });
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
    Some(out)
}

fn main() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let modes: [(&str, Option<BackendKind>); 4] = [
        ("none", None),
        ("inotify", Some(BackendKind::Inotify)),
        ("fanotify", Some(BackendKind::Fanotify)),
        ("poll", Some(BackendKind::Poll)),
    ];
    // Rounds interleave the modes, each in a fresh directory, so drift and directory growth
    // hit every mode alike.
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); modes.len()];
    let mut bytes = vec![0u64; modes.len()];
    for r in 0..ROUNDS {
        for (i, (name, backend)) in modes.iter().enumerate() {
            if let Some((t, b)) = round(&base, &format!("{name}-{r}"), *backend) {
                times[i].push(t);
                bytes[i] += b;
            }
        }
    }
    let none = median(times[0].clone());
    println!(
        "create+delete {FILES} files, median of {ROUNDS} interleaved rounds: no watcher {:.1} ms",
        none.as_secs_f64() * 1e3
    );
    for (i, (name, _)) in modes.iter().enumerate().skip(1) {
        if times[i].is_empty() {
            println!("{name}: unavailable");
            continue;
        }
        let t = median(times[i].clone());
        println!(
            "{name}: {:.1} ms, ratio {:.2}x (subscriber read {} KiB of events per round)",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() / none.as_secs_f64(),
            bytes[i] / ROUNDS as u64 / 1024
        );
    }
}
