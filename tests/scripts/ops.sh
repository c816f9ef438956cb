#!/bin/sh
# File operations whose printed results must be identical on a local directory and through
# every crossfs path (the kernel's 9p client, crossfs mount). Runs under busybox sh with
# busybox's tools, in the QEMU guest and on the host alike, so both sides use the same
# programs and only the file system differs.
#
# Usage: ops.sh DIR   (DIR must exist and be empty)
# Prints only what a program could observe; never inode numbers, devices or atimes.
set -u
umask 022
cd "$1" || exit 2

st() { stat -c '%n|%F|%a|%s|%h|%u:%g' "$@" 2>&1 | sed 's/^stat: //'; }
try() { if "$@" 2>/dev/null; then echo "ok: $*"; else echo "failed: $*"; fi; }

echo "== create, write, read"
echo hello > a.txt
st a.txt
cat a.txt
seq 1 20000 > big.txt
st big.txt
md5sum big.txt
dd if=/dev/zero of=blocks bs=65536 count=40 2>/dev/null
st blocks
md5sum blocks

echo "== append"
echo more >> a.txt
cat a.txt

echo "== truncate"
truncate -s 3 a.txt
cat a.txt; echo
truncate -s 300000 big.txt
st big.txt
md5sum big.txt

echo "== overwrite in the middle"
printf 'XYZ' | dd of=big.txt bs=1 seek=1000 conv=notrunc 2>/dev/null
md5sum big.txt

echo "== directories"
mkdir -p d1/d2/d3
echo deep > d1/d2/d3/f
cat d1/d2/d3/f
st d1 d1/d2 d1/d2/d3
try mkdir d1
try rmdir d1

echo "== readdir of 300 entries"
i=0
while [ $i -lt 300 ]; do : > d1/file$i; i=$((i + 1)); done
ls d1 | wc -l
ls -a d1 | sort | md5sum

echo "== rename"
mv a.txt b.txt
try cat a.txt
echo replaced > c.txt
mv c.txt b.txt
cat b.txt
mv d1/d2 moved
ls moved
st moved/d3/f

echo "== hard links"
ln b.txt hl
st b.txt hl
rm b.txt
st hl
cat hl

echo "== symlinks"
ln -s hl sl
ln -s /etc/passwd abs
ln -s ../../.. up
ln -s moved dl
for l in sl abs up dl; do echo "$l -> $(readlink "$l")"; done
st sl dl
cat sl
ls dl
cat dl/d3/f

echo "== fifo"
mkfifo fifo
st fifo

echo "== open, unlink, read"
echo survivor > ou
exec 3< ou
rm ou
try cat ou
cat <&3
exec 3<&-

echo "== chmod, utimes"
chmod 640 hl
st hl
touch -d "2001-02-03 04:05:06" hl
stat -c '%Y %y' hl
chmod 755 moved
st moved

echo "== long names"
n255=$(printf 'n%.0s' $(seq 1 255))
: > "$n255"
ls | grep -c nnnnnnnnnn
try touch "${n255}x"
rm "$n255"

echo "== removal"
try rmdir moved
rm -r moved
try ls moved
rm d1/file*
rm -r d1

echo "== final tree"
find . | sort | while read -r f; do st "$f"; done
