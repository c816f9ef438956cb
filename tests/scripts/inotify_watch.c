/* A small inotify watcher for the guest (busybox has none): watches each DIR given, and
 * each directory created in one, and prints one line per event, "NAMES PATH", NAMES being
 * the event's kinds joined by commas (CREATE, DELETE, MODIFY, CLOSE_WRITE, MOVED_FROM,
 * MOVED_TO, ATTRIB, ISDIR). With "-a ACKDIR", each file created whose name starts with "lat"
 * is answered at once by creating ACKDIR/ack-NAME (for a host to time the round trip).
 * With "-s PID", the first event stops process PID (SIGSTOP) and the watcher exits: a test's
 * way to stop `crossfs agent` just after it replayed one change of a batch.
 *
 * usage: inotify_watch [-a ACKDIR | -s PID] DIR...
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#define MASK (IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB)
#define MAX_WATCHES 256

static char *paths[MAX_WATCHES];
static int wds[MAX_WATCHES];
static int nwatches;

static void watch(int fd, const char *path)
{
    if (nwatches == MAX_WATCHES)
        return;
    int wd = inotify_add_watch(fd, path, MASK);
    if (wd < 0) {
        perror(path);
        return;
    }
    wds[nwatches] = wd;
    paths[nwatches++] = strdup(path);
}

static const char *path_of(int wd)
{
    for (int i = 0; i < nwatches; i++)
        if (wds[i] == wd)
            return paths[i];
    return "?";
}

int main(int argc, char **argv)
{
    const char *ackdir = NULL;
    pid_t stop = 0;
    int i = 1;
    if (argc > 2 && strcmp(argv[1], "-a") == 0) {
        ackdir = argv[2];
        i = 3;
    } else if (argc > 2 && strcmp(argv[1], "-s") == 0) {
        stop = (pid_t)atoi(argv[2]);
        i = 3;
    }
    int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0) {
        perror("inotify_init1");
        return 1;
    }
    for (; i < argc; i++)
        watch(fd, argv[i]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("WATCHING %d\n", nwatches);
    char buf[64 * 1024] __attribute__((aligned(8)));
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) {
            perror("read");
            return 1;
        }
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            p += sizeof *ev + ev->len;
            if (stop) {
                if (kill(stop, SIGSTOP) != 0) {
                    perror("kill");
                    return 1;
                }
                printf("STOPPED %s\n", ev->len ? ev->name : "");
                return 0;
            }
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", path_of(ev->wd), ev->len ? ev->name : "");
            if (ackdir && (ev->mask & IN_CREATE) && strncmp(ev->name, "lat", 3) == 0) {
                char ack[PATH_MAX];
                snprintf(ack, sizeof ack, "%s/ack-%s", ackdir, ev->name);
                int a = open(ack, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
                if (a >= 0)
                    close(a);
            }
            char names[128] = "";
            static const struct { unsigned bit; const char *name; } kinds[] = {
                {IN_CREATE, "CREATE"}, {IN_DELETE, "DELETE"}, {IN_MODIFY, "MODIFY"},
                {IN_CLOSE_WRITE, "CLOSE_WRITE"}, {IN_MOVED_FROM, "MOVED_FROM"},
                {IN_MOVED_TO, "MOVED_TO"}, {IN_ATTRIB, "ATTRIB"}, {IN_ISDIR, "ISDIR"},
                {IN_Q_OVERFLOW, "OVERFLOW"},
            };
            for (unsigned k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                if (ev->mask & kinds[k].bit) {
                    if (names[0])
                        strcat(names, ",");
                    strcat(names, kinds[k].name);
                }
            }
            printf("%s %s\n", names, path);
            if ((ev->mask & IN_CREATE) && (ev->mask & IN_ISDIR))
                watch(fd, path);
        }
    }
}
