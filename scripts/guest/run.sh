#!/usr/bin/env bash
# Boot a throwaway Linux guest (QEMU, TCG) that runs one test script against
# a 9P server listening on the host, and exit with that script's status.
#
# Usage: run.sh --port PORT --script FILE [--add HOST:GUEST]... [--add-binary HOST:GUEST]...
#               [--fwd chardev|socat] [--timeout SECS] [--mem MB] [--log FILE] [--verbose]
#               [--virtiofs SOCKET:TAG]...
#
#   --port PORT        host TCP port (on 127.0.0.1) of the 9P server; the guest
#                      reaches it as 10.0.2.100:564
#   --script FILE      becomes /test/run.sh in the guest, run by busybox sh in /test
#   --add H:G          copy host file or directory H to guest path G
#   --add-binary H:G   copy a dynamically linked executable plus its shared
#                      libraries and the dynamic loader (found with ldd)
#   --fwd chardev      (default) QEMU itself connects once to PORT at startup;
#                      one 9P session per VM, see below
#   --fwd socat        one host connection per guest connection, made by a
#                      socat that QEMU spawns when the guest connects
#   --timeout SECS     limit for the guest script (default 60); the VM as a
#                      whole gets SECS+60 before it is killed
#   --mem MB           guest RAM (default 512)
#   --log FILE         keep the raw console log (kernel messages included)
#   --verbose          show the raw console instead of the filtered one
#   --virtiofs S:T     a vhost-user-fs-pci device (queue-size 1024) on the
#                      vhost-user socket S (which must be listening), tag T:
#                      the guest mounts it with `mount -t virtiofs T DIR`.
#                      Guest RAM becomes a shared memfd, as vhost-user needs.
#
# Exit status: the guest script's status; 124 if the VM never printed the
# exit marker (timeout, kernel panic, init failure); 2 for usage errors.
#
# Networking: QEMU user networking with restrict=on (the guest reaches nothing
# but the forward) and a guestfwd from 10.0.2.100:564 to 127.0.0.1:PORT.
# What holds, as observed with QEMU 7.2 / libslirp 4.7 (Debian 12):
#
# --fwd chardev: guestfwd=tcp:10.0.2.100:564-tcp:127.0.0.1:PORT
#   * The target is a QEMU chardev, opened once when QEMU starts: QEMU connects
#     to 127.0.0.1:PORT before the guest boots and refuses to start ("Could not
#     open guest forwarding device") if nothing listens there. The server sees
#     that connection seconds before the guest sends anything.
#   * That one host connection carries every guest connection to
#     10.0.2.100:564 and stays open until QEMU exits. A guest umount closes
#     the guest socket but the server sees no EOF; a later mount sends a fresh
#     Tversion down the same stream (diod treats it as a session reset, so
#     sequential mount/umount cycles work).
#   * Two guest connections at once do not work: server replies go to the
#     newest guest connection only, and I/O on the older mount hangs.
#   * If the server closes the connection, the next guest mount hangs (no
#     reconnect) until it gets SIGKILL.
#
# --fwd socat: guestfwd=tcp:10.0.2.100:564-cmd:socat - TCP:127.0.0.1:PORT
#   * libslirp spawns one socat per guest connection (on its stdin/stdout),
#     so each mount gets its own host connection, concurrent mounts work, and
#     umount closes it (the server sees EOF). The server need not listen when
#     QEMU starts; if it doesn't, the guest's connection is just closed.
#   * Not busybox nc: as a relay here it stalled on multi-MB reads (a 3 MiB
#     file read hung every time); socat never did.
#
# In both modes the server sees the peer as 127.0.0.1, and the guest's 9p
# waits are killable only by SIGKILL: use `timeout -s KILL` in guest scripts.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
GUEST_DIR="${CROSSFS_GUEST_DIR:-$REPO/.guest-cache}"
MARKER=CROSSFS-GUEST-EXIT

