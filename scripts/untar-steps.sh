#!/usr/bin/env bash
# Where an untar's time goes: extracts one tarball natively and through a crossfs mount,
# both on tmpfs (so the disk does not decide), and prints the times, the FUSE requests the
# mount got and the 9P requests it sent, which FUSE transport served them, and the changes
# it sent behind.
#
#   sudo scripts/untar-steps.sh [-- MOUNT-OPTIONS...]
#   sudo scripts/untar-steps.sh -- --changes behind
#   sudo UNTAR_AS=65534 scripts/untar-steps.sh -- --changes behind
#
# The tarball: 400 directories of 20 files of 100-800 bytes (8,421 entries), made once in
# the work directory. Prints the CPU idle settings first: in a VM, waking an idle CPU is
# most of what a FUSE request costs (docs/bench.md, "Why a FUSE request costs what it
# does"). The crossfs binary: $CROSSFS, else this repository's release build.
#
# With UNTAR_AS=UID, both untars run as that user (and its group: `setpriv`, no other
# groups) into a directory anyone may write in, as a guest's user does through a root
# server, which makes every file as itself and gives it away after.
#
# With FUSE_TRACE=1, the kernel's fuse tracepoints (tracefs) time each FUSE request of the
# crossfs untar, from the kernel queueing it to the mount's answer reaching the kernel, and
# the script prints the count and mean per opcode (the tracing itself adds a little).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crossfs=${CROSSFS:-${CARGO_TARGET_DIR:-$repo/target}/release/crossfs}
[[ ${1:-} == -- ]] && shift
tmp=$(mktemp -d)
pids=()
cleanup() {
    umount "$tmp/mnt" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    umount "$tmp/export" "$tmp/native" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "cpus: $(nproc); cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none);" \
    "guest_halt_poll_ns: $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo -);" \
    "mount options: ${*:-none}"
mkdir "$tmp/export" "$tmp/native" "$tmp/mnt" "$tmp/src"
mount -t tmpfs tmpfs "$tmp/export"
mount -t tmpfs tmpfs "$tmp/native"
python3 - "$tmp/src" <<'EOF'
import os, sys
root = sys.argv[1]
for d in range(400):
    p = f"{root}/pkg/d{d // 20}/e{d}"
    os.makedirs(p, exist_ok=True)
    for f in range(20):
        with open(f"{p}/f{f}.js", "w") as out:
            out.write("x" * (100 + 37 * f))
EOF
tar -C "$tmp/src" -cf "$tmp/tree.tar" pkg

"$crossfs" serve "$tmp/export" --listen "unix:$tmp/s.sock" --control "$tmp/serve.ctl" \
    2>"$tmp/serve.log" &
pids+=($!)
for _ in $(seq 100); do [[ -S $tmp/serve.ctl ]] && break; sleep 0.05; done
"$crossfs" mount "unix:$tmp/s.sock" "$tmp/mnt" --control "$tmp/mount.ctl" "$@" \
    2>"$tmp/mount.log" &
pids+=($!)
for _ in $(seq 100); do [[ -S $tmp/mount.ctl ]] && break; sleep 0.05; done

seconds() {
    local start end
    start=$(date +%s.%N)
    "$@"
    end=$(date +%s.%N)
    python3 -c "print(f'{$end - $start:.2f}')"
}
trace=/sys/kernel/tracing
fuse_trace() {
    [[ ${FUSE_TRACE:-} == 1 ]] || return 0
    if [[ ! -d $trace/events/fuse ]]; then
        echo "FUSE_TRACE: no fuse tracepoints under $trace" >&2
        return 0
    fi
    case $1 in
    on)
        echo 65536 >"$trace/buffer_size_kb"
        echo >"$trace/trace"
        echo 1 >"$trace/events/fuse/enable"
        echo 1 >"$trace/tracing_on"
        ;;
    off)
        echo 0 >"$trace/events/fuse/enable"
        grep -v '^#' "$trace/trace" >"$tmp/fuse.trace"
        echo >"$trace/trace"
        ;;
    esac
}
into_native=$tmp/native into_mount=$tmp/mnt as=()
if [[ -n ${UNTAR_AS:-} ]]; then
    as=(setpriv --reuid "$UNTAR_AS" --regid "$UNTAR_AS" --clear-groups --)
    chmod 755 "$tmp"
    chmod 644 "$tmp/tree.tar"
    into_native=$tmp/native/u into_mount=$tmp/mnt/u
    mkdir "$into_native" "$into_mount"
    chmod 1777 "$into_native" "$into_mount"
fi
echo "native untar: $(seconds "${as[@]}" tar -C "$into_native" -xf "$tmp/tree.tar") s"
trap 'fuse_trace off; cleanup' EXIT
fuse_trace on
echo "crossfs untar: $(seconds "${as[@]}" tar -C "$into_mount" -xf "$tmp/tree.tar") s"
fuse_trace off
trap cleanup EXIT
echo "then crossfs sync: $(seconds "$crossfs" sync "$tmp/mnt") s"
if [[ -s $tmp/fuse.trace ]]; then
    python3 - "$tmp/fuse.trace" <<'EOF'
import collections, re, sys
line = re.compile(r" (\d+\.\d+): fuse_request_(send|end): connection (\d+) req (\d+)"
                  r"(?: opcode \d+ \((\w+)\))?")
sent, total, count = {}, collections.Counter(), collections.Counter()
for l in open(sys.argv[1]):
    m = line.search(l)
    if not m:
        continue
    t, key = float(m[1]), (m[3], m[4])
    if m[2] == "send":
        sent[key] = (t, m[5])
    elif key in sent:
        t0, op = sent.pop(key)
        total[op] += t - t0
        count[op] += 1
print(f"FUSE requests as the kernel timed them: {sum(count.values())},"
      f" {sum(total.values()):.2f} s waiting in all")
for op, n in count.most_common():
    print(f"  {op}: {n}, mean {total[op] / n * 1e6:.1f} us")
EOF
fi

"$crossfs" stats "$tmp/mount.ctl" --json | python3 -c '
import json, sys
m = json.load(sys.stdin)
print("FUSE requests:", {k: v["count"] for k, v in sorted(m["fuse"].items())})
print("9P requests:", {k: v["count"] for k, v in sorted(m["9p"].items()) if k.startswith("T")})
print("FUSE transport:", m.get("fuse_transport", {}))
b = m.get("behind", {})
if b.get("sent"):
    print("sent behind:", b["sent"], "refused:", b["refused"],
          "to the host p50/p99 us:", {k: (v["p50_us"], v["p99_us"]) for k, v in b["to_host"].items()})'
