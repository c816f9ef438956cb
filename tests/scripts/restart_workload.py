#!/usr/bin/env python3
"""The workload tests/reconnect.rs runs on a crossfs mount while it kills and restarts the
server. A process of its own, so that the test process holds no file on the mount: a
process that does cannot start a server (exec closes the inherited descriptors, and closing
a file with dirty pages writes them back, through the mount, to the server not yet there).

Usage: restart_workload.py MOUNTPOINT [RECORD]

Opens MOUNTPOINT/deep/er/still/read.me and creates MOUNTPOINT/journal, prints "ready",
then runs two threads until a line arrives on stdin:
- a writer: record n (RECORD bytes, 4096 unless given: n as 8 little-endian bytes, then
  n % 251 repeated) at offset n * RECORD (what a short write left written again), fsync,
  print "durable n"; a failed call is retried (a write at a fixed offset is idempotent)
  after printing "error write ERRNO";
- a metadata loop: stat a deep path and list a directory, printing "error stat ERRNO" on
  failure.
Then, through the descriptors opened at the start, reads read.me whole and prints
"read <contents as repr>", writes b"after" at offset 0 of the journal, fsyncs it, and
prints "done".
"""

import os
import sys
import threading
import time

RECORD = int(sys.argv[2]) if len(sys.argv) > 2 else 4096


def record(n):
    return n.to_bytes(8, "little") + bytes([n % 251]) * (RECORD - 8)


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    mnt = sys.argv[1]
    reader = os.open(os.path.join(mnt, "deep/er/still/read.me"), os.O_RDONLY)
    journal = os.open(os.path.join(mnt, "journal"), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    stop = threading.Event()

    def writer():
        n = 1
        while not stop.is_set():
            try:
                # A record larger than one WRITE may be written short (the kernel returns
                # what the WRITEs before a failed one took): the rest is written again.
                rec, done = record(n), 0
                while done < len(rec):
                    done += os.pwrite(journal, rec[done:], n * RECORD + done)
                os.fdatasync(journal)
            except OSError as e:
                say(f"error write {e.errno}")
                continue
            say(f"durable {n}")
            n += 1

    def metadata():
        while not stop.is_set():
            try:
                os.stat(os.path.join(mnt, "deep/er/still/read.me"))
                os.listdir(os.path.join(mnt, "deep/er"))
            except OSError as e:
                say(f"error stat {e.errno}")
            time.sleep(0.002)

    threads = [threading.Thread(target=writer), threading.Thread(target=metadata)]
    for t in threads:
        t.start()
    say("ready")
    sys.stdin.readline()
    stop.set()
    for t in threads:
        t.join()
    say("read " + repr(os.pread(reader, 4096, 0)))
    os.pwrite(journal, b"after", 0)
    os.fsync(journal)
    say("done")


if __name__ == "__main__":
    main()
