/* Lists a tree for comparing a guest's view with the host's (busybox's stat has no
 * nanoseconds of its own): one line per entry below DIR, unsorted,
 *   PATH TYPE SIZE MODE MTIME_SEC.MTIME_NSEC
 * PATH relative to DIR, TYPE one of f d l o, SIZE "-" for a directory (its size is the
 * host file system's business), MODE the permission bits in octal. Entries are not
 * followed through symlinks. tests/virtiofs_agent.rs prints the host's tree the same way.
 *
 * usage: tree_list DIR
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static size_t root_len;

static int entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag;
    if (ftw->level == 0)
        return 0;
    char type = S_ISREG(st->st_mode) ? 'f' : S_ISDIR(st->st_mode) ? 'd' : S_ISLNK(st->st_mode) ? 'l' : 'o';
    char size[32];
    if (type == 'd')
        strcpy(size, "-");
    else
        snprintf(size, sizeof size, "%lld", (long long)st->st_size);
    printf("%s %c %s %o %lld.%09ld\n", path + root_len + 1, type, size, st->st_mode & 07777,
           (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tree_list DIR\n");
        return 2;
    }
    root_len = strlen(argv[1]);
    if (nftw(argv[1], entry, 64, FTW_PHYS) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
