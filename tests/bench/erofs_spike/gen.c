// gen ROOT DIRS FILES_PER_DIR MIN MAX SEED : ImageNet-shaped tree of random-content files.
// Writes ROOT/nXXXXXXXX/nXXXXXXXX_K.JPEG; prints relative paths in tree order to stdout.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
static uint64_t s;
static uint64_t rnd(void){ s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
int main(int argc, char** argv){
  if (argc < 7) { fprintf(stderr, "usage: gen ROOT DIRS PER MIN MAX SEED\n"); return 2; }
  const char* root = argv[1]; long dirs = atol(argv[2]), per = atol(argv[3]);
  long lo = atol(argv[4]), hi = atol(argv[5]); s = strtoull(argv[6],0,10) * 2654435761u + 88172645463325252ull;
  mkdir(root, 0755);
  char buf[65536], path[4096];
  for (long d = 0; d < dirs; d++) {
    char wn[32]; snprintf(wn, sizeof wn, "n%08ld", 1440764 + d * 7919);
    snprintf(path, sizeof path, "%s/%s", root, wn); mkdir(path, 0755);
    for (long f = 0; f < per; f++) {
      long n = lo + (long)(rnd() % (uint64_t)(hi - lo + 1));
      for (long i = 0; i < n; i += 8) { uint64_t r = rnd(); memcpy(buf + i, &r, 8); }
      snprintf(path, sizeof path, "%s/%s/%s_%ld.JPEG", root, wn, wn, 10000 + f * 37);
      int fd = open(path, O_WRONLY|O_CREAT|O_TRUNC, 0644);
      if (fd < 0 || write(fd, buf, n) != n) { perror(path); return 1; }
      close(fd);
      printf("%s/%s_%ld.JPEG\n", wn, wn, 10000 + f * 37);
    }
  }
  return 0;
}
