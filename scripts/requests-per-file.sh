#!/usr/bin/env bash
# What each created file costs a fresh mount, in FUSE requests by opcode and 9P requests by
# type, and the 9P requests' latencies: `tar -xf` of N small files (tar's openat(O_CREAT|
# O_EXCL), write, utimensat, fchown, fchmod, close for each), or with WORKLOAD=create, N
# files opened with O_CREAT and closed (the bench's create), into one directory.
#
#   sudo scripts/requests-per-file.sh [N]            (default 1000)
#   sudo WORKLOAD=create scripts/requests-per-file.sh
#
# The export is a new directory in /dev/shm (tmpfs), served over a unix socket and mounted
# with the defaults (MOUNT_ARGS adds options); counts are `crossfs stats --json` before and
# after, divided by N; the wall time is the extraction's; the latencies cover the mount's
# whole life (the workload, and a few requests before it). The crossfs binary: $CROSSFS,
# else this repository's release build.
set -euo pipefail

n=${1:-1000}
workload=${WORKLOAD:-tar}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crossfs=${CROSSFS:-${CARGO_TARGET_DIR:-$repo/target}/release/crossfs}
read -r -a mount_args <<<"${MOUNT_ARGS:-}"
tmp=$(mktemp -d /dev/shm/crossfs-per-file.XXXXXX)
pids=()
cleanup() {
    umount "$tmp/mnt" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/export" "$tmp/mnt" "$tmp/src/t"
for i in $(seq 1 "$n"); do echo "file $i" >"$tmp/src/t/f$i"; done
chmod 640 "$tmp"/src/t/f*
tar -C "$tmp/src" -cf "$tmp/t.tar" t
"$crossfs" serve -q "$tmp/export" --listen "unix:$tmp/s.sock" --control "$tmp/serve.ctl" &
pids+=($!)
for _ in $(seq 50); do [[ -S $tmp/s.sock ]] && break; sleep 0.1; done
"$crossfs" mount -q "unix:$tmp/s.sock" "$tmp/mnt" --control "$tmp/mount.ctl" "${mount_args[@]}" &
pids+=($!)
for _ in $(seq 100); do mountpoint -q "$tmp/mnt" && break; sleep 0.1; done
"$crossfs" sync "$tmp/mnt"
"$crossfs" stats --json "$tmp/mount.ctl" >"$tmp/before.json"
start=$(date +%s%N)
case $workload in
tar) tar -C "$tmp/mnt" -xf "$tmp/t.tar" ;;
create)
    mkdir "$tmp/mnt/t"
    python3 -c "
import sys
for i in range(int(sys.argv[2])):
    open('%s/f%d' % (sys.argv[1], i), 'w').close()" "$tmp/mnt/t" "$n"
    ;;
*) echo "WORKLOAD: tar or create" >&2; exit 2 ;;
esac
end=$(date +%s%N)
"$crossfs" stats --json "$tmp/mount.ctl" >"$tmp/after.json"
"$crossfs" stats --json "$tmp/serve.ctl" >"$tmp/serve.json"
python3 - "$tmp" "$n" "$workload" "$(((end - start) / 1000))" <<'PY'
import json, sys
tmp, n, workload, us = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
b = json.load(open(f"{tmp}/before.json"))
a = json.load(open(f"{tmp}/after.json"))
s = json.load(open(f"{tmp}/serve.json"))
print(f"{workload}: {n} files, {us / n:.0f} us a file")
for sec in ("fuse", "9p"):
    rows, total = [], 0
    for k, v in sorted(a[sec].items()):
        if not isinstance(v, dict) or "count" not in v or (sec == "9p" and not k.startswith("T")):
            continue
        d = v["count"] - b[sec].get(k, {}).get("count", 0)
        if d:
            rows.append(f"{k} {d / n:.2f}")
            total += d
    print(f"{sec}: {total / n:.2f} a file: " + ", ".join(rows))
print("9P latency, mean (p50) in us: client | server reply = queued + exec")
sl = s["latency"]
for k, v in sorted(a["latency"]["reply"].items()):
    if v["count"] < n / 2:
        continue
    r, q, e = (sl[x].get(k, {}) for x in ("reply", "queued", "exec"))
    f = lambda h: f"{h['mean_us']:.0f} ({h['p50_us']:.0f})" if h else "-"
    print(f"  {k}: {f(v)} | {f(r)} = {f(q)} + {f(e)}")
PY
