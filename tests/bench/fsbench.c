// fsbench: the benchmark's C helper. Generates the synthetic datasets with a fixed seed and
// runs the timed loops of the read and metadata workloads (R1-R4, M1, M3, S2's decoder
// baseline). Every loop times itself, so process start-up, the interception library's
// constructor and the agent's stage-in never count, and prints one JSON line with the work
// done and a content hash, so that both arms of a comparison provably did the same work.
//
//   fsbench gen-images DIR N DIRS MIN_KIB MAX_KIB SEED   incompressible files
//   fsbench gen-text   DIR N DIRS MIN_KIB MAX_KIB SEED   compressible text
//   fsbench gen-mixed  DIR N DIRS MIN_MIB MAX_MIB SEED   large, partly compressible files
//   fsbench read   ROOT LIST [PROCS]       open + read whole file + close, in LIST order
//   fsbench materialise ROOT LIST DSTDIR [PROCS]
//                                          F1's floor: the least work of any first epoch that
//                                          gives each file its own inode on the node. Every file
//                                          of LIST is created under DSTDIR (same relative path,
//                                          same size, O_EXCL, written whole) and read back whole
//                                          once, as the reader does; PROCS processes share the
//                                          files. Sizes come from ROOT and directories are made
//                                          before the clock starts.
//   fsbench stat   ROOT LIST PASSES        stat of every file
//   fsbench enoent ROOT LIST COUNT         open of missing names in LIST's directories
//   fsbench zdec   ROOT LIST LEVEL PASSES  zstd decompression rate of one frame per file
//   fsbench netcopy ROOT LIST DSTDIR [copy|sendfile]
//                                          R4's floor: the least work any design does that moves
//                                          a file from another node over TCP into local storage
//                                          and reads it there. A sender process streams each
//                                          file (length, bytes) over one loopback connection; the
//                                          receiver writes each into its own file in DSTDIR and
//                                          reads it back whole, as R4's reader does. No protocol,
//                                          no verification, no cache bookkeeping. The sender
//                                          reads into a buffer and sends it (copy, the default:
//                                          faster here than sendfile, and than splicing on the
//                                          receiving side).
//
// LIST holds one path per line, relative to ROOT. Built with: cc -O2 fsbench.c -lxxhash -lzstd -lm
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char* what) {
  fprintf(stderr, "fsbench: %s: %s\n", what, strerror(errno));
  exit(1);
}

// --- deterministic generator: splitmix64 seeding a xoshiro256** per file -----------------------

typedef struct { uint64_t s[4]; } rng_t;

static uint64_t splitmix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static void rng_init(rng_t* r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed * 0x100000001b3ULL ^ (stream + 1) * 0xd1b54a32d192ed03ULL;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t rng_next(rng_t* r) {
  uint64_t* s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
  return out;
}
static uint64_t rng_range(rng_t* r, uint64_t lo, uint64_t hi) { return lo + rng_next(r) % (hi - lo + 1); }

static void mkdir_p(const char* d) {
  if (mkdir(d, 0755) != 0 && errno != EEXIST) die(d);
}

// Every generated file and directory gets this mtime, so that regenerating a dataset gives
// exactly the tree that was packed earlier (2024-01-02 03:04:05 UTC).
static const struct timespec kFixedTimes[2] = {{1704164645, 0}, {1704164645, 0}};

static void write_file(const char* path, const char* buf, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die(path);
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, buf + off, n - off);
    if (w < 0) die(path);
    off += (size_t)w;
  }
  if (futimens(fd, kFixedTimes) != 0) die(path);
  if (close(fd) != 0) die(path);
}

// A vocabulary of pseudo-words; text picks them with a skewed distribution, like prose.
#define VOCAB 4096
static char g_words[VOCAB][12];
static void make_vocab(uint64_t seed) {
  rng_t r;
  rng_init(&r, seed, ~0ULL);
  for (int i = 0; i < VOCAB; i++) {
    int len = (int)rng_range(&r, 2, 10);
    for (int k = 0; k < len; k++) g_words[i][k] = (char)('a' + rng_next(&r) % 26);
    g_words[i][len] = 0;
  }
}

