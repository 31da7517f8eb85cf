/* bindings_bench.c: the C ABI twin of bindings_bench.cc (see there): the
 * same small all_reduce_sum loop through librankd.so, printing
 *   BINDING c world <W> ops <N> p50_ns <x> p99_ns <y> mean_ns <z>
 * Usage (under rankrun): bindings_bench_c [ops] [warmup] */
#include <rankd/rankd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int fail(rankd_status* s) {
  fprintf(stderr, "error: %s: %s\n", rankd_code_name(rankd_status_code(s)),
          rankd_status_message(s));
  rankd_status_free(s);
  return 1;
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int by_value(const void* a, const void* b) {
  long long x = *(const long long*)a, y = *(const long long*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const int ops = argc > 1 ? atoi(argv[1]) : 20000;
  const int warmup = argc > 2 ? atoi(argv[2]) : 2000;
  if (ops < 1 || warmup < 1) {
    fprintf(stderr, "usage: bindings_bench_c [ops >= 1] [warmup >= 1]\n");
    return 2;
  }
  rankd_rank* rank = NULL;
  rankd_status* s = rankd_join(NULL, &rank);
  if (s) return fail(s);
  rankd_descriptor d = {sizeof(d)};
  if ((s = rankd_rank_descriptor(rank, &d))) return fail(s);
  rankd_session* session = NULL;
  if ((s = rankd_session_open(rank, NULL, &session))) return fail(s);
  float x[4] = {1, 2, 3, 4}, sum[4];
  size_t shape[1] = {4};
  rankd_tensor in = {x, RANKD_F32, 1, shape}, out = {sum, RANKD_F32, 1, shape};
  long long* ns = malloc(sizeof(long long) * (size_t)ops);
  for (int i = 0; i < warmup + ops; ++i) {
    const long long start = now_ns();
    rankd_work* work = NULL;
    s = rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL,
                             &work);
    if (s) return fail(s);
    s = rankd_work_wait(work);
    rankd_work_free(work);
    if (s) return fail(s);
    const long long end = now_ns();
    if (i >= warmup) ns[i - warmup] = end - start;
    if (i == 0 && sum[0] != (float)d.world_size) {
      fprintf(stderr, "error: wrong sum %g\n", sum[0]);
      return 1;
    }
  }
  qsort(ns, (size_t)ops, sizeof(long long), by_value);
  double mean = 0;
  for (int i = 0; i < ops; ++i) mean += (double)ns[i] / ops;
  if (d.rank == 0) {
    printf("BINDING c world %u ops %d p50_ns %lld p99_ns %lld mean_ns %.0f\n",
           d.world_size, ops, ns[ops / 2], ns[(long long)ops * 99 / 100], mean);
  }
  uint32_t frame[1] = {d.rank};
  uint32_t* words = malloc(sizeof(uint32_t) * d.world_size);
  if ((s = rankd_all_gather_words(rank, frame, 1, 60, words, d.world_size))) {
    return fail(s);
  }
  free(words);
  free(ns);
  rankd_session_free(session);
  if ((s = rankd_leave(rank))) return fail(s);
  rankd_rank_free(rank);
  return 0;
}
