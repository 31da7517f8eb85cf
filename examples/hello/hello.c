/* hello.c: the two-rank program of docs/client-api.md in C, over the C ABI
 * (rankd/rankd.h, librankd.so). Start it with the launcher:
 *   rankrun --nproc_per_node=2 ./hello_c
 * Every rank prints the same line as the C++, Python and Rust versions. */
#include <rankd/rankd.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(rankd_status* s) {
  fprintf(stderr, "error: %s: %s\n", rankd_code_name(rankd_status_code(s)),
          rankd_status_message(s));
  rankd_status_free(s);
  return 1;
}

/* The submission's error, or else the wait's (bounded: 30 s); frees the work.
 */
static rankd_status* finish(rankd_status* submitted, rankd_work* work) {
  if (submitted) return submitted;
  rankd_status* s =
      rankd_work_wait_bounded(work, 30, RANKD_QUARANTINE_UNTIL_COMPLETE);
  rankd_work_free(work);
  return s;
}

int main(void) {
  rankd_rank* rank = NULL;
  rankd_status* s = rankd_join(NULL, &rank); /* from the launcher's env */
  if (s) return fail(s);
  rankd_descriptor d = {sizeof(d)};
  if ((s = rankd_rank_descriptor(rank, &d))) return fail(s);
  const uint32_t r = d.rank, world = d.world_size;

  /* Scheduling metadata: one frame {rank, 7} per rank, rank-major. */
  uint32_t frame[2] = {r, 7};
  uint32_t* words = calloc(2 * world, sizeof(uint32_t));
  if ((s = rankd_all_gather_words(rank, frame, 2, 30, words, 2 * world))) {
    return fail(s);
  }

  /* Tensors over Gloo: rank r holds {2r+1, 2r+2}; two ranks sum to {4, 6}. */
  rankd_session* session = NULL;
  if ((s = rankd_session_open(rank, NULL, &session))) return fail(s);
  float x[2] = {2.0f * r + 1, 2.0f * r + 2}, sum[2];
  size_t two[1] = {2}, one[1] = {1}, all[1] = {world};
  rankd_tensor in = {x, RANKD_F32, 1, two}, out = {sum, RANKD_F32, 1, two};
  rankd_work* work = NULL;
  s = rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work);
  if ((s = finish(s, work))) return fail(s);
  int32_t mine[1] = {(int32_t)r};
  int32_t* gathered = calloc(world, sizeof(int32_t));
  rankd_tensor gin = {mine, RANKD_I32, 1, one};
  rankd_tensor gout = {gathered, RANKD_I32, 1, all};
  s = rankd_all_gather(session, RANKD_WORLD_GROUP, &gin, &gout, NULL, &work);
  if ((s = finish(s, work))) return fail(s);

  printf("rank %u of %u: words [", r, world);
  for (uint32_t i = 0; i < 2 * world; ++i) printf(i ? " %u" : "%u", words[i]);
  printf("] sum [%g %g] gathered [", sum[0], sum[1]);
  for (uint32_t i = 0; i < world; ++i) printf(i ? " %d" : "%d", gathered[i]);
  printf("]\n");

  /* A last round is a barrier: nobody closes its session while a peer
   * still uses it. Then leave cleanly. */
  if ((s = rankd_all_gather_words(rank, frame, 2, 30, words, 2 * world))) {
    return fail(s);
  }
  free(words);
  free(gathered);
  rankd_session_free(session);
  if ((s = rankd_leave(rank))) return fail(s);
  rankd_rank_free(rank);
  return 0;
}
