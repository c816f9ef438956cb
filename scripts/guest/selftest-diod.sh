#!/usr/bin/env bash
# Prove the guest harness against a known-good 9P2000.L server (diod):
# serve a temp dir on 127.0.0.1, boot the guest, mount it over trans=tcp and
# over trans=fd, do file operations, then check the results from the host.
#
# Usage: selftest-diod.sh [--fwd chardev|socat] [--verbose]
#   (run as root; exits 0 on success; options go to run.sh)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "selftest-diod: error: $*" >&2; exit 1; }
run_args=() fwd=chardev
while (($#)); do
    case "$1" in
        --verbose) run_args+=(--verbose); shift ;;
        --fwd) fwd="${2:-}"; shift 2 || die "--fwd needs a value" ;;
        *) die "unknown argument: $1" ;;
    esac
done
[[ "$fwd" == chardev || "$fwd" == socat ]] || die "--fwd must be chardev or socat"
run_args+=(--fwd "$fwd")

if ! command -v diod >/dev/null && [[ ! -x /usr/sbin/diod ]]; then
    ((EUID == 0)) || die "diod is not installed (apt-get install diod)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends diod >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends diod >&2; } ||
        die "apt-get install diod failed"
fi
DIOD="$(command -v diod || echo /usr/sbin/diod)"
# diod serves files as the attaching user, which needs root's setfsuid.
((EUID == 0)) || die "run as root (diod must switch to the guest's uid 0)"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/crossfs-selftest.XXXXXX")"
diod_pid=""
cleanup() {
    if [[ -n "$diod_pid" ]]; then
        kill "$diod_pid" 2>/dev/null || true
        wait "$diod_pid" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

EXPORT="$TMP/export"
mkdir -p "$EXPORT"
# 3 MiB: larger than any msize, so reads and writes span many messages.
head -c $((3 * 1024 * 1024)) /dev/urandom >"$EXPORT/seed.bin"
echo "hello from the host" >"$EXPORT/hello.txt"
SEED_SHA="$(sha256sum "$EXPORT/seed.bin" | cut -d' ' -f1)"

# --- diod on a free loopback port -------------------------------------------------
listening() {
    if command -v ss >/dev/null; then
        ss -Htln "sport = :$1" | grep -q .
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}
port=""
for _ in 1 2 3 4 5; do
    p=$((20000 + RANDOM % 20000))
    listening "$p" && continue
    # -n no auth, -N no passwd/group lookups: the guest attaches as uname=root.
    "$DIOD" -f -n -N -l "127.0.0.1:$p" -e "$EXPORT" -L "$TMP/diod.log" &
    diod_pid=$!
    for _ in $(seq 50); do
        listening "$p" && { port=$p; break 2; }
        kill -0 "$diod_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$diod_pid" 2>/dev/null || true
    wait "$diod_pid" 2>/dev/null || true
    diod_pid=""
done
[[ -n "$port" ]] || { cat "$TMP/diod.log" >&2 2>/dev/null || true; die "could not start diod"; }
echo "selftest-diod: diod pid $diod_pid on 127.0.0.1:$port exporting $EXPORT" >&2

# --- guest script ---------------------------------------------------------------
# msize=1048576 is a request; the server may lower it (the line from
# /proc/mounts shows what was negotiated).
OPTS="version=9p2000.L,aname=$EXPORT,uname=root,msize=1048576"
{
    echo "OPTS='$OPTS' SEED_SHA='$SEED_SHA' FWD='$fwd'"
    cat <<'EOF'
pass=0 fail=0
check() {  # check DESCRIPTION COMMAND...
    desc="$1"; shift
    if "$@"; then pass=$((pass + 1)); echo "ok - $desc"
    else fail=$((fail + 1)); echo "not ok - $desc"; fi
}
sha() { sha256sum "$1" | cut -d' ' -f1; }

# trans=tcp
check "mount trans=tcp" mount -t 9p -o "trans=tcp,port=564,$OPTS" 10.0.2.100 /mnt
grep ' 9p ' /proc/mounts
check "read small file" grep -qx 'hello from the host' /mnt/hello.txt
check "read 3 MiB file intact" [ "$(sha /mnt/seed.bin)" = "$SEED_SHA" ]
check "mkdir" mkdir /mnt/dir
check "write file" cp /mnt/seed.bin /mnt/dir/copy.bin
check "written file reads back" [ "$(sha /mnt/dir/copy.bin)" = "$SEED_SHA" ]
check "create + append" sh -c 'echo one >/mnt/dir/log && echo two >>/mnt/dir/log'
check "appended content" [ "$(cat /mnt/dir/log)" = "$(printf 'one\ntwo')" ]
check "rename" mv /mnt/dir/log /mnt/dir/log.renamed
check "symlink" ln -s log.renamed /mnt/dir/link
check "readlink" [ "$(readlink /mnt/dir/link)" = log.renamed ]
check "chmod" chmod 640 /mnt/dir/log.renamed
check "stat mode" [ "$(stat -c %a /mnt/dir/log.renamed)" = 640 ]
check "truncate" truncate -s 10 /mnt/dir/copy.bin
check "size after truncate" [ "$(stat -c %s /mnt/dir/copy.bin)" = 10 ]
ls -la /mnt /mnt/dir
check "listing" [ "$(ls /mnt/dir | tr '\n' ' ')" = "copy.bin link log.renamed " ]
check "remove files" rm /mnt/dir/link /mnt/dir/copy.bin /mnt/dir/log.renamed
check "leave a file for the host" sh -c 'echo "written by the guest" >/mnt/dir/guest.txt'
check "statfs" df /mnt
check "umount" umount /mnt

# trans=fd: busybox nc -e runs the helper with the connected socket as fds 0/1.
cat >/tmp/fdmount <<EOS
#!/bin/sh
mount -t 9p -o trans=fd,rfdno=0,wfdno=1,$OPTS none /mnt
EOS
chmod +x /tmp/fdmount
check "mount trans=fd (second connection)" nc 10.0.2.100 564 -e /tmp/fdmount
grep ' 9p ' /proc/mounts
check "trans=fd read" grep -qx 'written by the guest' /mnt/dir/guest.txt
check "trans=fd rm + rmdir" sh -c 'rm /mnt/dir/guest.txt && rmdir /mnt/dir'
check "trans=fd write" sh -c 'echo fd >/mnt/fd.txt'
check "umount fd" umount /mnt

# Two mounts at once need one host connection per guest connection.
if [ "$FWD" = socat ]; then
    mkdir -p /mnt/a /mnt/b
    check "concurrent mount 1" mount -t 9p -o "trans=tcp,port=564,$OPTS" 10.0.2.100 /mnt/a
    check "concurrent mount 2" mount -t 9p -o "trans=tcp,port=564,$OPTS" 10.0.2.100 /mnt/b
    check "mount 2 sees mount 1's write" sh -c 'echo both >/mnt/a/both.txt && grep -qx both /mnt/b/both.txt'
    check "mount 1 still works" timeout -s KILL 20 rm /mnt/a/both.txt
    check "umount both" umount /mnt/a /mnt/b
fi

echo "guest: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
EOF
} >"$TMP/guest.sh"

# --- run ----------------------------------------------------------------------
set +e
"$SCRIPT_DIR/run.sh" --port "$port" --script "$TMP/guest.sh" --timeout 60 ${run_args[@]+"${run_args[@]}"} 2>&1 |
    tee "$TMP/out.log"
rc=${PIPESTATUS[0]}
set -e

# Host-side view of what the guest did.
hfail=0
[[ -f "$EXPORT/fd.txt" && "$(cat "$EXPORT/fd.txt")" == fd ]] || { echo "not ok - host sees fd.txt"; hfail=1; }
[[ ! -e "$EXPORT/dir" ]] || { echo "not ok - host sees dir removed"; hfail=1; }
[[ "$(sha256sum <"$EXPORT/seed.bin" | cut -d' ' -f1)" == "$SEED_SHA" ]] || { echo "not ok - seed unchanged"; hfail=1; }

msize="$(sed -n 's/.* 9p .*msize=\([0-9]*\).*trans=tcp.*/\1/p' "$TMP/out.log" | head -n1)"
echo "selftest-diod: negotiated msize (trans=tcp): ${msize:-unknown}"
if ((rc != 0 || hfail)); then
    echo "selftest-diod: FAILED (guest status $rc, host checks $((hfail ? 1 : 0)) failed); diod log:" >&2
    tail -n 20 "$TMP/diod.log" >&2 2>/dev/null || true
    exit 1
fi
echo "selftest-diod: PASSED"
