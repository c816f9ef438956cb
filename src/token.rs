//! The shared secret of `--token-file`, read the same way by `serve` and `mount`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{ensure, Context, Result};

/// The token in `path`: its bytes, less one trailing newline (`\n` or `\r\n`), so a file
/// written by `echo` or an editor works. Warns when others than the owner may read it.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    let mut token =
        std::fs::read(path).with_context(|| format!("reading token file {}", path.display()))?;
    if token.ends_with(b"\n") {
        token.pop();
        if token.ends_with(b"\r") {
            token.pop();
        }
    }
    ensure!(
        !token.is_empty() && token.len() <= 4096,
        "token file {} must hold 1 to 4096 bytes",
        path.display()
    );
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            "token file {} is readable by others than its owner (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        );
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trailing_newline_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        for (content, want) in [
            (&b"abc\n"[..], &b"abc"[..]),
            (b"abc\r\n", b"abc"),
            (b"abc", b"abc"),
            (b"abc\n\n", b"abc\n"),
        ] {
            let p = dir.path().join("t");
            std::fs::write(&p, content).unwrap();
            assert_eq!(read(&p).unwrap(), want);
        }
        let p = dir.path().join("empty");
        std::fs::write(&p, b"\n").unwrap();
        assert!(read(&p).is_err());
    }
}