static int gen(int argc, char** argv, const char* kind) {
  if (argc != 8) {
    fprintf(stderr, "usage: fsbench %s DIR N DIRS MIN MAX SEED\n", kind);
    return 2;
  }
  const char* root = argv[2];
  long n = atol(argv[3]), dirs = atol(argv[4]);
  uint64_t unit = strcmp(kind, "gen-mixed") == 0 ? 1048576 : 1024;
  uint64_t lo = strtoull(argv[5], NULL, 10) * unit, hi = strtoull(argv[6], NULL, 10) * unit;
  uint64_t seed = strtoull(argv[7], NULL, 10);
  if (n <= 0 || dirs <= 0 || lo == 0 || hi < lo) {
    fprintf(stderr, "fsbench: bad parameters\n");
    return 2;
  }
  mkdir_p(root);
  const char* dfmt = kind[4] == 'i' ? "%s/class%03ld" : kind[4] == 't' ? "%s/d%02ld" : "%s/m%02ld";
  const char* ffmt = kind[4] == 'i' ? "%s/img%06ld.dat" : kind[4] == 't' ? "%s/t%06ld.txt" : "%s/m%05ld.bin";
  char dpath[4096], fpath[4200];
  for (long d = 0; d < dirs; d++) {
    snprintf(dpath, sizeof dpath, dfmt, root, d);
    mkdir_p(dpath);
  }
  if (kind[4] == 't') make_vocab(seed);
  char* buf = malloc(hi + 64);
  if (!buf) die("malloc");
  uint64_t total = 0;
  for (long i = 0; i < n; i++) {
    rng_t r;
    rng_init(&r, seed, (uint64_t)i);
    uint64_t size = rng_range(&r, lo, hi);
    if (kind[4] == 'i') {  // incompressible, like JPEG payloads
      for (uint64_t o = 0; o < size; o += 8) {
        uint64_t v = rng_next(&r);
        memcpy(buf + o, &v, 8);
      }
    } else if (kind[4] == 't') {  // prose-like text from a skewed vocabulary
      uint64_t o = 0;
      int col = 0;
      while (o < size) {
        // log-uniform word ids: a few words are very common, like in prose (Zipf-like)
        double u = (double)(rng_next(&r) >> 11) * 0x1.0p-53;
        const char* w = g_words[(int)exp(u * 8.317766166719343) - 1];  // ln(4096)
        size_t len = strlen(w);
        memcpy(buf + o, w, len);
        o += len;
        col += (int)len + 1;
        buf[o++] = col > 72 ? (col = 0, '\n') : ' ';
      }
    } else {  // HDF5/TFRecord-like: random blocks and low-entropy numeric blocks
      for (uint64_t o = 0; o < size; o += 8) {
        uint64_t v = rng_next(&r);
        if ((o >> 16) & 1) v &= 0x00000000ffff0f0fULL;
        memcpy(buf + o, &v, 8);
      }
    }
    snprintf(dpath, sizeof dpath, dfmt, root, i % dirs);
    snprintf(fpath, sizeof fpath, ffmt, dpath, i);
    write_file(fpath, buf, size);
    total += size;
  }
  free(buf);
  for (long d = 0; d < dirs; d++) {
    snprintf(dpath, sizeof dpath, dfmt, root, d);
    if (utimensat(AT_FDCWD, dpath, kFixedTimes, 0) != 0) die(dpath);
  }
  if (utimensat(AT_FDCWD, root, kFixedTimes, 0) != 0) die(root);
  printf("{\"files\": %ld, \"bytes\": %" PRIu64 "}\n", n, total);
  return 0;
}

// --- the list of paths ---------------------------------------------------------------------

typedef struct {
  char** paths;
  long n;
} list_t;

