//! Running the external programs of the build and git workloads.

use std::path::Path;
use std::process::{Command, Output};

use crate::error::WorkloadError;

/// Whether `tool` is an executable file somewhere on `PATH`.
pub(crate) fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(tool))
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Run `cmd` in `dir` to completion; a non-zero exit is an error carrying the
/// end of what the command printed, and a missing program is `ToolMissing`.
pub(crate) fn run(cmd: &mut Command, dir: &Path) -> Result<Output, WorkloadError> {
    let shown = describe(cmd);
    let output = cmd.current_dir(dir).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() {
            WorkloadError::io(format!("running `{shown}` in {}", dir.display()), e)
        } else if e.kind() == std::io::ErrorKind::NotFound {
            WorkloadError::ToolMissing {
                tool: cmd.get_program().to_string_lossy().into_owned(),
            }
        } else {
            WorkloadError::io(format!("running `{shown}`"), e)
        }
    })?;
    if output.status.success() {
        return Ok(output);
    }
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    Err(WorkloadError::Command {
        command: shown,
        status: output.status.to_string(),
        output: tail(text.trim(), 600),
    })
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `max` bytes of `s` (on a char boundary): errors come at the end.
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_is_reported_as_such() {
        let dir = std::env::temp_dir();
        let err = run(&mut Command::new("crossfs-bench-no-such-tool"), &dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not run: crossfs-bench-no-such-tool not found"
        );
        assert!(!on_path("crossfs-bench-no-such-tool"));
        assert!(on_path("sh"));
    }

    #[test]
    fn failure_carries_output() {
        let dir = std::env::temp_dir();
        let err = run(
            Command::new("sh").args(["-c", "echo boom >&2; exit 3"]),
            &dir,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("boom") && text.contains('3'), "{text}");
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("abcdef", 3), "...def");
        assert_eq!(tail("abc", 3), "abc");
        assert_eq!(tail("ééé", 3), "...é");
    }
}
