//! The manual pages and shell completions come from the same clap definitions as `--help`:
//! every subcommand is in crossfs(1), each subcommand has its page, and the completion
//! scripts know the subcommands and their flags.

mod common;

use std::process::Command;

use common::*;

fn crossfs(args: &[&str]) -> String {
    String::from_utf8(run_ok(Command::new(crossfs_bin()).args(args)).stdout).unwrap()
}

const SUBCOMMANDS: [&str; 10] = [
    "serve",
    "virtiofsd",
    "mount",
    "stats",
    "bench",
    "watch",
    "sync",
    "agent",
    "completions",
    "man",
];

#[test]
fn the_manual_names_every_subcommand_and_each_has_a_page() {
    let page = crossfs(&["man"]);
    assert!(page.contains(".TH crossfs 1"), "{page}");
    for sub in SUBCOMMANDS {
        assert!(
            page.contains(&format!("crossfs\\-{sub}")),
            "crossfs(1) lists {sub}"
        );
    }
    let mount = crossfs(&["man", "mount"]);
    assert!(mount.contains(".TH crossfs-mount 1"), "{mount}");
    assert!(mount.contains("\\-\\-private") && mount.contains("\\-\\-replica\\-entries"));
    let out = Command::new(crossfs_bin())
        .args(["man", "nonsense"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn completions_know_the_subcommands_and_their_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = crossfs(&["completions", shell]);
        for needle in ["mount", "serve", "replica-entries", "allow-other"] {
            assert!(script.contains(needle), "{shell} completion lacks {needle}");
        }
    }
}
