#!/usr/bin/env bash
# The virtio door against its peer, in the QEMU guest of scripts/guest (TCG, so only ratios
# count): the same small benchmark through
#   virtiofsd --cache auto | always | always --writeback
#                                      (the vhost-user-fs backend most VMMs ship)
#   crossfs serve --listen vhost-user-fs: --cache auto | always | always --writeback
#   the kernel's 9p client over crossfs serve --listen tcp: (msize 1 MiB)
# one guest boot per row, and prints a table (seconds; MB/s for the read and the write).
# crossfs runs with its defaults (change events on). The guest's passes, in order:
#   touch          `touch` of N new files (one xargs)
#   stat           `stat` of them at once: what the creates already answered
#   stat-cold      `stat` of them again, after dropping the guest's caches
#   neg1000        1,000 stats of one missing name
#   missing-again  `stat` of N missing names, the second of two passes (negative entries)
#   rm             `rm` of the N files
#   read64M        a 64 MiB sequential read, the guest's caches dropped first (--mib)
#   write64M       a 64 MiB sequential write of a new file in 1 MiB writes, and its fsync
# and after them server-cpu, the CPU seconds (user + system) the server process used over
# the whole boot (with --files 1 the metadata passes are next to nothing, and it is mostly
# the mount, the read and the write).
#
# Usage: scripts/bench-virtiofs.sh [--virtiofsd PATH] [--base PATH] [--files N] [--rows A,B,...]
#                                  [--repeat N]
#   --virtiofsd PATH   the virtiofsd binary (default: `virtiofsd` on PATH, else
#                      target/virtiofsd/bin/virtiofsd, where
#                      `cargo install --locked virtiofsd --version 1.14.0 --root target/virtiofsd`
#                      puts it (it needs libseccomp-dev and libcap-ng-dev to build), else
#                      QEMU's C virtiofsd, /usr/lib/qemu/virtiofsd (QEMU <= 8.0). Either
#                      kind works: the C one (told by its `--version`) gets its own flags
#                      (`--socket-path=`, `-o source=,cache=,writeback,sandbox=chroot`), and
#                      the guest starts only once its socket is listening. The table's
#                      first line names the one used.
#   --base PATH        another crossfs binary (the "before" of a change): each crossfs row
#                      is followed by the same row with it, named base-crossfs-...
#   --files N          files for the touch / stat / rm rows (default 2000)
#   --mib N            MiB read and written by the read / write rows (default 64; named
#                      readNM and writeNM)
#   --rows A,B,...     only these rows (names as printed; also crossfs-auto-noevents,
#                      crossfs serve --events off, not run by default)
#   --repeat N         run the rows N times, one line each, in turn (so that a slower
#                      minute of the machine spreads over every row; TCG figures vary by
#                      10-20% from boot to boot: compare medians)
# Needs root (virtiofsd, QEMU's memfd backend) and a release build of crossfs.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

virtiofsd="" base="" files=2000 mib=64 rows="" repeat=1
while (($#)); do
    case $1 in
        --virtiofsd) virtiofsd=$2; shift 2 ;;
        --base) base=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --mib) mib=$2; shift 2 ;;
        --rows) rows=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        *) echo "bench-virtiofs: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [[ -z $virtiofsd ]]; then
    for v in "$(command -v virtiofsd || true)" "$REPO/target/virtiofsd/bin/virtiofsd" /usr/lib/qemu/virtiofsd; do
        [[ -n $v && -x $v ]] && { virtiofsd=$v; break; }
    done
