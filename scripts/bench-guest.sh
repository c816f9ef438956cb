#!/usr/bin/env bash
# crossfs across a real VM boundary: `crossfs serve` on this machine, and in the QEMU guest
# of scripts/guest (TCG, so only ratios within one run count) the static binary mounts it
# over the harness's TCP forward from an /etc/fstab line (mount.crossfs), then runs
#   crossfs bench --quick --default-only --workloads seq-read,meta,negative,symlink
#       --compare across-the-vm=/src/bench
# whose targets are the guest's own directory (native: the initramfs), crossfs served and
# mounted inside the guest, and the mount of this machine's export. untar and tree need GNU
# tar and grep, which the busybox guest lacks. Prints the guest's table.
#
# Usage: scripts/bench-guest.sh        (as root; builds the static binary if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
bin=$(scripts/build-static 2>/dev/null | tail -n 1)
crossfs=$REPO/target/release/crossfs
[[ -x $crossfs ]] || cargo build --release >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/crossfs-bench-guest.XXXXXX")
server_pid=""
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/export"
cat >"$work/guest.sh" <<'GUEST'
set -e
printf 'root:x:0:0::/root:/bin/sh\n' > /etc/passwd; printf 'root:x:0:\n' > /etc/group
ln -s /bin/crossfs /sbin/mount.crossfs
mkdir -p /src /tmp/native
echo 'tcp:10.0.2.100:564 /src crossfs cache=auto,_netdev 0 0' > /etc/fstab
mount /src
mkdir -p /src/bench
crossfs bench --quick --default-only --workloads seq-read,meta,negative,symlink \
    --dir /tmp/native --compare across-the-vm=/src/bench 2>/dev/null
umount /src
GUEST
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$crossfs" serve "$work/export" --listen "tcp:127.0.0.1:$port" >"$work/serve.log" 2>&1 &
server_pid=$!
sleep 0.5
scripts/guest/run.sh --port "$port" --fwd socat --timeout 1200 --mem 1536 \
    --script "$work/guest.sh" --add "$bin:/bin/crossfs" | tr -d '\r' | sed -n '/^crossfs bench:/,/^total time/p'
