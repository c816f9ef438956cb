#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine (run as root): real peers and
# tools the tests start for real — QEMU and busybox for the kernel-client guest, diod as a
# second 9P server, inotify-tools, the py9p client from PyPI, and the conformance and
# data-integrity suites (pjdfstest and fsx from crates.io, fio and stress-ng from Debian), and
# cargo-fuzz for scripts/fuzz (which also needs the nightly toolchain: it says so if missing),
# and man-db, whose man -w tests/install.rs asks where the package put its pages.
# Idempotent.
set -euo pipefail

packages=(qemu-system-x86 busybox-static cpio kmod diod inotify-tools python3-venv git gcc libc6-dev make fuse3 socat fio stress-ng man-db)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "install-test-deps: missing packages ${missing[*]} and not root; install them first" >&2
        exit 1
    fi
    echo "install-test-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        apt-get install -y -q "${missing[@]}" >/dev/null
    }
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/target/py9p-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import py9p' 2>/dev/null; then
    echo "install-test-deps: installing p9fs (py9p) into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q p9fs==0.0.4
fi

# Test programs from crates.io, pinned: skipped when that version is already installed.
cargo_tool() {
    local name=$1 version=$2
    local bin="${CARGO_HOME:-$HOME/.cargo}/bin/$name"
    if [[ -x $bin ]] && [[ $("$bin" --version 2>/dev/null) == "$name $version" ]]; then
        return
    fi
    echo "install-test-deps: cargo install $name $version"
    cargo install --locked --quiet --version "=$version" "$name"
}
cargo_tool pjdfstest 0.2.2
cargo_tool fsx 0.3.2
cargo_tool cargo-fuzz 0.13.2

# pjdfstest switches to the users nobody (in every Debian) and tests.
if ! id tests >/dev/null 2>&1; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "install-test-deps: pjdfstest needs a user \"tests\"; run as root" >&2
        exit 1
    fi
    useradd --system --no-create-home --user-group --shell /usr/sbin/nologin tests
fi

# The kernel 9p client runs in a QEMU guest; build its kernel and initramfs once.
"$repo/scripts/guest/build-image.sh"
