#!/usr/bin/env bash
# Run `crossfs bench` with sshfs and bindfs beside crossfs and native, on one export.
#
#   sudo scripts/bench-peers.sh [--tmpfs] [BENCH OPTIONS]      e.g. --quick, --json out.json
#
#   --tmpfs   put EXPORT on tmpfs (a new directory in /dev/shm, removed on exit) instead of
#             beside the rest in $TMPDIR: every target then works on memory, so the figures
#             show each layer's own cost without the disk's (ext4's journal, writeback).
#             The mount points, keys and sshd stay in $TMPDIR.
#
# Sets up, all under one temporary directory and all undone on exit:
#   - EXPORT, the directory every target works on (crossfs serves it, native is it);
#   - bindfs EXPORT MNT (libfuse passthrough: the cost of FUSE alone);
#   - sshfs over loopback: a private sshd on 127.0.0.1:PORT with a temporary host key,
#     client key and authorized_keys (the system's sshd and ~/.ssh are never touched);
# then runs
#   crossfs bench --dir EXPORT --compare sshfs=MNT1 --compare bindfs=MNT2 "$@"
# As root it installs what is missing (Debian: sshfs, openssh-server, bindfs).
# The crossfs binary: $CROSSFS, else `crossfs` on PATH, else the release build of this
# repository (under $CARGO_TARGET_DIR or target/).
set -euo pipefail

die() {
    echo "bench-peers: $*" >&2
    exit 1
}
note() { echo "bench-peers: $*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

find_crossfs() {
    if [[ -n ${CROSSFS:-} ]]; then
        echo "$CROSSFS"
    elif command -v crossfs >/dev/null; then
        command -v crossfs
    elif [[ -x ${CARGO_TARGET_DIR:-$repo/target}/release/crossfs ]]; then
        echo "${CARGO_TARGET_DIR:-$repo/target}/release/crossfs"
    else
        die "no crossfs binary: build it (cargo build --release) or set CROSSFS=/path/to/crossfs"
    fi
}

install_missing() {
    local missing=()
    command -v sshfs >/dev/null || missing+=(sshfs)
    command -v bindfs >/dev/null || missing+=(bindfs)
    [[ -x /usr/sbin/sshd ]] || missing+=(openssh-server)
    command -v ssh-keygen >/dev/null || missing+=(openssh-client)
    ((${#missing[@]} == 0)) && return
    if ((EUID != 0)); then
        die "missing ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root"
    fi
    note "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --tmpfs is ours; everything else goes to crossfs bench.
tmpfs=0
bench_args=()
for arg in "$@"; do
    if [[ $arg == --tmpfs ]]; then
        tmpfs=1
    else
        bench_args+=("$arg")
    fi
done

work=""
shm_export=""
sshd_pid=""
mounted=()
made_privsep=0

cleanup() {
    local status=$?
    set +e
    for mnt in "${mounted[@]}"; do
        fusermount3 -u "$mnt" 2>/dev/null || fusermount -u "$mnt" 2>/dev/null ||
            umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
    done
    if [[ -n $sshd_pid ]]; then
        kill "$sshd_pid" 2>/dev/null
        wait "$sshd_pid" 2>/dev/null
    fi
    if ((made_privsep)); then
        rmdir /run/sshd 2>/dev/null
    fi
    # Only if nothing is still mounted below it: never delete through a mount.
    for dir in "$work" "$shm_export"; do
        [[ -n $dir ]] || continue
        if ! grep -qF " $dir/" /proc/self/mounts; then
            rm -rf "$dir"
        else
            note "left $dir: something is still mounted there"
        fi
    done
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

crossfs=$(find_crossfs)
install_missing

work=$(mktemp -d "${TMPDIR:-/tmp}/crossfs-bench-peers.XXXXXX")
export_dir=$work/export
if ((tmpfs)); then
    [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]] || die "--tmpfs: /dev/shm is not a tmpfs here"
    shm_export=$(mktemp -d /dev/shm/crossfs-bench-peers-export.XXXXXX)
    chmod 755 "$shm_export" # as the export beside the rest would be (mktemp makes 700)
    export_dir=$shm_export
fi
mnt_sshfs=$work/mnt-sshfs
mnt_bindfs=$work/mnt-bindfs
mkdir -p "$export_dir" "$mnt_sshfs" "$mnt_bindfs" "$work/ssh"
chmod 700 "$work/ssh"

# bindfs: a plain passthrough of the export.
bindfs "$export_dir" "$mnt_bindfs"
mounted+=("$mnt_bindfs")

# A private sshd on loopback, only for this run.
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/client_key"
cp "$work/ssh/client_key.pub" "$work/ssh/authorized_keys"
user=$(id -un)
if [[ ! -d /run/sshd ]]; then
    # sshd's privilege separation directory; removed again on exit.
    mkdir -p /run/sshd
    chmod 755 /run/sshd
    made_privsep=1
fi

ssh_opts=(-o IdentityFile="$work/ssh/client_key" -o IdentitiesOnly=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
    -o BatchMode=yes)
sftp_server=internal-sftp
[[ -x /usr/lib/openssh/sftp-server ]] && sftp_server=/usr/lib/openssh/sftp-server
port=""
for _ in 1 2 3 4 5 6 7 8; do
    try=$((20000 + RANDOM % 40000))
    cat >"$work/ssh/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $try
HostKey $work/ssh/host_key
PidFile $work/ssh/sshd.pid
AuthorizedKeysFile $work/ssh/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers $user
StrictModes no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
Subsystem sftp $sftp_server
LogLevel ERROR
EOF
    /usr/sbin/sshd -D -e -f "$work/ssh/sshd_config" 2>>"$work/ssh/sshd.log" &
    sshd_pid=$!
    for _ in $(seq 50); do
        if ssh "${ssh_opts[@]}" -p "$try" "$user@127.0.0.1" true 2>/dev/null; then
            port=$try
            break 2
        fi
        kill -0 "$sshd_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$sshd_pid" 2>/dev/null
    wait "$sshd_pid" 2>/dev/null || true
    sshd_pid=""
done
[[ -n $port ]] || die "could not start a private sshd on loopback: $(tail -3 "$work/ssh/sshd.log")"

sshfs_opts="IdentityFile=$work/ssh/client_key,IdentitiesOnly=yes,StrictHostKeyChecking=no"
sshfs_opts+=",UserKnownHostsFile=/dev/null,LogLevel=ERROR,BatchMode=yes,port=$port"
# Debian's sshfs rejects symlink targets containing ".." by default (EPERM), a guard
# against hostile servers; this one is our own, and source trees use such links.
if sshfs --help 2>&1 | grep -q no_contain_symlinks; then
    sshfs_opts+=",no_contain_symlinks"
fi
sshfs -o "$sshfs_opts" "$user@127.0.0.1:$export_dir" "$mnt_sshfs"
mounted+=("$mnt_sshfs")

note "export $export_dir$( ((tmpfs)) && echo ' (tmpfs)'); sshfs on $mnt_sshfs (sshd on 127.0.0.1:$port); bindfs on $mnt_bindfs"
"$crossfs" bench --dir "$export_dir" --compare "sshfs=$mnt_sshfs" --compare "bindfs=$mnt_bindfs" \
    ${bench_args[@]+"${bench_args[@]}"}