usage() { sed -n '/^# Usage:/,/^# Networking/{/^# Networking/d; s/^# \{0,1\}//; p}' "$0" >&2; exit 2; }
die() { echo "guest-run: error: $*" >&2; exit 2; }

port="" script="" timeout=60 mem=512 logfile="" verbose=0 fwd=chardev
adds=() bins=() virtiofs=()
while (($#)); do
    case "$1" in
        --port|--script|--add|--add-binary|--timeout|--mem|--log|--fwd|--virtiofs)
            if (($# < 2)) || [[ -z "$2" ]]; then die "$1 needs a value"; fi ;;
    esac
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --script) script="$2"; shift 2 ;;
        --add) adds+=("$2"); shift 2 ;;
        --add-binary) bins+=("$2"); shift 2 ;;
        --timeout) timeout="$2"; shift 2 ;;
        --mem) mem="$2"; shift 2 ;;
        --log) logfile="$2"; shift 2 ;;
        --fwd) fwd="$2"; shift 2 ;;
        --virtiofs) virtiofs+=("$2"); shift 2 ;;
        --verbose) verbose=1; shift ;;
        -h|--help) usage ;;
        *) echo "guest-run: unknown argument: $1" >&2; usage ;;
    esac
done
[[ "$port" =~ ^[0-9]+$ ]] || die "--port PORT is required (a number)"
[[ -n "$script" ]] || die "--script FILE is required"
[[ -f "$script" ]] || die "script not found: $script"
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"
[[ "$mem" =~ ^[0-9]+$ ]] || die "--mem must be a number of MB"
case "$fwd" in
    chardev) fwd_target="tcp:127.0.0.1:$port" ;;
    socat)
        command -v socat >/dev/null || die "--fwd socat needs socat (apt-get install socat)"
        fwd_target="cmd:$(command -v socat) - TCP:127.0.0.1:$port" ;;
    *) die "--fwd must be chardev or socat" ;;
esac