fi
[[ -n $virtiofsd && -x $virtiofsd ]] || { echo "bench-virtiofs: no virtiofsd (see the usage at the top of $0)" >&2; exit 1; }
# QEMU's C virtiofsd says "virtiofsd version 7.2.22 (Debian ...)"; the Rust one "virtiofsd 1.14.0".
c_virtiofsd=""
if "$virtiofsd" --version 2>&1 | grep -q "^virtiofsd version [0-9]*\.[0-9]*\.[0-9]* ("; then c_virtiofsd=1; fi
crossfs=$REPO/target/release/crossfs
[[ -x $crossfs ]] || { echo "bench-virtiofs: build crossfs first (cargo build --release)" >&2; exit 1; }
[[ -z $base || -x $base ]] || { echo "bench-virtiofs: --base $base is not an executable" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/crossfs-bench-virtiofs.XXXXXX")
server_pid=""
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The guest's workload. Times come from /proc/uptime (10 ms ticks): enough under TCG.
cat >"$work/guest.sh" <<EOF
set -e
FILES=$files
MIB=$mib
EOF
cat >>"$work/guest.sh" <<'EOF'
now() { read -r up _ </proc/uptime; echo "$up"; }
lap() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
if [ -f /test/9p ]; then
    mount -t 9p -o trans=tcp,port=564,version=9p2000.L,msize=1048576 10.0.2.100 /mnt
else
    mount -t virtiofs bench /mnt
    d=$(stat -c %d /mnt)
    echo 1024 > /sys/class/bdi/$(( (d >> 8) & 0xfff )):$(( (d & 0xff) | ((d >> 12) & 0xfff00) ))/read_ahead_kb
fi
mkdir /mnt/w && cd /mnt/w
seq 1 "$FILES" | sed "s/^/f/" > /tmp/names
t=$(now); xargs touch < /tmp/names; touch_s=$(lap "$t")
# The files just made: what the creates answered.
t=$(now); xargs stat -c %s < /tmp/names > /dev/null; stat_s=$(lap "$t")
sync; echo 3 > /proc/sys/vm/drop_caches
t=$(now); xargs stat -c %s < /tmp/names > /dev/null; cold_s=$(lap "$t")
t=$(now); i=0; while [ $i -lt 1000 ]; do stat /mnt/missing.h >/dev/null 2>&1 || true; i=$((i + 1)); done; neg_s=$(lap "$t")
# 2,000 missing names, once, then the timed pass again.
sed "s/^f/m/" /tmp/names > /tmp/missing
xargs stat -c %s < /tmp/missing > /dev/null 2>&1 || true
t=$(now); xargs stat -c %s < /tmp/missing > /dev/null 2>&1 || true; miss_s=$(lap "$t")
t=$(now); xargs rm < /tmp/names; rm_s=$(lap "$t")
cd /; sync; echo 3 > /proc/sys/vm/drop_caches
t=$(now); dd if=/mnt/big of=/dev/null bs=1M 2>/dev/null; read_s=$(lap "$t")
read_mbs=$(awk -v s="$read_s" -v m="$MIB" 'BEGIN { printf "%.0f", m / (s > 0 ? s : 0.01) }')
t=$(now); dd if=/dev/zero of=/mnt/written bs=1M count="$MIB" conv=fsync 2>/dev/null; write_s=$(lap "$t")
write_mbs=$(awk -v s="$write_s" -v m="$MIB" 'BEGIN { printf "%.0f", m / (s > 0 ? s : 0.01) }')
echo "RESULT touch=$touch_s stat=$stat_s stat-cold=$cold_s neg1000=$neg_s missing-again=$miss_s rm=$rm_s read${MIB}M=${read_mbs}MB/s write${MIB}M=${write_mbs}MB/s"
umount /mnt
EOF

export_dir=$work/export
run_row() {  # NAME, then the server command; the server must make $work/sock (or listen on TCP)
    local name=$1
    if [[ -n $rows ]]; then
        [[ ,$rows, == *,$name,* ]] || return 0
    elif [[ $name == *crossfs-auto-noevents ]]; then
        return 0
    fi
    run_once "$@"
}
run_once() {
    local name=$1; shift
    rm -rf "$export_dir" "$work/sock" "$work/9p"
    mkdir -p "$export_dir"
    head -c $((mib << 20)) /dev/zero >"$export_dir/big"
    "$@" >"$work/server-$name.log" 2>&1 &
    server_pid=$!
    local guest_args=()
    if [[ $name == 9p* || $name == base-9p* ]]; then
        touch "$work/9p"
        guest_args=(--add "$work/9p:/test/9p")
        for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
    else
        # Listening, not only made: QEMU connects once, at start (the socket's flags in
        # /proc/net/unix: 00010000 is listening). Never probe by connecting: a virtiofsd
        # serves its first connection only.
        for _ in $(seq 100); do
            awk -v p="$work/sock" '$8 == p && $4 == "00010000" { found = 1 } END { exit !found }' /proc/net/unix && break
            sleep 0.1
        done
        guest_args=(--virtiofs "$work/sock:bench")
    fi
    # The server's CPU time (user + system: /proc/PID/stat's utime and stime), sampled while
    # the guest runs, since virtiofsd exits with the VMM.
    local sampler
    (while kill -0 "$server_pid" 2>/dev/null; do
        cat "/proc/$server_pid/stat" >"$work/stat.new" 2>/dev/null && mv "$work/stat.new" "$work/stat"
        sleep 0.2
    done) &
    sampler=$!
    local out
    out=$(scripts/guest/run.sh --port "$port" --fwd socat --mem 768 --timeout 600 \
        --script "$work/guest.sh" "${guest_args[@]}" 2>&1) || { echo "$out" >&2; echo "bench-virtiofs: $name failed" >&2; exit 1; }
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    # Fields counted from after the ") " that ends the command name.
    local cpu
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' \
        "$work/stat" 2>/dev/null || echo 0)
    rm -f "$work/stat"
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    local result
    result=$(grep -a '^RESULT' <<<"$out" | sed 's/^RESULT //')
    printf '%-22s %s server-cpu=%s\n' "$name" "$result" "$cpu" | tee -a "$work/results"
}

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "guest: Debian kernel $(cat "${CROSSFS_GUEST_DIR:-$REPO/.guest-cache}/kernel-version" 2>/dev/null), QEMU TCG, 1 vCPU; $files files, $mib MiB; seconds unless noted"
run_virtiofsd() {  # CACHE [writeback]: virtiofsd on $work/sock, in the flags of its kind
    if [[ -n $c_virtiofsd ]]; then
        exec "$virtiofsd" --socket-path="$work/sock" -o source="$export_dir" -o cache="$1" \
            -o sandbox=chroot ${2:+-o writeback}
    else
        exec "$virtiofsd" --socket-path "$work/sock" --shared-dir "$export_dir" --cache "$1" \
            --sandbox none ${2:+--writeback}
    fi
}
echo "virtiofsd: $virtiofsd ($("$virtiofsd" --version 2>&1 | head -1))"
crossfs_row() {  # NAME, then serve's options: the row, then with --base its base-NAME row
    local name=$1; shift
    run_row "$name" "$crossfs" serve "$export_dir" "$@"
    if [[ -n $base ]]; then run_row "base-$name" "$base" serve "$export_dir" "$@"; fi
}
rows_once() {
    run_row virtiofsd-auto run_virtiofsd auto
    run_row virtiofsd-always run_virtiofsd always
    # Writeback caching, in both, only when asked for (--writeback).
    run_row virtiofsd-always-wb run_virtiofsd always writeback
    crossfs_row crossfs-auto --listen "vhost-user-fs:$work/sock" --cache auto
    crossfs_row crossfs-auto-noevents --listen "vhost-user-fs:$work/sock" --cache auto --events off
    crossfs_row crossfs-always --listen "vhost-user-fs:$work/sock" --cache always
    crossfs_row crossfs-always-wb --listen "vhost-user-fs:$work/sock" --cache always --writeback
    crossfs_row 9p-crossfs --listen "tcp:127.0.0.1:$port"
}
for ((r = 0; r < repeat; r++)); do rows_once; done
if ((repeat > 1)); then
    echo "median of $repeat boots:"
    # Each row's lines, each figure's median (the middle one; the lower of two).
    awk '{ rows[$1] = rows[$1] ? rows[$1] : ++n; name[rows[$1]] = $1; k = ++count[$1]
           for (i = 2; i <= NF; i++) { split($i, kv, "="); key[i] = kv[1]; v[$1, i, k] = kv[2] + 0
               unit[i] = kv[2] ~ /MB\/s$/ ? "MB/s" : "" }
           fields = NF }
         END { for (r = 1; r <= n; r++) { row = name[r]; line = sprintf("%-22s", row)
                 for (i = 2; i <= fields; i++) { m = count[row]
                     for (a = 1; a <= m; a++) s[a] = v[row, i, a]
                     for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
                     med = s[int((m + 1) / 2)]
                     line = line sprintf(" %s=%s%s", key[i], unit[i] ? sprintf("%.0f", med) : sprintf("%.2f", med), unit[i]) }
                 print line } }' "$work/results"
fi
