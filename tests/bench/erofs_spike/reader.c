// reader MODE ROOT LIST [THREADS]
//   MODE read : open + read whole file + close, in the list's order (shuffle the list beforehand)
//   MODE evict: open+posix_fadvise(DONTNEED)+close (drop a tree's data pages);
//   MODE open : open + close;   MODE stat : fstatat;   MODE fadv : open+posix_fadvise(WILLNEED)+close
// Prints files, seconds, us/file, files/s. THREADS>1 splits the list round-robin (for pre-walks).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/resource.h>
static char** paths; static long n; static int mode, nthr; static int rootfd; static long bytes_total;
static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec + t.tv_nsec*1e-9; }
static void* work(void* arg){
  long id = (long)arg, bytes = 0; char buf[1<<16];
  for (long i = id; i < n; i += nthr) {
    if (mode == 2) { struct stat st; if (fstatat(rootfd, paths[i], &st, 0)) { perror(paths[i]); exit(1); } continue; }
    int fd = openat(rootfd, paths[i], O_RDONLY);
    if (fd < 0) { perror(paths[i]); exit(1); }
    if (mode == 0) { ssize_t r; while ((r = read(fd, buf, sizeof buf)) > 0) bytes += r; }
    if (mode == 3) posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    if (mode == 4) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  __sync_fetch_and_add(&bytes_total, bytes); return 0;
}
int main(int argc, char** argv){
  if (argc < 4) { fprintf(stderr, "usage: reader read|open|stat|fadv ROOT LIST [THREADS]\n"); return 2; }
  mode = !strcmp(argv[1],"read") ? 0 : !strcmp(argv[1],"open") ? 1 : !strcmp(argv[1],"stat") ? 2 : !strcmp(argv[1],"evict") ? 4 : 3;
  rootfd = open(argv[2], O_RDONLY|O_DIRECTORY); if (rootfd < 0) { perror(argv[2]); return 1; }
  nthr = argc > 4 ? atoi(argv[4]) : 1;
  FILE* f = fopen(argv[3], "r"); if (!f) { perror(argv[3]); return 1; }
  long cap = 1<<20; paths = malloc(cap * sizeof *paths); char line[4096];
  while (fgets(line, sizeof line, f)) { line[strcspn(line, "\n")] = 0; if (n == cap) paths = realloc(paths, (cap*=2) * sizeof *paths); paths[n++] = strdup(line); }
  struct rusage r0; getrusage(RUSAGE_SELF, &r0); double cpu0 = r0.ru_utime.tv_sec + r0.ru_utime.tv_usec*1e-6 + r0.ru_stime.tv_sec + r0.ru_stime.tv_usec*1e-6;
  double t0 = now(); pthread_t th[64];
  for (long i = 0; i < nthr; i++) pthread_create(&th[i], 0, work, (void*)i);
  for (long i = 0; i < nthr; i++) pthread_join(th[i], 0);
  double t = now() - t0;
  struct rusage ru; getrusage(RUSAGE_SELF, &ru); double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec*1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec*1e-6 - cpu0;
  printf("%s %s files=%ld s=%.3f us/file=%.2f files/s=%.0f bytes=%ld cpu_us/file=%.2f\n", argv[1], argv[2], n, t, t*1e6/n, n/t, bytes_total, cpu*1e6/n);
  return 0;
}