static list_t load_list(const char* root, const char* list_path) {
  FILE* f = fopen(list_path, "r");
  if (!f) die(list_path);
  list_t l = {NULL, 0};
  long cap = 0;
  char line[4096];
  size_t rl = strlen(root);
  while (fgets(line, sizeof line, f)) {
    size_t len = strcspn(line, "\n");
    if (!len) continue;
    line[len] = 0;
    if (l.n == cap) {
      cap = cap ? cap * 2 : 1024;
      l.paths = realloc(l.paths, cap * sizeof *l.paths);
      if (!l.paths) die("realloc");
    }
    char* p = malloc(rl + len + 2);
    if (!p) die("malloc");
    memcpy(p, root, rl);
    p[rl] = '/';
    memcpy(p + rl + 1, line, len + 1);
    l.paths[l.n++] = p;
  }
  fclose(f);
  return l;
}

// --- read: open + read whole file + close ----------------------------------------------------

typedef struct {
  uint64_t files, bytes, hash, errors;
} read_res;

#define BUF (1 << 20)

static read_res read_range(const list_t* l, long from, long step) {
  static char* buf;
  if (!buf && !(buf = aligned_alloc(4096, BUF))) die("malloc");
  read_res r = {0, 0, 0, 0};
  XXH3_state_t* st = XXH3_createState();
  for (long i = from; i < l->n; i += step) {
    int fd = open(l->paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (r.errors++ < 5) fprintf(stderr, "fsbench: open %s: %s\n", l->paths[i], strerror(errno));
      continue;
    }
    XXH3_64bits_reset(st);
    for (;;) {
      ssize_t got = read(fd, buf, BUF);
      if (got < 0) {
        if (errno == EINTR) continue;
        if (r.errors++ < 5) fprintf(stderr, "fsbench: read %s: %s\n", l->paths[i], strerror(errno));
        break;
      }
      if (got == 0) break;
      XXH3_64bits_update(st, buf, (size_t)got);
      r.bytes += (uint64_t)got;
    }
    close(fd);
    r.hash += XXH3_64bits_digest(st);  // a sum: independent of order and of the split
    r.files++;
  }
  XXH3_freeState(st);
  return r;
}

// The reader's part of a file just written: open, read whole, hash, as fsbench read does.
static void read_back(const char* path, char* buf, XXH3_state_t* st, read_res* r) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(path);
  XXH3_64bits_reset(st);
  for (;;) {
    ssize_t n = read(fd, buf, BUF);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die(path);
    if (n == 0) break;
    XXH3_64bits_update(st, buf, (size_t)n);
    r->bytes += (uint64_t)n;
  }
  close(fd);
  r->hash += XXH3_64bits_digest(st);
  r->files++;
}

typedef read_res (*range_fn)(const list_t* l, long from, long step, void* ctx);

// Runs fn over the list in `procs` processes (each takes every procs-th path) and sums their
// results; *seconds covers only the parallel work (children wait on a start pipe).
static read_res run_procs(const list_t* l, int procs, range_fn fn, void* ctx, double* seconds) {
  read_res tot = {0, 0, 0, 0};
  if (procs <= 1) {
    double t0 = now();
    tot = fn(l, 0, 1, ctx);
    *seconds = now() - t0;
    return tot;
  }
  int go[2], res[2];
  if (pipe(go) || pipe(res)) die("pipe");
  for (int p = 0; p < procs; p++) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(3);
      read_res r = fn(l, p, procs, ctx);
      if (write(res[1], &r, sizeof r) != sizeof r) _exit(4);
      _exit(r.errors ? 1 : 0);
    }
  }
  close(go[0]);
  close(res[1]);
  char starts[64] = {0};
  double t0 = now();
  if (write(go[1], starts, procs) != procs) die("write");
  for (int p = 0; p < procs; p++) {
    read_res r;
    if (read(res[0], &r, sizeof r) != sizeof r) die("child result");
    tot.files += r.files, tot.bytes += r.bytes, tot.hash += r.hash, tot.errors += r.errors;
  }
  *seconds = now() - t0;
  int status, bad = 0;
  while (wait(&status) > 0) bad |= !WIFEXITED(status) || WEXITSTATUS(status);
  if (bad) tot.errors++;
  return tot;
}