"$SCRIPT_DIR/build-image.sh" "$GUEST_DIR" || die "building the guest image failed"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/crossfs-guest-run.XXXXXX")"
qemu_pid=""
# shellcheck disable=SC2317  # invoked via trap
cleanup() {
    if [[ -n "$qemu_pid" ]]; then kill "$qemu_pid" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- per-run initramfs overlay ---------------------------------------------
# Appended to base.cpio.gz: the kernel unpacks concatenated archives in order.
S="$TMP/stage"
mkdir -p "$S/test"
cp "$script" "$S/test/run.sh"
chmod 755 "$S/test/run.sh"

split_spec() {  # HOST:GUEST -> host guest (guest path must be absolute)
    local spec="$1"
    host="${spec%%:*}" guest="${spec#*:}"
    [[ "$spec" == *:* && -n "$host" && "$guest" == /* ]] || die "bad spec '$spec' (want HOSTPATH:/GUESTPATH)"
    [[ -e "$host" ]] || die "not found: $host"
}
add_path() {  # copy $1 to guest path $2, following symlinks
    mkdir -p "$S$(dirname "$2")"
    cp -rL "$1" "$S$2"
}
for spec in ${adds[@]+"${adds[@]}"}; do
    split_spec "$spec"
    add_path "$host" "$guest"
done
for spec in ${bins[@]+"${bins[@]}"}; do
    split_spec "$spec"
    [[ -f "$host" && -x "$host" ]] || die "--add-binary: not an executable file: $host"
    add_path "$host" "$guest"
    # ldd lists "name => /path (addr)" for libraries and "/path (addr)" for
    # the loader; a static binary makes it fail, which is fine.
    if libs="$(ldd "$host" 2>/dev/null)"; then
        while read -r lib; do
            [[ -n "$lib" ]] || continue
            # Copy to the very path the loader/binary names; parent
            # directories become real directories in the guest.
            [[ -e "$S$lib" ]] || add_path "$lib" "$lib"
        done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs")
    fi
done
(cd "$S" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$TMP/run.cpio.gz"
cat "$GUEST_DIR/base.cpio.gz" "$TMP/run.cpio.gz" >"$TMP/initrd.gz"

# --- boot -------------------------------------------------------------------
raw="${logfile:-$TMP/console.log}"
: >"$raw"
# Prefer the uncompressed kernel (PVH entry): the bzImage's self-decompression
# costs ~7 s under TCG.
kernel="$GUEST_DIR/vmlinuz"
[[ -f "$GUEST_DIR/vmlinux" ]] && kernel="$GUEST_DIR/vmlinux"
# romfile=: skip the iPXE option ROM (not needed, saves boot time).
# shellcheck disable=SC2054  # commas belong to QEMU option values
qemu_cmd=(qemu-system-x86_64 -accel tcg -m "$mem" -smp 1 -nographic -no-reboot
    -kernel "$kernel" -initrd "$TMP/initrd.gz"
    -append "console=ttyS0 quiet panic=-1 crossfs.timeout=$timeout"
    -netdev "user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:564-$fwd_target"
    -device virtio-net-pci,netdev=n0,romfile=)
# vhost-user-fs devices: the backend maps guest memory, so it must be a shared memfd.
if ((${#virtiofs[@]})); then
    qemu_cmd+=(-object "memory-backend-memfd,id=mem,size=${mem}M,share=on" -numa node,memdev=mem)
    i=0
    for spec in "${virtiofs[@]}"; do
        sock="${spec%:*}" tag="${spec##*:}"
        [[ "$spec" == *:* && -S "$sock" && -n "$tag" ]] || die "--virtiofs: want SOCKET:TAG with a listening socket, got '$spec'"
        qemu_cmd+=(-chardev "socket,id=vfs$i,path=$sock"
            -device "vhost-user-fs-pci,queue-size=1024,chardev=vfs$i,tag=$tag")
        i=$((i + 1))
    done
fi

# Strip CRs, terminal escapes and timestamped kernel messages for display.
filter() {
    if ((verbose)); then
        sed -u 's/\r$//'
    else
        # SeaBIOS ends "Booting from ROM.." without a newline, so the guest's
        # first line lands on it: strip the prefix, keep the rest.
        sed -u -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' \
            -e '/^SeaBIOS /d; s/^Booting from ROM\.*//' \
            -e '/^\[ *[0-9]*\.[0-9]*\] /d; /^$/d'
    fi
}

start=$SECONDS
# stdin from /dev/null: keep QEMU's stdio chardev off the terminal.
# QEMU writes to the log file and tail streams it, so we hold QEMU's real pid
# (for cleanup) and the raw log survives for the marker check.
timeout -k 5 "$((timeout + 60))" "${qemu_cmd[@]}" </dev/null >"$raw" 2>&1 &
qemu_pid=$!
tail -n +1 -s 0.2 -f --pid="$qemu_pid" "$raw" | filter &
show_pid=$!
# `wait` (unlike a foreground pipeline) lets the INT/TERM trap run at once.
wait "$qemu_pid" || true
qemu_pid=""
wait "$show_pid" || true  # tail exits once QEMU is gone
elapsed=$((SECONDS - start))

status="$(tr -d '\r' <"$raw" | sed -n "s/.*$MARKER \([0-9][0-9]*\)\$/\1/p" | tail -n1)"
if [[ -z "$status" ]]; then
    echo "guest-run: error: guest never printed '$MARKER' after ${elapsed}s (VM timeout, QEMU error or kernel panic)." >&2
    if grep -q 'Could not open guest forwarding device' "$raw"; then
        echo "guest-run: QEMU could not connect to 127.0.0.1:$port; is the 9P server listening?" >&2
    fi
    panic="$(tr -d '\r' <"$raw" | grep -m1 'Kernel panic' || true)"
    [[ -z "$panic" ]] || echo "guest-run: guest kernel panicked: $panic" >&2
    echo "guest-run: last console lines:" >&2
    tr -d '\r' <"$raw" | tail -n 30 | sed 's/^/  | /' >&2
    exit 124
fi
echo "guest-run: guest exited $status after ${elapsed}s" >&2
exit "$status"
