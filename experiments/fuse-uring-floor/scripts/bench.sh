#!/bin/bash
# Mounts fuse_floor (fuser, 4 threads), fuse_uring_floor over /dev/fuse and over io_uring,
# then runs the 20,000-getxattr loop ROUNDS times per (pin, fs), alternating file systems.
# dev0 = /dev/fuse transport with a single server thread pinned to CPU 0.
# uringD = io_uring transport with IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN.
# Needs enable_uring=Y (set by the caller), this crate built (cargo build --release) and
# the workspace's fuse_floor example (cargo build --release -p crossfs-mount --example
# fuse_floor). Unmounts everything at the end.
set -u
B=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(cd "$B/../.." && pwd)
ROUNDS=${ROUNDS:-3}
FLOOR=$REPO/target/release/examples/fuse_floor
BIN=$B/target/release/fuse_uring_floor
mkdir -p $B/m_dev0 $B/m_floor $B/m_dev $B/m_uring $B/m_uringD
$FLOOR $B/m_floor 4 > $B/log_floor.txt 2>&1 & P1=$!
$BIN $B/m_dev dev > $B/log_dev.txt 2>&1 & P2=$!
$BIN $B/m_uring uring > $B/log_uring.txt 2>&1 & P3=$!
$BIN $B/m_dev0 dev 1 > $B/log_dev0.txt 2>&1 & P5=$!
DEFER=1 $BIN $B/m_uringD uring > $B/log_uringD.txt 2>&1 & P4=$!
sleep 1.5
for m in floor dev dev0 uring uringD; do python3 $B/scripts/loop.py $B/m_$m 2000 >/dev/null; done  # warm up
echo "start $(date -u +%T) $(uptime | sed 's/.*load/load/')"
for r in $(seq 1 $ROUNDS); do
  for pin in none 0 1; do
    line="round $r pin=$pin:"
    for m in floor dev dev0 uring uringD; do
      if [ $pin = none ]; then v=$(python3 $B/scripts/loop.py $B/m_$m)
      else v=$(taskset -c $pin python3 $B/scripts/loop.py $B/m_$m); fi
      line="$line $m=$v"
    done
    echo "$line"
  done
  echo "  after round $r $(date -u +%T) $(uptime | sed 's/.*load/load/'), rustc/cc1/ld procs: $(pgrep -c 'rustc|cc1|ld$')"
done
fusermount3 -u $B/m_floor || umount -l $B/m_floor
umount $B/m_dev || umount -l $B/m_dev
umount $B/m_uring || umount -l $B/m_uring
umount $B/m_uringD || umount -l $B/m_uringD
umount $B/m_dev0 || umount -l $B/m_dev0
sleep 0.5
wait $P1 $P2 $P3 $P4 $P5 2>/dev/null
tail -n2 $B/log_dev.txt $B/log_dev0.txt $B/log_uring.txt $B/log_uringD.txt
