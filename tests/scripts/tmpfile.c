/* O_TMPFILE as a program in a guest uses it, for tests/virtiofs.rs (busybox has no tool
 * for it). Built static by the test: cc -static -O2 -o tmpfile tests/scripts/tmpfile.c
 *
 *   tmpfile DIR NAME TEXT   open(DIR, O_TMPFILE | O_RDWR, 0640), write TEXT, then link the
 *                           file as DIR/NAME through /proc/self/fd/N (linkat with
 *                           AT_SYMLINK_FOLLOW, as open(2) shows) and read it back by name
 *   tmpfile DIR - TEXT      the same, never linked: closing it must leave nothing
 *
 * Prints one line per step with the link count fstat(2) gives; the first failure prints
 * its errno and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *what)
{
    printf("tmpfile: %s: %s\n", what, strerror(errno));
    exit(1);
}

static unsigned long links(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        fail("fstat");
    return (unsigned long)st.st_nlink;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: tmpfile DIR NAME|- TEXT\n");
        return 2;
    }
    const char *dir = argv[1], *name = argv[2], *text = argv[3];
    size_t len = strlen(text);
    int fd = open(dir, O_TMPFILE | O_RDWR, 0640);
    if (fd < 0)
        fail("open O_TMPFILE");
    if (write(fd, text, len) != (ssize_t)len)
        fail("write");
    printf("tmpfile: made, %zu bytes, %lu links\n", len, links(fd));
    if (strcmp(name, "-") == 0) {
        if (close(fd) != 0)
            fail("close");
        printf("tmpfile: closed unlinked\n");
        return 0;
    }
    char proc[64], path[4096];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0)
        fail("linkat");
    printf("tmpfile: linked as %s, %lu links\n", name, links(fd));
    close(fd);
    char back[4096];
    int named = open(path, O_RDONLY);
    if (named < 0)
        fail("open by name");
    ssize_t n = read(named, back, sizeof back);
    if (n < 0)
        fail("read by name");
    printf("tmpfile: read back %.*s\n", (int)n, back);
    return 0;
}
