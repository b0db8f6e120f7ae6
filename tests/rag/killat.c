// LD_PRELOAD shim: SIGKILL this process when it opens a file whose name ends in $KILL_AT_OPEN
// (with write access), the $KILL_AT_NTH time (default 1). Puts a crash exactly inside Chroma's HNSW save.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int seen = 0;
static void maybe_kill(const char *p, int f) {
    const char *s = getenv("KILL_AT_OPEN");
    if (!p || !s || !(f & (O_WRONLY | O_RDWR))) return;
    size_t n = strlen(p), m = strlen(s);
    if (n < m || strcmp(p + n - m, s) != 0) return;
    const char *nth = getenv("KILL_AT_NTH");
    if (++seen < (nth ? atoi(nth) : 1)) return;
    write(2, "KILLED AT OPEN\n", 15);
    raise(SIGKILL);
}
#define WRAP(fn, ...) \
    va_list a; va_start(a, f); mode_t m = va_arg(a, int); va_end(a); maybe_kill(p, f); \
    int (*real)() = dlsym(RTLD_NEXT, fn); return real(__VA_ARGS__);
int open(const char *p, int f, ...) { WRAP("open", p, f, m) }
int open64(const char *p, int f, ...) { WRAP("open64", p, f, m) }
int openat(int d, const char *p, int f, ...) { WRAP("openat", d, p, f, m) }
int openat64(int d, const char *p, int f, ...) { WRAP("openat64", d, p, f, m) }
#include <stdio.h>
static int mode_writes(const char *mode) { return mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+')); }
FILE *fopen(const char *p, const char *mode) { if (mode_writes(mode)) maybe_kill(p, O_RDWR);
    FILE *(*real)(const char *, const char *) = dlsym(RTLD_NEXT, "fopen"); return real(p, mode); }
FILE *fopen64(const char *p, const char *mode) { if (mode_writes(mode)) maybe_kill(p, O_RDWR);
    FILE *(*real)(const char *, const char *) = dlsym(RTLD_NEXT, "fopen64"); return real(p, mode); }
