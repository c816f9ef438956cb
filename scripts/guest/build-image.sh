#!/usr/bin/env bash
# Build the cached guest image used by scripts/guest/run.sh:
#   OUTDIR/vmlinuz        Debian's stock amd64 kernel (bzImage)
#   OUTDIR/vmlinux        the same kernel uncompressed, if it can boot via PVH
#   OUTDIR/base.cpio.gz   busybox initramfs + the modules for virtio-net, 9p, fuse
#   OUTDIR/kernel-version the kernel release the image was built from
#
# Usage: build-image.sh [OUTDIR]      (default: $CROSSFS_GUEST_DIR or <repo>/.guest-cache)
# Env:   CROSSFS_GUEST_REBUILD=1      rebuild even if the cache looks fresh
#        CROSSFS_GUEST_KERNEL_PKG=P   use kernel package P instead of what
#                                     linux-image-amd64 depends on
#
# Uses a stock distro kernel (not a custom build) so the harness needs
# nothing but apt, and so we test the same 9p client users run.
set -euo pipefail

SCRIPT="$(readlink -f "${BASH_SOURCE[0]}")"
SCRIPT_DIR="$(dirname "$SCRIPT")"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
OUT="${1:-${CROSSFS_GUEST_DIR:-$REPO/.guest-cache}}"

# Modules we want loaded at boot; their dependencies are resolved below.
# virtio_pci+virtio_net: NIC for QEMU user networking.
# 9p + 9pnet_fd: the 9p client; 9pnet_fd carries the tcp, unix and fd transports.
# fuse: later tests run a FUSE client in the guest.
# virtiofs: the guest kernel's virtio-fs driver, for `crossfs serve --listen vhost-user-fs:`.
WANT_MODULES=(virtio_pci virtio_net 9pnet_fd 9p fuse virtiofs)

log() { echo "build-image: $*" >&2; }
die() { echo "build-image: error: $*" >&2; exit 1; }

fresh() {
    [[ -z "${CROSSFS_GUEST_REBUILD:-}" &&
       "$OUT/vmlinuz" -nt "$SCRIPT" && "$OUT/base.cpio.gz" -nt "$SCRIPT" ]]
}
fresh && exit 0
# Serialise concurrent first runs; whoever waited finds the cache fresh.
mkdir -p "$OUT" || die "cannot create $OUT"
exec 9>"$OUT/.lock"
flock 9
fresh && exit 0

# --- host tools -------------------------------------------------------------
# Debian packages providing what this harness runs on the host.
# socat: run.sh --fwd socat.
need_pkgs=(qemu-system-x86 busybox-static cpio kmod gzip socat)
missing=()
for p in "${need_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    ((EUID == 0)) || die "missing packages: ${missing[*]} (run as root or: sudo apt-get install ${missing[*]})"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Package lists may be absent or stale on a fresh machine: update only on failure.
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
        die "apt-get install ${missing[*]} failed"
fi
BUSYBOX=/bin/busybox
# The initramfs has no libc, so busybox must be the static build.
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    die "$BUSYBOX is dynamically linked; install busybox-static"
fi

# --- kernel -------------------------------------------------------------------
TMP="$(mktemp -d "${TMPDIR:-/tmp}/crossfs-guest-build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# apt drops privileges to _apt for downloads; let it write into our temp dir.
chmod 755 "$TMP"
mkdir -p "$TMP/dl" && chmod 777 "$TMP/dl"

apt_download() {
    (cd "$TMP/dl" && apt-get download -q "$@" >&2) && return 0
    ((EUID == 0)) || return 1
    apt-get update -q >&2 && (cd "$TMP/dl" && apt-get download -q "$@" >&2)
}

if [[ -n "${CROSSFS_GUEST_KERNEL_PKG:-}" ]]; then
    kpkg="$CROSSFS_GUEST_KERNEL_PKG"
else
    # linux-image-amd64 is a metapackage; its Depends names the real
    # versioned image package (e.g. linux-image-6.1.0-NN-amd64 (= V)).
    apt_download linux-image-amd64 || die "apt-get download linux-image-amd64 failed"
    dep="$(dpkg-deb -f "$TMP"/dl/linux-image-amd64_*.deb Depends)"
    kpkg="$(grep -oE 'linux-image-[0-9][^ ,(]*-amd64( \(= [^)]*\))?' <<<"$dep" | head -n1 |
            sed -E 's/ \(= (.*)\)$/=\1/')"
    [[ -n "$kpkg" ]] || die "cannot find a linux-image-*-amd64 dependency in: $dep"