static void print_res(read_res r, double seconds, int procs) {
  printf("{\"files\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"hash\": \"%016" PRIx64
         "\", \"errors\": %" PRIu64 ", \"procs\": %d}\n",
         r.files, r.bytes, seconds, r.hash, r.errors, procs);
}

static read_res read_fn(const list_t* l, long from, long step, void* ctx) {
  (void)ctx;
  return read_range(l, from, step);
}

static int cmd_read(int argc, char** argv) {
  if (argc < 4) return 2;
  list_t l = load_list(argv[2], argv[3]);
  int procs = argc > 4 ? atoi(argv[4]) : 1;
  if (procs < 1 || procs > 64) {
    fprintf(stderr, "fsbench: PROCS must be 1 to 64\n");
    return 2;
  }
  double seconds;
  read_res tot = run_procs(&l, procs, read_fn, NULL, &seconds);
  print_res(tot, seconds, procs);
  return tot.errors ? 1 : 0;
}

// --- materialise: create every file, then read it back once (F1's floor) ----------------------

typedef struct {
  list_t dst;         // the paths under DSTDIR
  uint64_t* sizes;    // of the files under ROOT
} mat_ctx;

static read_res materialise_range(const list_t* l, long from, long step, void* arg) {
  const mat_ctx* m = arg;
  static char* buf;
  if (!buf && !(buf = aligned_alloc(4096, BUF))) die("malloc");
  memset(buf, 0x5a, BUF);
  read_res r = {0, 0, 0, 0};
  XXH3_state_t* st = XXH3_createState();
  for (long i = from; i < l->n; i += step) {
    const char* path = m->dst.paths[i];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
    if (fd < 0) die(path);
    for (uint64_t left = m->sizes[i]; left > 0;) {
      size_t n = left < BUF ? (size_t)left : BUF;
      ssize_t w = write(fd, buf, n);
      if (w <= 0) die(path);
      left -= (uint64_t)w;
    }
    close(fd);
    read_back(path, buf, st, &r);
  }
  XXH3_freeState(st);
  return r;
}

// mkdir -p of the directories of path below its first `keep` bytes (an existing DSTDIR); a
// directory made for the previous path is not made again.
static void make_parents(char* path, size_t keep) {
  static char last[4096];
  char* slash = strrchr(path, '/');
  size_t dir_len = slash ? (size_t)(slash - path) : 0;
  if (dir_len <= keep || (strlen(last) == dir_len && !strncmp(last, path, dir_len))) return;
  for (char* p = strchr(path + keep + 1, '/'); p; p = strchr(p + 1, '/')) {
    *p = 0;
    if (mkdir(path, 0700) != 0 && errno != EEXIST) die(path);
    *p = '/';
  }
  if (dir_len < sizeof last) memcpy(last, path, dir_len), last[dir_len] = 0;
}

static int cmd_materialise(int argc, char** argv) {
  if (argc < 5) return 2;
  list_t l = load_list(argv[2], argv[3]);
  mat_ctx m = {load_list(argv[4], argv[3]), calloc((size_t)l.n + 1, sizeof(uint64_t))};
  if (!m.sizes) die("calloc");
  int procs = argc > 5 ? atoi(argv[5]) : 1;
  if (procs < 1 || procs > 64) {
    fprintf(stderr, "fsbench: PROCS must be 1 to 64\n");
    return 2;
  }
  size_t root_len = strlen(argv[4]);
  for (long i = 0; i < l.n; i++) {
    struct stat st;
    if (stat(l.paths[i], &st) != 0) die(l.paths[i]);
    m.sizes[i] = (uint64_t)st.st_size;
    make_parents(m.dst.paths[i], root_len);
  }
  double seconds;
  read_res tot = run_procs(&l, procs, materialise_range, &m, &seconds);
  print_res(tot, seconds, procs);
  return tot.errors ? 1 : 0;
}

