#!/usr/bin/env bash
# The virtiofsd row of docs/bench.md's anchor table for host changes in a virtiofs guest
# (issue #27): the host changes of tests/virtiofs_agent.rs (a create, a modify, a rename
# within and across directories, a chmod, a delete, a directory made with a file in it)
# under an inotify watcher in the QEMU guest (TCG) on a virtiofsd mount, and whether the
# guest then reads what the host has. crossfs's row comes from that test itself
# (CROSSFS_AGENT_ROUNDS=60 cargo test --release --test virtiofs_agent -- --nocapture).
#
# Usage: scripts/bench-agent-virtiofsd.sh [--virtiofsd PATH] [--cache auto|always]
#   --virtiofsd PATH   default: `virtiofsd` on PATH, else target/virtiofsd/bin/virtiofsd,
#                      else QEMU's own /usr/lib/qemu/virtiofsd (the C one, QEMU <= 8.0)
#   --cache MODE       virtiofsd's cache mode (default auto)
# Needs root and the guest image of scripts/guest.
set -euo pipefail
cd "$(dirname "$0")/.."

virtiofsd="" cache=auto
while (($#)); do
    case $1 in
        --virtiofsd) virtiofsd=$2; shift 2 ;;
        --cache) cache=$2; shift 2 ;;
        *) echo "bench-agent-virtiofsd: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [[ -z $virtiofsd ]]; then
    for v in "$(command -v virtiofsd || true)" target/virtiofsd/bin/virtiofsd /usr/lib/qemu/virtiofsd; do
        [[ -n $v && -x $v ]] && { virtiofsd=$v; break; }
    done
fi
[[ -x $virtiofsd ]] || { echo "bench-agent-virtiofsd: no virtiofsd (see --help)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/crossfs-agent-virtiofsd.XXXXXX")
server_pid=""
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

export_dir=$work/export
mkdir -p "$export_dir/sub"
echo original >"$export_dir/data.txt"
echo "renamed twice" >"$export_dir/a.txt"
echo x >"$export_dir/perm.txt"
echo x >"$export_dir/gone.txt"
cc -static -O2 -o "$work/inotify_watch" tests/scripts/inotify_watch.c

cat >"$work/guest.sh" <<'EOF'
mount -t virtiofs bench /mnt
inotify_watch /mnt /mnt/sub >/tmp/events &
until grep -q WATCHING /tmp/events; do sleep 0.1; done
cat /mnt/data.txt >/dev/null
ls /mnt /mnt/sub >/dev/null
touch /mnt/ready
# The host's changes take about 3 s; a watcher would have seen them long before this.
sleep 12
echo "=== events"
grep -v WATCHING /tmp/events || true
echo "=== after"
cat /mnt/data.txt
ls /mnt | tr '\n' ' '; echo
ls /mnt/sub | tr '\n' ' '; echo
EOF

if "$virtiofsd" --version 2>&1 | grep -q "^virtiofsd version [0-9]*\.[0-9]*\.[0-9]* ("; then
    # QEMU's C virtiofsd
    "$virtiofsd" --socket-path="$work/sock" -o source="$export_dir" -o cache="$cache" >"$work/server.log" 2>&1 &
else
    "$virtiofsd" --socket-path "$work/sock" --shared-dir "$export_dir" --cache "$cache" --sandbox none >"$work/server.log" 2>&1 &
fi
server_pid=$!
for _ in $(seq 100); do [[ -S $work/sock ]] && break; sleep 0.1; done

# The host's changes, 300 ms apart, once the guest is ready.
(
    for _ in $(seq 2400); do [[ -e $export_dir/ready ]] && break; sleep 0.1; done
    e=$export_dir
    step() { "$@"; sleep 0.3; }
    step sh -c "echo new >$e/new.txt"
    step sh -c "echo 'changed on the host' >$e/data.txt"
    step mv "$e/a.txt" "$e/b.txt"
    step mv "$e/b.txt" "$e/sub/b.txt"
    step chmod 600 "$e/perm.txt"
    step rm "$e/gone.txt"
    step sh -c "mkdir $e/newdir && echo inner >$e/newdir/inner.txt"
) &
changes=$!

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
out=$(scripts/guest/run.sh --port "$port" --fwd socat --mem 768 --timeout 120 \
    --script "$work/guest.sh" --add-binary "$work/inotify_watch:/usr/local/bin/inotify_watch" \
    --virtiofs "$work/sock:bench" 2>&1) || { echo "$out" >&2; exit 1; }
wait "$changes"

events=$(sed -n '/^=== events$/,/^=== after$/p' <<<"$out" | sed '1d;$d')
seen=0
for want in "CREATE /mnt/new.txt" "MODIFY /mnt/data.txt" "MOVED_TO /mnt/b.txt" \
    "MOVED_TO /mnt/sub/b.txt" "ATTRIB /mnt/perm.txt" "DELETE /mnt/gone.txt" "CREATE,ISDIR /mnt/newdir"; do
    grep -qx "$want" <<<"$events" && seen=$((seen + 1))
done
echo "virtiofsd: $("$virtiofsd" --version 2>&1 | head -1), --cache $cache"
echo "kinds seen by the guest's watcher: $seen of 7"
echo "events: ${events:-none}"
echo "after 12 s, the guest reads (data.txt; ls /mnt; ls /mnt/sub):"
sed -n '/^=== after$/,$p' <<<"$out" | sed '1d' | grep -v CROSSFS-GUEST-EXIT
