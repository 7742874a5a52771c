// pmix_get_probe: what the agents' exchange pays per PMIx_Get on a node with nothing else to do.
// Every rank publishes one BYTES-long value and joins a fence that collects the data; then rank 0
// alone fetches every rank's value with PMIx_Get_nb, all at once as agent/bootstrap.cc does, and
// prints the time, while the others wait in the next fence. Three rounds: the first is what an
// agent pays (its first Get of each key), the later ones find the values in the client's cache.
//
//   built as build/bin/pmix_get_probe, or: cc -O2 -o pmix_get_probe pmix_get_probe.c $(pkg-config --cflags --libs pmix) -lpthread
//   srun -N2 -n RANKS --overcommit --mpi=pmix ./pmix_get_probe BYTES
//
// One JSON line per round: {"n": RANKS, "bytes": BYTES, "round": R, "seconds": S, "us_per_get": U}.
#include <pmix.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static unsigned left;

static void one_less(void) {
  pthread_mutex_lock(&mu);
  if (--left == 0) pthread_cond_signal(&done);
  pthread_mutex_unlock(&mu);
}

static void got(pmix_status_t rc, pmix_value_t *kv, void *arg) {
  (void)rc, (void)kv, (void)arg;
  one_less();
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int fence(bool collect) {
  pmix_info_t info;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  return PMIx_Fence(NULL, 0, &info, 1) == PMIX_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv) {
  const size_t bytes = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  setenv("PMIX_MCA_gds", "hash", 1);  // the agents' store (agent/bootstrap.cc)
  pmix_proc_t me, wild;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 1;
  PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t *size = NULL;
  if (PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &size) != PMIX_SUCCESS || !size) return 1;
  const unsigned n = size->data.uint32;
  char *buf = calloc(1, bytes ? bytes : 1);
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = buf;
  v.data.bo.size = bytes;
  if (!buf || PMIx_Put(PMIX_GLOBAL, "probe", &v) != PMIX_SUCCESS || PMIx_Commit() != PMIX_SUCCESS ||
      fence(true) != 0)
    return 1;
  for (int round = 0; round < 3; round++) {
    if (me.rank == 0) {
      const double t0 = now();
      left = n;
      for (unsigned r = 0; r < n; r++) {
        pmix_proc_t p;
        PMIX_PROC_LOAD(&p, me.nspace, r);
        if (PMIx_Get_nb(&p, "probe", NULL, 0, got, NULL) != PMIX_SUCCESS) one_less();
      }
      pthread_mutex_lock(&mu);
      while (left) pthread_cond_wait(&done, &mu);
      pthread_mutex_unlock(&mu);
      const double t = now() - t0;
      printf("{\"n\": %u, \"bytes\": %zu, \"round\": %d, \"seconds\": %.6f, \"us_per_get\": %.1f}\n", n,
             bytes, round, t, t / n * 1e6);
      fflush(stdout);
    }
    if (fence(false) != 0) return 1;
  }
  PMIx_Finalize(NULL, 0);
  free(buf);
  return 0;
}
