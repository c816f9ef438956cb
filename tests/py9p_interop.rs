//! py9p (PyPI `p9fs`), a 9P client that shares no code with crossfs, against `crossfs serve`:
//! tests/py9p/interop.py runs protocol-level checks (msize negotiation, partial walks, bad
//! names, reply sizes, contents, attributes, unknown fids) and this test asserts they all pass
//! and that the server's statistics saw them.
//!
//! Needs the py9p venv (`scripts/install-test-deps.sh`); the test fails, not skips, without it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::*;

/// Deterministic bytes that repeat with no short period.
fn pseudo_random(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The tree interop.py expects (see its docstring).
fn prepare_export(export: &Path) {
    std::fs::create_dir_all(export.join("exists_dir")).unwrap();
    std::fs::write(export.join("exists_dir/inner"), b"inner\n").unwrap();
    std::fs::create_dir(export.join("dir500")).unwrap();
    for i in 0..500 {
        std::fs::write(export.join(format!("dir500/f{i:03}")), b"").unwrap();
    }
    std::fs::write(
        export.join("big.bin"),
        pseudo_random(3 * 1024 * 1024 + 4321, 0x9e37_79b9_7f4a_7c15),
    )
    .unwrap();
    let stat_me = std::fs::File::create(export.join("stat_me")).unwrap();
    std::io::Write::write_all(&mut &stat_me, b"stat me\n").unwrap();
    let mtime = SystemTime::UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
    stat_me
        .set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
}

fn py9p_python() -> std::path::PathBuf {
    let python = repo_root().join("target/py9p-venv/bin/python");
    let importable = Command::new(&python)
        .args(["-c", "from py9p import py9p"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        importable,
        "py9p is not installed in {}: run scripts/install-test-deps.sh",
        python.display()
    );
    python
}

/// A raw connection that negotiates msize 65536, attaches, makes one failed walk, and stays
/// open so that `stats` lists it.
struct LiveConn(std::net::TcpStream);

impl LiveConn {
    fn connect(port: u16) -> LiveConn {
        use crossfs_wire::*;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let requests: [(Tag, Tmessage); 3] = [
            (
                NOTAG,
                Tversion {
                    msize: 65536,
                    version: VERSION_9P2000_L.to_vec(),
                }
                .into(),
            ),
            (
                Tag(1),
                Tattach {
                    fid: Fid(1),
                    afid: NOFID,
                    uname: b"live".to_vec(),
                    aname: Vec::new(),
                    n_uname: 0,
                }
                .into(),
            ),
            (
                Tag(2),
                Twalk {
                    fid: Fid(1),
                    newfid: Fid(2),
                    wnames: vec![b"no such name".to_vec()],
                }
                .into(),
            ),
        ];
        let mut replies = Vec::new();
        for (tag, msg) in requests {
            let mut buf = Vec::new();
            msg.encode(tag, &mut buf);
            std::io::Write::write_all(&mut s, &buf).unwrap();
            let mut head = [0u8; 4];
            std::io::Read::read_exact(&mut s, &mut head).unwrap();
            let mut frame = head.to_vec();
            frame.resize(u32::from_le_bytes(head) as usize, 0);
            std::io::Read::read_exact(&mut s, &mut frame[4..]).unwrap();
            let reply = decode_rframe(&frame).unwrap();
            assert_eq!(reply.tag, tag);
            replies.push(reply.msg);
        }
        assert!(
            matches!(&replies[0], Rmessage::Version(v) if v.msize == 65536),
            "{replies:?}"
        );
        assert!(matches!(replies[1], Rmessage::Attach(_)), "{replies:?}");
        assert_eq!(
            replies[2],
            Rmessage::error(2),
            "walk to a missing name: ENOENT"
        );
        LiveConn(s)
    }

    fn close(self) {
        drop(self.0);
    }
}

fn total(stats: &serde_json::Value, message: &str, field: &str) -> u64 {
    stats["total"][message][field].as_u64().unwrap_or(0)
}

#[test]
fn py9p_client_passes_protocol_checks() {
    let python = py9p_python();
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    prepare_export(&export);

    let port = free_port();
    let serve = Serve::start(&export, &format!("tcp:127.0.0.1:{port}"), &[]);
    let out = Command::new(&python)
        .arg(repo_root().join("tests/py9p/interop.py"))
        .arg("127.0.0.1")
        .arg(port.to_string())
        .arg(&export)
        // The server runs with its default --msize.
        .args(["--max-msize", &crossfs_wire::DEFAULT_MSIZE.to_string()])
        .output()
        .expect("running tests/py9p/interop.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- interop.py output\n{stdout}--- stderr\n{stderr}---");
    assert!(
        out.status.success(),
        "interop.py failed ({}):\n{}",
        out.status,
        stdout
            .lines()
            .filter(|l| !l.starts_with("ok: "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.ends_with(" passed, 0 failed"),
        "unexpected last line `{last}`"
    );
    let passed: u64 = last.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 50, "only {passed} checks ran");

    // The server counted what py9p did: every check group opens its own connection.
    let stats = serve.stats();
    println!(
        "server totals: {}",
        serde_json::to_string(&stats["total"]).unwrap()
    );
    assert_eq!(stats["role"], "server");
    assert!(total(&stats, "Tversion", "count") >= 10, "{stats}");
    assert!(total(&stats, "Tattach", "count") >= 10, "{stats}");
    assert!(total(&stats, "Twalk", "errors") >= 8, "{stats}");
    assert!(total(&stats, "Tclunk", "errors") >= 3, "{stats}");
    assert!(total(&stats, "Tlcreate", "errors") >= 4, "{stats}");
    assert!(total(&stats, "Tmkdir", "errors") >= 4, "{stats}");
    assert!(total(&stats, "Treaddir", "count") >= 3, "{stats}");
    // Two full reads of big.bin at least.
    assert!(
        total(&stats, "Rread", "bytes") >= 2 * 3 * 1024 * 1024,
        "{stats}"
    );
    assert!(stats["total"]["bytes_out"].as_u64().unwrap_or(0) >= 6 * 1024 * 1024);
    assert!(stats["total"]["bytes_in"].as_u64().unwrap_or(0) > 0);

    // A live connection is listed with its own counters and msize.
    let live = LiveConn::connect(port);
    let stats = serve.stats();
    let conns = stats["connections"]
        .as_array()
        .expect("connections is an array");
    let me = conns
        .iter()
        .find(|c| c["msize"] == 65536 && c["Twalk"]["errors"] == 1)
        .unwrap_or_else(|| {
            panic!("no live connection with msize 65536 and a failed walk: {stats}")
        });
    println!("live connection: {me}");
    assert_eq!(me["Tversion"]["count"], 1, "{me}");
    assert_eq!(me["Tattach"]["count"], 1, "{me}");
    assert_eq!(me["Twalk"]["count"], 1, "{me}");
    assert!(
        me["peer"].as_str().is_some_and(|p| p.contains("127.0.0.1")),
        "{me}"
    );
    live.close();
}