fi
log "downloading $kpkg"
apt_download "$kpkg" || die "apt-get download $kpkg failed"
shopt -s nullglob
debs=("$TMP"/dl/linux-image-[0-9]*.deb)
((${#debs[@]} == 1)) || die "expected one kernel package after downloading $kpkg, got: ${debs[*]-none}"
kdeb="${debs[0]}"

K="$TMP/kernel"
dpkg-deb -x "$kdeb" "$K"
kernels=("$K"/boot/vmlinuz-*)
((${#kernels[@]} == 1)) || die "expected one /boot/vmlinuz-* in $kdeb"
vmlinuz="${kernels[0]}"
KVER="${vmlinuz##*/vmlinuz-}"
[[ -d "$K/lib/modules/$KVER" ]] || die "no /lib/modules/$KVER in $kdeb"
log "kernel $KVER"
# The .deb ships no modules.dep (postinst makes it); generate it for modprobe.
depmod -b "$K" "$KVER"

# --- modules ----------------------------------------------------------------
# modprobe --show-depends prints "insmod PATH" in load order, or "builtin NAME".
order=()
for m in "${WANT_MODULES[@]}"; do
    deps="$(modprobe -d "$K" -S "$KVER" --show-depends "$m")" || die "module $m not found in $KVER"
    while read -r kind path _; do
        [[ "$kind" == insmod ]] || continue
        rel="${path#"$K"/}"; rel="${rel#./}"
        [[ " ${order[*]-} " == *" $rel "* ]] || order+=("$rel")
    done <<<"$deps"
done

R="$TMP/root"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,mnt,etc,root,test,lib/modules/"$KVER"}
: >"$R/etc/crossfs-modules"
for rel in "${order[@]}"; do
    src="$K/$rel"; dst="$R/$rel"
    mkdir -p "$(dirname "$dst")"
    # busybox insmod cannot load compressed modules (newer Debian compresses them).
    case "$src" in
        *.ko.xz)  xz -dc   "$src" >"${dst%.xz}";  rel="${rel%.xz}" ;;
        *.ko.zst) zstd -qdc "$src" >"${dst%.zst}"; rel="${rel%.zst}" ;;
        *.ko.gz)  gzip -dc "$src" >"${dst%.gz}";  rel="${rel%.gz}" ;;
        *)        cp "$src" "$dst" ;;
    esac
    echo "/$rel" >>"$R/etc/crossfs-modules"
done
cp "$K/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KVER/" 2>/dev/null || true
# Lets test scripts `modprobe` what we shipped (only those modules exist).
depmod -b "$R" "$KVER" 2>/dev/null || true
log "modules: $(sed 's#.*/##' "$R/etc/crossfs-modules" | tr '\n' ' ')"

# --- userland -----------------------------------------------------------------
cp "$BUSYBOX" "$R/bin/busybox"
echo "$KVER" >"$R/etc/crossfs-kernel-version"
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
# No /dev/console node here (mknod needs root): the kernel's built-in
# initramfs already has one, and /init reopens it from devtmpfs anyway.

cat >"$R/init" <<'EOF'
#!/bin/busybox sh
# crossfs guest init: set up, run /test/run.sh, print the exit marker, power off.
/bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm

finish() {
    # Quiet the kernel so no printk splits the marker line run.sh looks for.
    echo 1 >/proc/sys/kernel/printk
    sync
    # Leading newline: the marker must start a line even if output didn't end one.
    printf '\nCROSSFS-GUEST-EXIT %s\n' "$1"
    poweroff -f
}

while read -r mod; do
    insmod "$mod" || { echo "init: insmod $mod failed"; finish 125; }
done </etc/crossfs-modules

ip link set lo up
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ -e /sys/class/net/eth0 ] || { echo "init: no eth0"; finish 125; }
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
hostname crossfs-guest

timeout=120
for arg in $(cat /proc/cmdline); do
    case "$arg" in crossfs.timeout=*) timeout="${arg#crossfs.timeout=}" ;; esac
done

if [ -f /test/run.sh ]; then
    cd /test
    # -s KILL: a process waiting on a dead 9p server dies of nothing else.
    timeout -s KILL "$timeout" sh /test/run.sh
    status=$?
    cd /
    [ $status -eq 137 ] && echo "init: /test/run.sh killed after ${timeout}s"
else
    echo "init: no /test/run.sh"
    status=127
fi
finish $status
EOF
chmod 755 "$R/init"

# --- uncompressed kernel for PVH boot --------------------------------------------
# Under TCG the bzImage spends ~7 s decompressing itself. With CONFIG_PVH the
# raw ELF vmlinux can be handed to QEMU's -kernel directly (PVH entry), which
# halves the boot time. Find the payload by its magic and decompress it.
extract_vmlinux() {
    local magic tool off pair
    for pair in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08\x00'; do
        tool="${pair%%:*}" magic="${pair#*:}"
        command -v "$tool" >/dev/null || continue
        while read -r off; do
            # Trailing bytes after the stream make the tool complain; the
            # ELF check below decides whether the output is usable.
            tail -c +"$((off + 1))" "$vmlinuz" | "$tool" -dc >"$TMP/vmlinux" 2>/dev/null || true
            [[ "$(head -c 4 "$TMP/vmlinux" | od -An -c | tr -d ' ')" == '177ELF' ]] && return 0
        done < <(LC_ALL=C grep -obUaP "$magic" "$vmlinuz" | cut -d: -f1)
    done
    return 1
}
rm -f "$OUT/vmlinux"
if grep -q '^CONFIG_PVH=y' "$K/boot/config-$KVER" 2>/dev/null && extract_vmlinux; then
    have_vmlinux=1
else
    log "no PVH-bootable vmlinux; run.sh will boot the (slower) bzImage"
    have_vmlinux=0
fi

# --- pack -------------------------------------------------------------------
chmod 755 "$R"  # becomes the mode of the guest's /
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -9n >"$TMP/base.cpio.gz"
cp "$vmlinuz" "$TMP/vmlinuz"
# Install atomically so a half-built cache never looks fresh.
if ((have_vmlinux)); then mv -f "$TMP/vmlinux" "$OUT/vmlinux"; fi
mv -f "$TMP/vmlinuz" "$OUT/vmlinuz"
echo "$KVER" >"$OUT/kernel-version"
cp "$R/etc/crossfs-modules" "$OUT/modules.list"
mv -f "$TMP/base.cpio.gz" "$OUT/base.cpio.gz"
log "built $OUT (kernel $KVER, initramfs $(du -h "$OUT/base.cpio.gz" | cut -f1))"
