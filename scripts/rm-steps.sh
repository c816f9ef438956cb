#!/usr/bin/env bash
# What an `rm -rf` of a listed tree costs: a tree of 80 directories of 100 small files,
# made on a tmpfs export before each mount, listed through the mount (`ls -R`, which
# fills the directory replicas, as rm's own listing would), then removed through it.
# Alternates the default (exact) mount with `--changes behind`, ROUNDS times, and prints
# each removal's time (`rm -rf` and the `crossfs sync` after it), the FUSE requests the
# mount got for it, the removals it sent behind (files, directories), and the CPU stolen by other guests
# meanwhile. The crossfs binary: $CROSSFS, else this repository's release build.
#
#   sudo scripts/rm-steps.sh [ROUNDS]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crossfs=${CROSSFS:-${CARGO_TARGET_DIR:-$repo/target}/release/crossfs}
rounds=${1:-3}
tmp=$(mktemp -d)
mkdir "$tmp/export" "$tmp/mnt" "$tmp/src"
pids=()
cleanup() {
    umount "$tmp/mnt" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    umount "$tmp/export" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
mount -t tmpfs tmpfs "$tmp/export"
for d in $(seq 80); do
    mkdir -p "$tmp/src/t/d$d"
    for f in $(seq 100); do echo "file $d $f" >"$tmp/src/t/d$d/f$f"; done
done
tar -cf "$tmp/tree.tar" -C "$tmp/src" t
"$crossfs" serve "$tmp/export" --listen "unix:$tmp/s.sock" >"$tmp/serve.log" 2>&1 &
pids+=($!)
sleep 0.5
steal() { awk '/^cpu /{print $9}' /proc/stat; }
stat_of() { "$crossfs" stats "$tmp/mnt" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
for round in $(seq "$rounds"); do
    for mode in exact behind; do
        args=()
        [[ $mode == behind ]] && args=(--changes behind)
        tar -xf "$tmp/tree.tar" -C "$tmp/export"
        "$crossfs" mount "unix:$tmp/s.sock" "$tmp/mnt" "${args[@]}" >"$tmp/mount.log" 2>&1 &
        mount_pid=$!
        for _ in $(seq 100); do mountpoint -q "$tmp/mnt" && break; sleep 0.1; done
        "$crossfs" sync "$tmp/mnt"
        ls -R "$tmp/mnt" >/dev/null
        "$crossfs" sync "$tmp/mnt"
        fuse_before=$(stat_of "sum(v['count'] for v in d['fuse'].values())")
        s1=$(steal)
        t0=$(date +%s.%N)
        rm -rf "$tmp/mnt/t"
        "$crossfs" sync "$tmp/mnt"
        t1=$(date +%s.%N)
        s2=$(steal)
        fuse=$(($(stat_of "sum(v['count'] for v in d['fuse'].values())") - fuse_before))
        sent_behind() { stat_of "d.get('behind', {}).get('to_host', {}).get('$1', {}).get('count', 0)"; }
        printf '%d %-6s %.3f s  FUSE requests %d, Tunlinkbehind %d, Trmdirbehind %d, steal %d ticks\n' \
            "$round" "$mode" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$fuse" \
            "$(sent_behind Tunlinkbehind)" "$(sent_behind Trmdirbehind)" $((s2 - s1))
        umount "$tmp/mnt"
        wait "$mount_pid" || true
    done
done
