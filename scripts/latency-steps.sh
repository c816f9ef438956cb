#!/usr/bin/env bash
# What one stat, create, chmod (setattr) and 4 KiB read cost, step by step: the program's
# time per call, the mount's client time per 9P request (written to answered) and the
# server's (read to answered, split into waiting for a worker and the handler).
#
#   sudo scripts/latency-steps.sh [N]        N calls of each (default 2000)
#   sudo SAME_CPU=1 scripts/latency-steps.sh  everything on CPU 0: no wake-up crosses CPUs
#
# Serves a temporary directory with `crossfs serve` over a unix socket, mounts it with
# `crossfs mount --cache never` (every call reaches the server), runs the calls from
# python, then prints `crossfs stats --json` of both as a table (medians in microseconds).
# A second mount (the default mode) times a FUSE request the mount answers itself (a
# `getxattr` of `security.capability` on a file it created: no 9P request), which is the
# kernel's and the mount's share of every call. First it prints the CPU idle settings that
# decide what waking an idle CPU costs in a VM (`cpuidle_haltpoll`'s poll time), and after
# the calls, which FUSE transport served them (io_uring where the kernel offers it:
# /sys/module/fuse/parameters/enable_uring, and MOUNT_ARGS=--io-uring; /dev/fuse by default).
# The crossfs binary: $CROSSFS, else this repository's release build.
set -euo pipefail

n=${1:-2000}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crossfs=${CROSSFS:-${CARGO_TARGET_DIR:-$repo/target}/release/crossfs}
tmp=$(mktemp -d)
pids=()
pin=()
[[ ${SAME_CPU:-0} == 1 ]] && pin=(taskset -c 0)
read -r -a mount_args <<<"${MOUNT_ARGS:-}"
cleanup() {
    umount "$tmp/mnt" "$tmp/mnt2" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "cpus: $(nproc); cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none);" \
    "guest_halt_poll_ns: $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo -)" \
    "${pin[*]:+(everything on CPU 0)}"
mkdir "$tmp/export" "$tmp/mnt" "$tmp/mnt2"
head -c 4096 /dev/zero >"$tmp/export/data"
"${pin[@]}" "$crossfs" serve "$tmp/export" --listen "unix:$tmp/s.sock" --control "$tmp/serve.ctl" \
    2>"$tmp/serve.log" &
pids+=($!)
for _ in $(seq 100); do [[ -S $tmp/serve.ctl ]] && break; sleep 0.05; done
"${pin[@]}" "$crossfs" mount "unix:$tmp/s.sock" "$tmp/mnt" --cache never --control "$tmp/mount.ctl" "${mount_args[@]}" \
    2>"$tmp/mount.log" &
pids+=($!)
"${pin[@]}" "$crossfs" mount "unix:$tmp/s.sock" "$tmp/mnt2" --control "$tmp/mount2.ctl" "${mount_args[@]}" \
    2>"$tmp/mount2.log" &
pids+=($!)
for _ in $(seq 100); do [[ -S $tmp/mount.ctl && -S $tmp/mount2.ctl ]] && break; sleep 0.05; done

"${pin[@]}" python3 - "$tmp/mnt" "$n" "$tmp/mnt2" <<'EOF'
import os, sys, time
mnt, n, mnt2 = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = os.path.join(mnt, "data")
def per_call(label, f):
    t = time.perf_counter()
    for i in range(n):
        f(i)
    print(f"{label:<28} {(time.perf_counter() - t) / n * 1e6:8.1f} us per call (mean)")
per_call("stat", lambda i: os.stat(data))
per_call("create (open O_CREAT, close)", lambda i: os.close(os.open(f"{mnt}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)))
per_call("chmod", lambda i: os.chmod(f"{mnt}/f{i}", 0o600))
fd = os.open(data, os.O_RDONLY)
per_call("pread 4 KiB", lambda i: os.pread(fd, 4096, 0))
os.close(fd)
created = os.path.join(mnt2, "created")
os.close(os.open(created, os.O_CREAT | os.O_WRONLY, 0o644))
def missing_capability(i):
    try:
        os.getxattr(created, "security.capability")
    except OSError:
        pass
per_call("FUSE only (getxattr)", missing_capability)
EOF
"$crossfs" stats "$tmp/mount2.ctl" --json | python3 -c '
import json, sys
stats = json.load(sys.stdin)
sent = stats["9p"].get("Txattrwalk", {}).get("count", 0)
t = stats.get("fuse_transport", {})
ring, queues, dev = (t.get(k, 0) for k in ("io_uring", "io_uring_queues", "dev_fuse"))
print(f"(the default mount sent {sent} Txattrwalk for those calls; FUSE requests through "
      f"io_uring {ring} on {queues} queues, through /dev/fuse {dev})")'

"$crossfs" stats "$tmp/serve.ctl" --json >"$tmp/serve.json"
"$crossfs" stats "$tmp/mount.ctl" --json >"$tmp/mount.json"
python3 - "$tmp/serve.json" "$tmp/mount.json" <<'EOF'
import json, sys
server, client = (json.load(open(p))["latency"] for p in sys.argv[1:])
print(f"{'request':<14} {'count':>7} {'client p50':>11} {'server p50':>11} "
      f"{'queued p50':>11} {'exec p50':>9} {'client p99':>11} {'server p99':>11}")
for name, c in sorted(client["reply"].items()):
    s = server["reply"].get(name, {})
    q = server["queued"].get(name, {})
    e = server["exec"].get(name, {})
    print(f"{name:<14} {c['count']:>7} {c['p50_us']:>11} {s.get('p50_us', '-'):>11} "
          f"{q.get('p50_us', '-'):>11} {e.get('p50_us', '-'):>9} {c['p99_us']:>11} "
          f"{s.get('p99_us', '-'):>11}")
EOF