// --- stat: every file, PASSES times ---------------------------------------------------------------

static int cmd_stat(int argc, char** argv) {
  if (argc < 5) return 2;
  list_t l = load_list(argv[2], argv[3]);
  int passes = atoi(argv[4]);
  uint64_t hash = 0, errors = 0, n = 0;
  double t0 = now();
  for (int p = 0; p < passes; p++)
    for (long i = 0; i < l.n; i++) {
      struct stat st;
      if (stat(l.paths[i], &st) != 0) {
        if (errors++ < 5) fprintf(stderr, "fsbench: stat %s: %s\n", l.paths[i], strerror(errno));
        continue;
      }
      // What an application uses: type, permissions, size and mtime (not dev/ino).
      uint64_t v[3] = {(uint64_t)st.st_mode, (uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec};
      hash += XXH3_64bits(v, sizeof v);
      n++;
    }
  double t1 = now();
  printf("{\"stats\": %" PRIu64 ", \"seconds\": %.6f, \"hash\": \"%016" PRIx64 "\", \"errors\": %" PRIu64 "}\n", n,
         t1 - t0, hash, errors);
  return errors ? 1 : 0;
}

// --- enoent: open of missing names, in the dataset's directories ----------------------------------

static int cmd_enoent(int argc, char** argv) {
  if (argc < 5) return 2;
  list_t l = load_list(argv[2], argv[3]);
  long count = atol(argv[4]);
  char** miss = malloc(count * sizeof *miss);
  if (!miss || l.n == 0) die("list");
  for (long i = 0; i < count; i++) {
    const char* p = l.paths[(i * 7919) % l.n];
    const char* slash = strrchr(p, '/');
    size_t dl = (size_t)(slash - p);
    miss[i] = malloc(dl + 32);
    memcpy(miss[i], p, dl);
    snprintf(miss[i] + dl, 32, "/missing-%ld.dat", i);
  }
  uint64_t enoent = 0, other = 0;
  double t0 = now();
  for (long i = 0; i < count; i++) {
    int fd = open(miss[i], O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      close(fd);
      other++;
    } else if (errno == ENOENT) {
      enoent++;
    } else if (other++ < 5) {
      fprintf(stderr, "fsbench: open %s: %s\n", miss[i], strerror(errno));
    }
  }
  double t1 = now();
  printf("{\"opens\": %ld, \"enoent\": %" PRIu64 ", \"seconds\": %.6f, \"hash\": \"%016" PRIx64
         "\", \"errors\": %" PRIu64 "}\n",
         count, enoent, t1 - t0, enoent, other);
  return other ? 1 : 0;
}

// --- zdec: single-core zstd decompression rate with one frame per file ------------------------------

static int cmd_zdec(int argc, char** argv) {
  if (argc < 6) return 2;
  list_t l = load_list(argv[2], argv[3]);
  int level = atoi(argv[4]), passes = atoi(argv[5]);
  char** frames = malloc(l.n * sizeof *frames);
  size_t* flen = malloc(l.n * sizeof *flen);
  size_t* rlen = malloc(l.n * sizeof *rlen);
  size_t maxraw = 0;
  uint64_t raw = 0, stored = 0;
  ZSTD_CCtx* cc = ZSTD_createCCtx();
  char* in = malloc(64 << 20);
  for (long i = 0; i < l.n; i++) {
    int fd = open(l.paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) die(l.paths[i]);
    ssize_t n = read(fd, in, 64 << 20);
    close(fd);
    if (n < 0) die(l.paths[i]);
    size_t bound = ZSTD_compressBound((size_t)n);
    frames[i] = malloc(bound);
    flen[i] = ZSTD_compressCCtx(cc, frames[i], bound, in, (size_t)n, level);
    if (ZSTD_isError(flen[i])) {
      fprintf(stderr, "fsbench: zstd: %s\n", ZSTD_getErrorName(flen[i]));
      return 1;
    }
    rlen[i] = (size_t)n;
    if ((size_t)n > maxraw) maxraw = (size_t)n;
    raw += (uint64_t)n;
    stored += flen[i];
  }
  ZSTD_DCtx* dc = ZSTD_createDCtx();
  char* out = malloc(maxraw + 1);
  uint64_t hash = 0, errors = 0;
  double t0 = now();
  for (int p = 0; p < passes; p++)
    for (long i = 0; i < l.n; i++) {
      size_t got = ZSTD_decompressDCtx(dc, out, maxraw + 1, frames[i], flen[i]);
      if (ZSTD_isError(got) || got != rlen[i]) {
        errors++;
        continue;
      }
      if (p == 0) hash += XXH3_64bits(out, got);
    }
  double t1 = now();
  printf("{\"files\": %ld, \"raw_bytes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64 ", \"passes\": %d, \"seconds\": %.6f, "
         "\"hash\": \"%016" PRIx64 "\", \"errors\": %" PRIu64 "}\n",
         l.n, raw, stored, passes, t1 - t0, hash, errors);
  return errors ? 1 : 0;
}

// --- netcopy: R4's floor ------------------------------------------------------------------------

static void send_all(int s, const void* p, size_t n) {
  const char* c = p;
  while (n) {
    ssize_t w = send(s, c, n, 0);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("send");
    c += w, n -= (size_t)w;
  }
}

static void recv_all(int s, void* p, size_t n) {
  char* c = p;
  while (n) {
    ssize_t r = recv(s, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("recv");
    c += r, n -= (size_t)r;
  }
}

static void netcopy_send(int s, const list_t* l, int use_sendfile) {
  char* buf = aligned_alloc(4096, BUF);
  if (!buf) die("malloc");
  for (long i = 0; i < l->n; i++) {
    int fd = open(l->paths[i], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) die(l->paths[i]);
    uint64_t len = (uint64_t)st.st_size, off = 0;
    send_all(s, &len, sizeof len);
    while (off < len) {
      ssize_t n;
      if (use_sendfile) {
        off_t o = (off_t)off;
        n = sendfile(s, fd, &o, len - off);
      } else {
        n = pread(fd, buf, len - off < BUF ? len - off : BUF, (off_t)off);
        if (n > 0) send_all(s, buf, (size_t)n);
      }
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("netcopy send");
      off += (uint64_t)n;
    }
    close(fd);
  }
}

static int cmd_netcopy(int argc, char** argv) {
  if (argc < 5) return 2;
  list_t l = load_list(argv[2], argv[3]);
  const char* dst = argv[4];
  int use_sendfile = argc > 5 && !strcmp(argv[5], "sendfile");
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr*)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (struct sockaddr*)&a, &al))
    die("listen");
  int go[2];
  if (pipe(go)) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(go[1]);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr*)&a, sizeof a)) die("connect");
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    netcopy_send(s, &l, use_sendfile);
    close(s);
    _exit(0);
  }
  close(go[0]);
  int s = accept(ls, NULL, NULL);
  if (s < 0) die("accept");
  char* buf = aligned_alloc(4096, BUF);
  if (!buf) die("malloc");
  XXH3_state_t* st = XXH3_createState();
  read_res r = {0, 0, 0, 0};
  char path[4096];
  double t0 = now();
  if (write(go[1], "g", 1) != 1) die("write");
  for (long i = 0; i < l.n; i++) {
    uint64_t len, got = 0;
    recv_all(s, &len, sizeof len);
    snprintf(path, sizeof path, "%s/%ld", dst, i);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) die(path);
    while (got < len) {
      size_t n = len - got < BUF ? (size_t)(len - got) : BUF;
      recv_all(s, buf, n);
      if (write(fd, buf, n) != (ssize_t)n) die("netcopy write");
      got += n;
    }
    close(fd);
    read_back(path, buf, st, &r);
  }
  double t1 = now();
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) r.errors++;
  printf("{\"files\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"hash\": \"%016" PRIx64
         "\", \"errors\": %" PRIu64 ", \"sender\": \"%s\"}\n",
         r.files, r.bytes, t1 - t0, r.hash, r.errors, use_sendfile ? "sendfile" : "copy");
  return r.errors ? 1 : 0;
}

// fsbench costs: one JSON line of per-operation prices (see the top of the file).
static int cmd_costs(int argc, char** argv) {
  (void)argv;
  if (argc != 2) return 2;
  const long calls = 200000;
  double t0 = now();
  for (long i = 0; i < calls; i++) syscall(SYS_getppid);
  const double syscall_us = (now() - t0) * 1e6 / calls;

  const size_t n = (size_t)256 << 20, pages = n / 4096;
  char* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  madvise(p, n, MADV_NOHUGEPAGE);
  t0 = now();
  for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  const double anon_fault_us = (now() - t0) * 1e6 / pages;

  // A dependent chain through every cache line of the (now mapped) region, in random order.
  const size_t lines = n / 64;
  uint32_t* perm = malloc(lines * sizeof *perm);
  if (!perm) die("malloc");
  for (size_t i = 0; i < lines; i++) perm[i] = (uint32_t)i;
  uint64_t x = 88172645463325252ull;
  for (size_t i = lines - 1; i > 0; i--) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t j = x % (i + 1);
    uint32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (size_t i = 0; i < lines; i++) *(uint64_t*)(p + (size_t)perm[i] * 64) = (uint64_t)perm[(i + 1) % lines] * 64;
  free(perm);
  const long loads = 2000000;
  uint64_t off = 0;
  t0 = now();
  for (long i = 0; i < loads; i++) off = *(volatile uint64_t*)(p + off);
  const double random_load_ns = (now() - t0) * 1e9 / loads;
  munmap(p, n);

  // A file of shared memory, its pages in the page cache, mapped afresh and read a page at a time.
  int fd = memfd_create("fsbench-costs", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) die("memfd");
  char* w = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (w == MAP_FAILED) die("mmap");
  memset(w, 1, n);
  munmap(w, n);
  char* r = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  if (r == MAP_FAILED) die("mmap");
  uint64_t sum = 0;
  t0 = now();
  for (size_t i = 0; i < n; i += 4096) sum += *(volatile char*)(r + i);
  const double file_fault_us = (now() - t0) * 1e6 / pages;
  munmap(r, n);
  close(fd);
  printf("{\"syscall_us\": %.3f, \"anon_page_fault_us\": %.2f, \"file_page_touch_us\": %.2f, "
         "\"random_load_ns\": %.0f, \"check\": %" PRIu64 "}\n",
         syscall_us, anon_fault_us, file_fault_us, random_load_ns, (off & 1) + sum);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fsbench gen-images|gen-text|gen-mixed|read|materialise|stat|enoent|zdec|netcopy|costs ...\n");
    return 2;
  }
  const char* c = argv[1];
  int rc = 2;
  if (!strncmp(c, "gen-", 4)) rc = gen(argc, argv, c);
  else if (!strcmp(c, "read")) rc = cmd_read(argc, argv);
  else if (!strcmp(c, "materialise")) rc = cmd_materialise(argc, argv);
  else if (!strcmp(c, "stat")) rc = cmd_stat(argc, argv);
  else if (!strcmp(c, "enoent")) rc = cmd_enoent(argc, argv);
  else if (!strcmp(c, "zdec")) rc = cmd_zdec(argc, argv);
  else if (!strcmp(c, "netcopy")) rc = cmd_netcopy(argc, argv);
  else if (!strcmp(c, "costs")) rc = cmd_costs(argc, argv);
  if (rc == 2) fprintf(stderr, "fsbench: bad usage of '%s' (see the comment at the top of fsbench.c)\n", c);
  return rc;
}
