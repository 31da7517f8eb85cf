/* c_rank: one rank of a job, written in C against the C ABI alone
 * (rankd/rankd.h, librankd.so). capi_test starts one per rank with the
 * launcher's environment ($RANKD_TARGET, $RANKD_JOB_ID, $RANKD_LOCAL_RANK)
 * and checks what each prints.
 *
 *   c_rank ops    every operation with exact values, on a world of 2, and
 *                 refusals of bad arguments with their codes; prints
 *                 "C RANK <r> OK".
 *   c_rank lost   rank 1 dies (exit 3, no leave) once both opened a
 *                 session; rank 0's pending receive fails naming it, its
 *                 failure callback ran and rankd_job_health says why;
 *                 prints "LOST <code>: <message>".
 *   c_rank empty  tensors of no rows (docs/contract.md, "Empty values")
 *                 through every operation, pairing in order; a [2, 0]
 *                 tensor refused; a receive of no rows that rank 0 never
 *                 sends fails naming rank 0; prints "C EMPTY <r> OK".
 *   c_rank rejoin (rankd --recovery=on) rank 1 dies (exit 3) after a
 *                 round; rank 0 sees the loss, rankd_rejoin(1) enters
 *                 epoch 2 once capi_test started a replacement c_rank for
 *                 rank 1 (which finds itself at epoch 2), and both run a
 *                 round there; prints "C REJOIN <r> OK".
 *   c_rank narrowed  sessions opened with restrict_capabilities and
 *                 restrict_groups refuse what was left out, naming the
 *                 capability, and run the rest; an ABI-1-sized options
 *                 struct is read; prints "C NARROWED <r> OK".
 *   c_rank poison rankd_session_poison, rankd_session_abort and
 *                 rankd_session_poison_status: their refusals; a poisoned
 *                 session refuses operations with the cause, which stays
 *                 the first; an abort ends rank 0's pending receive at once
 *                 with its cause; prints "C POISON <r> OK".
 *
 * Exits 1 with "FAILED: ..." on the first unexpected result. */
#define _DEFAULT_SOURCE /* usleep, setenv */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capi/testing/c_checks.h"
#include "rankd/rankd.h"

static rankd_tensor F32(float* data, size_t ndim, const size_t* shape) {
  rankd_tensor t;
  t.data = data;
  t.dtype = RANKD_F32;
  t.ndim = ndim;
  t.shape = shape;
  return t;
}

static void ExpectFloats(const float* got, const float* want, size_t n,
                         const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      Fail("%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
    }
  }
}

static void Wait(rankd_work* work, const char* what) {
  Ok(rankd_work_wait(work), what);
  rankd_work_free(work);
}

static rankd_session* OpenGloo(rankd_rank* rank, double op_timeout) {
  rankd_session_options options;
  rankd_session_options_init(&options);
  options.backend = RANKD_BACKEND_GLOO;
  options.op_timeout_seconds = op_timeout;
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, &options, &session), "a Gloo session");
  return session;
}

/* Every rank contributes its rank + 1 to a sum over the world: the sum of
 * 1..world, or Fail naming `what`. */
static void ExpectRankSum(rankd_session* session, uint32_t world,
                          const char* what) {
  float value = (float)(my_rank + 1), sum = 0;
  const size_t shape[1] = {1};
  rankd_tensor in = {&value, RANKD_F32, 1, shape};
  rankd_tensor out = {&sum, RANKD_F32, 1, shape};
  rankd_work* work = NULL;
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
     what);
  Wait(work, what);
  if (sum != (float)(world * (world + 1) / 2)) Fail("%s: sum %f", what, sum);
}

static void Ops(rankd_rank* rank, uint32_t world) {
  if (world != 2) Fail("ops needs a world of 2, got %u", world);
  const uint32_t r = my_rank, peer = 1 - my_rank;

  /* Groups: the world first, with both ranks. */
  rankd_group g;
  Ok(rankd_rank_group(rank, 0, &g), "rankd_rank_group");
  if (g.id != RANKD_WORLD_GROUP || strcmp(g.kind, "world") != 0 ||
      g.size != 2 || g.members[0] != 0 || g.members[1] != 1 ||
      g.local_rank != r) {
    Fail("world group: id %u kind %s size %u local %u", g.id, g.kind, g.size,
         g.local_rank);
  }
  Refused(rankd_rank_group(rank, 99, &g), RANKD_OUT_OF_RANGE, "99", "group 99");

  /* all_gather_words: [7, 9] from both gives [7, 9, 7, 9]; then a frame
   * that says who sent it. */
  uint32_t words[2] = {7, 9}, gathered[4] = {0};
  Ok(rankd_all_gather_words(rank, words, 2, 30, gathered, 4), "words");
  const uint32_t want_words[4] = {7, 9, 7, 9};
  if (memcmp(gathered, want_words, sizeof(gathered)) != 0) {
    Fail("words: %u %u %u %u", gathered[0], gathered[1], gathered[2],
         gathered[3]);
  }
  /* With its view: a job without recovery by domain spans the whole world
   * and lists no domains. `domains` holds data_parallel (here 2) entries. */
  rankd_domain_epoch domains[2] = {{99, 99}, {99, 99}};
  size_t out_words = 0, domain_count = 7;
  int partial = 7;
  memset(gathered, 0, sizeof(gathered));
  Ok(rankd_all_gather_words_with_view(rank, words, 2, 30, gathered, 4,
                                      &out_words, &partial, domains, 2,
                                      &domain_count),
     "words with view");
  if (memcmp(gathered, want_words, sizeof(gathered)) != 0 || out_words != 4 ||
      partial != 0 || domain_count != 0) {
    Fail("words with view: %u %u %u %u, %zu words, partial %d, %zu domains",
         gathered[0], gathered[1], gathered[2], gathered[3], out_words, partial,
         domain_count);
  }
  Refused(rankd_all_gather_words_with_view(rank, words, 2, 30, gathered, 4,
                                           &out_words, &partial, domains, 1,
                                           &domain_count),
          RANKD_INVALID_ARGUMENT, "data-parallel replicas",
          "words with view, no room for domains");
  Refused(rankd_all_gather_words_with_view(rank, words, 2, 30, gathered, 4,
                                           &out_words, NULL, domains, 2,
                                           &domain_count),
          RANKD_INVALID_ARGUMENT, "partial", "words with view, NULL partial");
  /* Both blocking forms check their buffers alike (capi/rank.cc,
   * CheckRoundBuffers), naming themselves. */
  Refused(rankd_all_gather_words(rank, words, 2, 30, gathered, 3),
          RANKD_INVALID_ARGUMENT,
          "rankd_all_gather_words: out holds 3 words; the result needs 4 "
          "(world size x words per rank)",
          "words into a short buffer");
  Refused(rankd_all_gather_words_with_view(rank, words, 2, 30, gathered, 3,
                                           &out_words, &partial, domains, 2,
                                           &domain_count),
          RANKD_INVALID_ARGUMENT,
          "rankd_all_gather_words_with_view: out holds 3 words; the result "
          "needs 4 (world size x words per rank)",
          "words with view into a short buffer");
  Refused(rankd_all_gather_words(rank, NULL, 2, 30, gathered, 4),
          RANKD_INVALID_ARGUMENT,
          "rankd_all_gather_words: words is NULL with count 2",
          "words, NULL words");
  Refused(rankd_all_gather_words_with_view(rank, NULL, 2, 30, gathered, 4,
                                           &out_words, &partial, domains, 2,
                                           &domain_count),
          RANKD_INVALID_ARGUMENT,
          "rankd_all_gather_words_with_view: words is NULL with count 2",
          "words with view, NULL words");
  Refused(rankd_all_gather_words(rank, words, 2, 0, gathered, 4),
          RANKD_INVALID_ARGUMENT, "timeout_seconds", "words, zero timeout");
  uint32_t mine = 100 + r;
  rankd_pending_words* pending = NULL;
  Ok(rankd_submit_all_gather_words(rank, &mine, 1, 30, &pending), "submit");
  Ok(rankd_pending_words_wait(pending, INFINITY, gathered, 4), "pending");
  if (gathered[0] != 100 || gathered[1] != 101) {
    Fail("pending words: %u %u", gathered[0], gathered[1]);
  }
  if (!rankd_pending_words_is_ready(pending)) Fail("pending not ready");
  rankd_pending_words_free(pending);

  /* Key-value broker. */
  if (r == 0) Ok(rankd_kv_set(rank, "c/blob", "hello", 5), "kv_set");
  rankd_bytes* blob = NULL;
  Ok(rankd_kv_get(rank, "c/blob", 30, &blob), "kv_get");
  if (rankd_bytes_size(blob) != 5 ||
      memcmp(rankd_bytes_data(blob), "hello", 5) != 0) {
    Fail("kv_get: %zu bytes", rankd_bytes_size(blob));
  }
  rankd_bytes_free(blob);
  /* Keys have owners: each rank's counter is its own ("r<rank>/"), and
   * another rank's key is refused. */
  int64_t counter = 0;
  char own_counter[32];
  snprintf(own_counter, sizeof(own_counter), "r%u/c/counter", (unsigned)r);
  Ok(rankd_kv_add(rank, own_counter, 5, &counter), "kv_add");
  if (counter != 5) Fail("kv_add gave %lld", (long long)counter);
  if (r == 1) {
    Refused(rankd_kv_set(rank, "c/blob", "x", 1), RANKD_PERMISSION_DENIED,
            "rank 0 created it", "kv_set of rank 0's key");
  }
  rankd_status* missing = rankd_kv_get(rank, "c/never", 0.2, &blob);
  if (rankd_status_is_wait_timeout(missing)) {
    Fail("kv_get's deadline is marked as a bounded wait's timeout");
  }
  Refused(missing, RANKD_DEADLINE_EXCEEDED, "c/never",
          "kv_get of a missing key");
  /* A timeout of 0 reads without waiting. */
  Refused(rankd_kv_get(rank, "c/never", 0, &blob), RANKD_NOT_FOUND, "c/never",
          "kv_get of a missing key without waiting");

  /* Shared keys (the harness declares "shared/" shared) are written with
   * compare-and-set: rank 0 creates the slot, rank 1 replaces it only with
   * the value it holds and deletes it likewise. */
  int stored = -1;
  int deleted = -1;
  if (r == 0) {
    Ok(rankd_kv_compare_set(rank, "shared/c/slot", 1, NULL, 0, "zero", 4,
                            &stored),
       "kv_compare_set create");
    if (stored != 1) Fail("kv_compare_set create stored %d", stored);
    Ok(rankd_kv_compare_set(rank, "shared/c/mine", 1, NULL, 0, "a", 1, &stored),
       "kv_compare_set create");
    Ok(rankd_kv_compare_set(rank, "shared/c/mine", 1, NULL, 0, "b", 1, &stored),
       "kv_compare_set create again");
    if (stored != 0) Fail("a second create-only set stored");
    Refused(rankd_kv_set(rank, "shared/c/mine", "c", 1),
            RANKD_PERMISSION_DENIED, "shared/c/mine",
            "an unconditional set of a shared key");
  } else {
    Ok(rankd_kv_get(rank, "shared/c/slot", 30, &blob), "kv_get slot");
    rankd_bytes_free(blob);
    Ok(rankd_kv_compare_set(rank, "shared/c/slot", 0, "wrong", 5, "one", 3,
                            &stored),
       "kv_compare_set wrong");
    if (stored != 0) Fail("kv_compare_set stored over an unexpected value");
    Ok(rankd_kv_compare_set(rank, "shared/c/slot", 0, "zero", 4, "one", 3,
                            &stored),
       "kv_compare_set");
    if (stored != 1) Fail("kv_compare_set did not store");
    Ok(rankd_kv_compare_delete(rank, "shared/c/slot", "zero", 4, &deleted),
       "kv_compare_delete wrong");
    if (deleted != 0) Fail("kv_compare_delete deleted an unexpected value");
    Ok(rankd_kv_compare_delete(rank, "shared/c/slot", "one", 3, &deleted),
       "kv_compare_delete");
    if (deleted != 1) Fail("kv_compare_delete did not delete");
  }

  /* A pending round's bounded wait that runs out while a rank holds back
   * (rank 1 submits only once rank 0 has seen the timeout): the wait's own
   * timeout, marked as such; the round stays in flight and completes. */
  if (r == 0) {
    Ok(rankd_submit_all_gather_words(rank, &mine, 1, 30, &pending),
       "submit a held round");
    rankd_status* early = rankd_pending_words_wait(pending, 0.2, gathered, 4);
    if (!rankd_status_is_wait_timeout(early)) {
      Fail(
          "an early wait on a held round is not marked as the wait's own "
          "timeout");
    }
    Refused(early, RANKD_DEADLINE_EXCEEDED, "still pending",
            "an early wait on a held round");
    if (rankd_pending_words_is_ready(pending)) Fail("held round is ready");
    Ok(rankd_kv_set(rank, "c/go", "1", 1), "kv_set c/go");
  } else {
    Ok(rankd_kv_get(rank, "c/go", 30, &blob), "kv_get c/go");
    rankd_bytes_free(blob);
    Ok(rankd_submit_all_gather_words(rank, &mine, 1, 30, &pending),
       "submit a held round");
  }
  Ok(rankd_pending_words_wait(pending, INFINITY, gathered, 4), "held round");
  if (gathered[0] != 100 || gathered[1] != 101) {
    Fail("held round: %u %u", gathered[0], gathered[1]);
  }
  rankd_pending_words_free(pending);

  /* A Gloo session. */
  rankd_session_options options;
  rankd_session_options_init(&options);
  options.op_timeout_seconds = 30;
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, &options, &session), "rankd_session_open");
  rankd_capabilities caps;
  caps.struct_size = sizeof(caps);
  Ok(rankd_session_capabilities(session, &caps), "capabilities");
  if (!caps.world_collectives || !caps.point_to_point ||
      !caps.variable_all_to_all || !caps.exact_completion) {
    Fail("capabilities %d %d %d %d", caps.world_collectives,
         caps.point_to_point, caps.variable_all_to_all, caps.exact_completion);
  }
  if (rankd_session_backend(session) != RANKD_BACKEND_GLOO) Fail("backend");

  /* all_reduce_sum: [1, 2] + [3, 4] = [4, 6]; in place too. */
  const size_t two[1] = {2};
  float x[2] = {1.0f + 2 * r, 2.0f + 2 * r}, sum[2] = {0, 0};
  rankd_tensor in = F32(x, 1, two), out = F32(sum, 1, two);
  rankd_work* work = NULL;
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
     "all_reduce_sum");
  Wait(work, "all_reduce_sum wait");
  const float want_sum[2] = {4, 6};
  ExpectFloats(sum, want_sum, 2, "all_reduce_sum");
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &in, NULL, &work),
     "all_reduce_sum in place");
  if (!rankd_work_supports_cancellation(work, RANKD_NATIVE_CANCEL)) {
    Fail("native cancellation not supported");
  }
  Ok(rankd_work_wait_bounded(work, 30, RANKD_QUARANTINE_UNTIL_COMPLETE),
     "bounded wait");
  rankd_work_free(work);
  ExpectFloats(x, want_sum, 2, "all_reduce_sum in place");

  /* all_gather: [2, 3] on both gives [2, 3, 2, 3]; [10r, 10r+1] gives
   * [0, 1, 10, 11]. */
  float g_in[2] = {2, 3}, g_out[4] = {0};
  const size_t four[1] = {4};
  rankd_tensor gi = F32(g_in, 1, two), go = F32(g_out, 1, four);
  Ok(rankd_all_gather(session, RANKD_WORLD_GROUP, &gi, &go, NULL, &work),
     "all_gather");
  Wait(work, "all_gather wait");
  const float want_gather[4] = {2, 3, 2, 3};
  ExpectFloats(g_out, want_gather, 4, "all_gather");
  g_in[0] = 10.0f * r;
  g_in[1] = 10.0f * r + 1;
  Ok(rankd_all_gather(session, RANKD_WORLD_GROUP, &gi, &go, NULL, &work),
     "all_gather 2");
  /* Polled to completion: is_complete delivers the output too. */
  while (!rankd_work_is_complete(work)) usleep(100);
  rankd_work_free(work);
  const float want_gather2[4] = {0, 1, 10, 11};
  ExpectFloats(g_out, want_gather2, 4, "all_gather polled");

  /* all_to_all_v: rank 0 sends 1 row to itself and 2 to rank 1; rank 1
   * sends 3 rows to rank 0 and none to itself. Rows are [value]. */
  {
    size_t send0[2] = {1, 2}, recv0[2] = {1, 3};
    size_t send1[2] = {3, 0}, recv1[2] = {2, 0};
    const size_t* send = r == 0 ? send0 : send1;
    const size_t* recv = r == 0 ? recv0 : recv1;
    float a_in[3], a_out[4] = {0};
    const size_t in_rows[1] = {3};
    const size_t out_rows[1] = {r == 0 ? 4u : 2u};
    for (int i = 0; i < 3; ++i) a_in[i] = 100.0f * r + i;
    rankd_tensor ai = F32(a_in, 1, in_rows), ao = F32(a_out, 1, out_rows);
    Ok(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &ai, send, recv, 2, &ao,
                          NULL, &work),
       "all_to_all_v");
    Wait(work, "all_to_all_v wait");
    /* rank 0: its own row 0, then rank 1's rows 100, 101, 102;
     * rank 1: rank 0's rows 1, 2. */
    const float want0[4] = {0, 100, 101, 102}, want1[2] = {1, 2};
    ExpectFloats(a_out, r == 0 ? want0 : want1, r == 0 ? 4 : 2, "all_to_all_v");
  }

  /* send / receive: rank 0 sends [5, 6] to rank 1. */
  float p2p[2] = {5, 6};
  rankd_tensor pt = F32(p2p, 1, two);
  if (r == 0) {
    Ok(rankd_send(session, RANKD_WORLD_GROUP, 1, &pt, NULL, &work), "send");
  } else {
    p2p[0] = p2p[1] = 0;
    Ok(rankd_receive(session, RANKD_WORLD_GROUP, 0, &pt, NULL, &work),
       "receive");
  }
  Wait(work, "send/receive wait");
  const float want_p2p[2] = {5, 6};
  ExpectFloats(p2p, want_p2p, 2, "receive");

  /* batch_send_receive: both swap [r, r] at once. */
  float give[2] = {(float)r, (float)r}, take[2] = {-1, -1};
  rankd_peer_tensor s_entry = {peer, F32(give, 1, two)};
  rankd_peer_tensor r_entry = {peer, F32(take, 1, two)};
  Ok(rankd_batch_send_receive(session, RANKD_WORLD_GROUP, &s_entry, 1, &r_entry,
                              1, NULL, &work),
     "batch_send_receive");
  Wait(work, "batch wait");
  const float want_take[2] = {(float)peer, (float)peer};
  ExpectFloats(take, want_take, 2, "batch_send_receive");

  /* Refusals: before any data moves, with precise codes. */
  const size_t three[1] = {3};
  rankd_tensor wrong = F32(sum, 1, three);
  Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &wrong, NULL,
                               &work),
          RANKD_INVALID_ARGUMENT, "f32[3]", "all_reduce_sum into f32[3]");
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, NULL, &out, NULL, &work),
      RANKD_INVALID_ARGUMENT, "input is NULL", "NULL input");
  Refused(rankd_all_reduce_sum(session, 77, &in, &out, NULL, &work),
          RANKD_NOT_FOUND, "77", "group 77");
  rankd_tensor bad_dtype = in;
  bad_dtype.dtype = 42;
  Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &bad_dtype,
                               &bad_dtype, NULL, &work),
          RANKD_INVALID_ARGUMENT, "not a rankd_dtype", "dtype 42");
  Refused(rankd_send(session, RANKD_WORLD_GROUP, 5, &pt, NULL, &work),
          RANKD_INVALID_ARGUMENT, "peer 5 is outside", "send to member 5");
  Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out,
                               (void*)&in, &work),
          RANKD_INVALID_ARGUMENT, "stream", "a stream on Gloo");
  /* Without the CUDA runtime an NCCL session is unavailable, naming what
   * was looked for (the loader reads the variable on first use, which this
   * is: the process never loaded CUDA). */
  setenv("RANKD_CUDART_LIBRARY", "/nonexistent/libcudart.so.13", 1);
  rankd_session_options nccl;
  rankd_session_options_init(&nccl);
  nccl.backend = RANKD_BACKEND_NCCL;
  rankd_session* unused = NULL;
  Refused(rankd_session_open(rank, &nccl, &unused), RANKD_UNAVAILABLE,
          "/nonexistent/libcudart.so.13", "an NCCL session without CUDA");

  /* The session is still usable after the refusals. */
  x[0] = 1;
  x[1] = 1;
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
     "all_reduce_sum after refusals");
  Wait(work, "last wait");
  const float want_two[2] = {2, 2};
  ExpectFloats(sum, want_two, 2, "all_reduce_sum after refusals");

  /* Done with the data plane everywhere before closing it. */
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 4), "barrier");
  rankd_session_free(session);

  /* A second session, rank 1 coming late: its rendezvous must not take the
   * first session's addresses (each session has keys of its own). */
  if (r == 1) usleep(500 * 1000);
  Ok(rankd_session_open(rank, &options, &session), "a second session");
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
     "all_reduce_sum on a second session");
  Wait(work, "wait on a second session");
  ExpectFloats(sum, want_two, 2, "all_reduce_sum on a second session");
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 4), "barrier");
  rankd_session_free(session);
  printf("C RANK %u OK\n", r);
}

/* Tensors of no rows (leading extent 0) through every operation. */
static void Empty(rankd_rank* rank, uint32_t world) {
  if (world != 2) Fail("empty needs a world of 2, got %u", world);
  const uint32_t r = my_rank, peer = 1 - my_rank;
  rankd_session_options options;
  rankd_session_options_init(&options);
  options.op_timeout_seconds = 30;
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, &options, &session), "rankd_session_open");
  rankd_work* work = NULL;
  const size_t none[2] = {0, 3}, two[1] = {2};
  /* NULL data is fine for a tensor with no elements. */
  rankd_tensor empty = F32(NULL, 2, none);

  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &empty, &empty, NULL,
                          &work),
     "all_reduce_sum of no rows");
  Wait(work, "all_reduce_sum of no rows");
  Ok(rankd_all_gather(session, RANKD_WORLD_GROUP, &empty, &empty, NULL, &work),
     "all_gather of no rows");
  Wait(work, "all_gather of no rows");
  const size_t zeros[2] = {0, 0};
  Ok(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &empty, zeros, zeros, 2,
                        &empty, NULL, &work),
     "all_to_all_v of no rows");
  Wait(work, "all_to_all_v of no rows");

  /* Rank 0 sends no rows, then [5, 6]; rank 1 receives them in that
   * order: the empty transfer pairs and the route stays in step. */
  float p2p[2] = {5, 6};
  rankd_tensor pt = F32(p2p, 1, two);
  if (r == 0) {
    Ok(rankd_send(session, RANKD_WORLD_GROUP, 1, &empty, NULL, &work),
       "send of no rows");
    Wait(work, "send of no rows");
    Ok(rankd_send(session, RANKD_WORLD_GROUP, 1, &pt, NULL, &work), "send");
  } else {
    Ok(rankd_receive(session, RANKD_WORLD_GROUP, 0, &empty, NULL, &work),
       "receive of no rows");
    Wait(work, "receive of no rows");
    p2p[0] = p2p[1] = 0;
    Ok(rankd_receive(session, RANKD_WORLD_GROUP, 0, &pt, NULL, &work),
       "receive");
  }
  Wait(work, "send/receive after no rows");
  const float want_p2p[2] = {5, 6};
  ExpectFloats(p2p, want_p2p, 2, "receive after a receive of no rows");

  /* A batch swapping no rows, then one swapping [r, r]. */
  rankd_peer_tensor e_send = {peer, empty}, e_receive = {peer, empty};
  Ok(rankd_batch_send_receive(session, RANKD_WORLD_GROUP, &e_send, 1,
                              &e_receive, 1, NULL, &work),
     "batch of no rows");
  Wait(work, "batch of no rows");
  float give[2] = {(float)r, (float)r}, take[2] = {-1, -1};
  rankd_peer_tensor s_entry = {peer, F32(give, 1, two)};
  rankd_peer_tensor r_entry = {peer, F32(take, 1, two)};
  Ok(rankd_batch_send_receive(session, RANKD_WORLD_GROUP, &s_entry, 1, &r_entry,
                              1, NULL, &work),
     "batch after no rows");
  Wait(work, "batch after no rows");
  const float want_take[2] = {(float)peer, (float)peer};
  ExpectFloats(take, want_take, 2, "batch after a batch of no rows");

  /* Only the leading extent may be 0. */
  const size_t inner[2] = {2, 0};
  rankd_tensor bad = F32(p2p, 2, inner);
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &bad, &bad, NULL, &work),
      RANKD_INVALID_ARGUMENT, "only the leading extent may be 0",
      "a [2, 0] tensor");
  uint32_t mine = r, gathered[2];
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);

  /* A receive of no rows whose send never comes waits for it, and fails
   * naming rank 0, instead of completing at once. */
  options.op_timeout_seconds = 1;
  Ok(rankd_session_open(rank, &options, &session), "a short session");
  if (r == 1) {
    Ok(rankd_receive(session, RANKD_WORLD_GROUP, 0, &empty, NULL, &work),
       "unpaired receive of no rows");
    rankd_status* s = rankd_work_wait(work);
    if (s == NULL) Fail("a receive of no rows completed without its send");
    printf("UNPAIRED %s: %s\n", rankd_code_name(rankd_status_code(s)),
           rankd_status_message(s));
    Refused(s, RANKD_DEADLINE_EXCEEDED, "rank 0 did not report operation #0",
            "an unpaired receive of no rows");
    rankd_work_free(work);
  }
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);
  printf("C EMPTY %u OK\n", r);
}

/* Sessions narrowed at open (rankd_session_options.restrict_*). */
static void Narrowed(rankd_rank* rank, uint32_t world) {
  if (world != 2) Fail("narrowed needs a world of 2, got %u", world);
  const uint32_t r = my_rank;
  uint32_t mine = r, gathered[2];
  /* A group other than the world: this rank's second one. */
  rankd_group other;
  Ok(rankd_rank_group(rank, 1, &other), "rankd_rank_group 1");

  rankd_capabilities allow;
  memset(&allow, 0, sizeof(allow));
  allow.struct_size = sizeof(allow);
  allow.world_collectives = 1;
  allow.exact_completion = 1;
  rankd_session_options options;
  rankd_session_options_init(&options);
  options.op_timeout_seconds = 30;
  options.restrict_capabilities = &allow;
  const uint32_t no_groups[1] = {0};
  options.restrict_groups = no_groups;
  options.restrict_group_count = 0;
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, &options, &session), "a narrowed session");
  rankd_capabilities caps;
  caps.struct_size = sizeof(caps);
  Ok(rankd_session_capabilities(session, &caps), "capabilities");
  if (!caps.world_collectives || caps.point_to_point ||
      caps.variable_all_to_all || !caps.exact_completion) {
    Fail("narrowed capabilities %d %d %d %d", caps.world_collectives,
         caps.point_to_point, caps.variable_all_to_all, caps.exact_completion);
  }
  if (!rankd_session_supports_group(session, RANKD_WORLD_GROUP) ||
      rankd_session_supports_group(session, other.id)) {
    Fail("narrowed groups: world %d, group %u %d",
         rankd_session_supports_group(session, RANKD_WORLD_GROUP), other.id,
         rankd_session_supports_group(session, other.id));
  }
  const size_t two[1] = {2};
  float x[2] = {1, 2}, y[2] = {0, 0};
  rankd_tensor in = F32(x, 1, two), out = F32(y, 1, two);
  rankd_work* work = NULL;
  Refused(rankd_send(session, RANKD_WORLD_GROUP, 1 - r, &in, NULL, &work),
          RANKD_UNIMPLEMENTED,
          "gloo backend: send needs capability 'point_to_point', which this "
          "backend does not advertise",
          "send on a narrowed session");
  const size_t counts[2] = {1, 1};
  Refused(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &in, counts, counts, 2,
                             &out, NULL, &work),
          RANKD_UNIMPLEMENTED, "'variable_all_to_all'",
          "all_to_all_v on a narrowed session");
  Refused(rankd_all_reduce_sum(session, other.id, &in, &out, NULL, &work),
          RANKD_UNIMPLEMENTED, "'collective_groups'",
          "all_reduce_sum on a group left out");
  /* What is allowed runs. */
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
     "all_reduce_sum on a narrowed session");
  Wait(work, "all_reduce_sum on a narrowed session");
  const float want[2] = {2, 4};
  ExpectFloats(y, want, 2, "all_reduce_sum on a narrowed session");
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);

  /* Only the world's collectives are left out; groups narrowed to one. */
  allow.world_collectives = 0;
  allow.point_to_point = 1;
  options.restrict_groups = &other.id;
  options.restrict_group_count = 1;
  Ok(rankd_session_open(rank, &options, &session), "a second narrowed session");
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
      RANKD_UNIMPLEMENTED, "needs capability 'world_collectives'",
      "all_reduce_sum on the world left out");
  Ok(rankd_all_reduce_sum(session, other.id, &in, &out, NULL, &work),
     "all_reduce_sum on the group kept");
  Wait(work, "all_reduce_sum on the group kept");
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);

  /* Malformed restrictions are refused before anything connects. */
  rankd_session* unused = NULL;
  options.restrict_groups = NULL;
  options.restrict_group_count = 2;
  Refused(rankd_session_open(rank, &options, &unused), RANKD_INVALID_ARGUMENT,
          "restrict_groups is NULL", "a group count without groups");
  options.restrict_group_count = 0;
  allow.struct_size = 4;
  Refused(rankd_session_open(rank, &options, &unused), RANKD_INVALID_ARGUMENT,
          "restrict_capabilities->struct_size", "a short rankd_capabilities");

  /* A caller built against ABI 1's header (no restrict_* fields) passes its
   * smaller struct: the session is not narrowed. */
  rankd_session_options old;
  rankd_session_options_init(&old);
  old.op_timeout_seconds = 30;
  old.restrict_capabilities = &allow; /* beyond its struct_size: unread */
  old.struct_size = offsetof(rankd_session_options, restrict_capabilities);
  Ok(rankd_session_open(rank, &old, &session), "an ABI-1-sized options struct");
  Ok(rankd_session_capabilities(session, &caps), "capabilities");
  if (!caps.world_collectives || !caps.point_to_point ||
      !caps.variable_all_to_all || !caps.exact_completion) {
    Fail("an ABI-1 session is narrowed: %d %d %d %d", caps.world_collectives,
         caps.point_to_point, caps.variable_all_to_all, caps.exact_completion);
  }
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);
  printf("C NARROWED %u OK\n", r);
}

/* Written on the library's thread, read on this one. */
static int failures_seen = 0;
static void OnFailure(void* user_data, rankd_code code, const char* message) {
  (void)message;
  __atomic_store_n((int*)user_data, (int)code, __ATOMIC_RELEASE);
}

static void Lost(rankd_rank* rank) {
  if (rankd_rank_recovery(rank) != RANKD_RECOVERY_OFF) {
    Fail("rankd_rank_recovery is %d in a job with --recovery=off",
         (int)rankd_rank_recovery(rank));
  }
  Ok(rankd_on_job_failure(rank, OnFailure, &failures_seen), "on_job_failure");
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, NULL, &session), "rankd_session_open");
  uint32_t mine = my_rank, gathered[2];
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  if (my_rank == 1) {
    fflush(stdout);
    _exit(3); /* dies without leaving */
  }
  float value[2] = {0, 0};
  const size_t two[1] = {2};
  rankd_tensor t = F32(value, 1, two);
  rankd_work* work = NULL;
  Ok(rankd_receive(session, RANKD_WORLD_GROUP, 1, &t, NULL, &work), "receive");
  rankd_status* s = rankd_work_wait(work);
  if (s == NULL) Fail("the receive from a dead rank succeeded");
  if (strstr(rankd_status_message(s), "rank 1") == NULL) {
    Fail("the error does not name rank 1: %s", rankd_status_message(s));
  }
  printf("LOST %s: %s\n", rankd_code_name(rankd_status_code(s)),
         rankd_status_message(s));
  rankd_status_free(s);
  rankd_work_free(work);
  rankd_status* health = rankd_job_health(rank);
  if (health == NULL) Fail("rankd_job_health says healthy");
  printf("HEALTH %s: %s\n", rankd_code_name(rankd_status_code(health)),
         rankd_status_message(health));
  rankd_status_free(health);
  /* The callback runs on a library thread (rankd.h), not necessarily
   * before rankd_job_health reports the failure: give it 10 s. */
  for (int i = 0;
       i < 10000 && __atomic_load_n(&failures_seen, __ATOMIC_ACQUIRE) == 0;
       ++i) {
    usleep(1000);
  }
  const int seen = __atomic_load_n(&failures_seen, __ATOMIC_ACQUIRE);
  if (seen != RANKD_ABORTED) {
    Fail("the failure callback saw code %d", seen);
  }
  printf("CALLBACK ABORTED\n");
  rankd_session_free(session);
}

static void Rejoin(rankd_rank* rank) {
  uint32_t mine = my_rank, gathered[2];
  const uint64_t epoch = rankd_rank_epoch(rank);
  if (rankd_rank_epoch(NULL) != 0) Fail("rankd_rank_epoch(NULL) is not 0");
  if (rankd_rank_recovery(NULL) != RANKD_RECOVERY_OFF) {
    Fail("rankd_rank_recovery(NULL) is not RANKD_RECOVERY_OFF");
  }
  if (rankd_rank_recovery(rank) != RANKD_RECOVERY_JOB) {
    Fail("rankd_rank_recovery is %d in a job with --recovery=on",
         (int)rankd_rank_recovery(rank));
  }
  if (epoch == 1) {
    Refused(rankd_rejoin(NULL, 1, 5), RANKD_INVALID_ARGUMENT, "rank",
            "rejoin of a NULL rank");
    Refused(rankd_rejoin(rank, 1, 0), RANKD_INVALID_ARGUMENT, "timeout",
            "rejoin with a zero timeout");
    /* Already past epoch 0: at once. */
    Ok(rankd_rejoin(rank, 0, 5), "rankd_rejoin(0) in epoch 1");
    Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "round");
    if (my_rank == 1) {
      fflush(stdout);
      _exit(3); /* dies without leaving */
    }
    rankd_status* health = NULL;
    for (int i = 0; i < 10000 && (health = rankd_job_health(rank)) == NULL;
         ++i) {
      usleep(1000);
    }
    if (health == NULL) Fail("rankd_job_health never saw rank 1 lost");
    if (strstr(rankd_status_message(health), "rank 1") == NULL) {
      Fail("the loss does not name rank 1: %s", rankd_status_message(health));
    }
    if (strstr(rankd_status_message(health), " epoch 1 ended (") == NULL) {
      Fail("the loss does not say epoch 1 ended: %s",
           rankd_status_message(health));
    }
    rankd_status_free(health);
    Ok(rankd_rejoin(rank, 1, 60), "rankd_rejoin(1)");
    if (rankd_rank_epoch(rank) != 2) {
      Fail("epoch %llu after rankd_rejoin(1)",
           (unsigned long long)rankd_rank_epoch(rank));
    }
    Ok(rankd_job_health(rank), "rankd_job_health after rankd_rejoin");
  } else if (epoch != 2) {
    Fail("joined into epoch %llu", (unsigned long long)epoch);
  }
  /* Round 1 of epoch 2, with the replacement. */
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2),
     "round in epoch 2");
  if (gathered[0] != 0 || gathered[1] != 1) {
    Fail("round in epoch 2 gave %u %u", gathered[0], gathered[1]);
  }
  /* A session opened in epoch 2 (not one of epoch 1 re-formed): the
   * survivor's and the replacement's opens meet in the epoch both are in
   * (the survivor's once used its join's epoch, and its open timed out). */
  rankd_session* session = OpenGloo(rank, 30);
  ExpectRankSum(session, 2, "all_reduce_sum in epoch 2");
  rankd_session_free(session);
  printf("C REJOIN %u OK\n", my_rank);
}

/* ---- rankd_session_reform (issue 38) ---- */

/* Bad arguments to rankd_session_reform are refused before anything ends:
 * the session still sums afterwards. */
static void ReformArguments(rankd_rank* rank, uint32_t world) {
  rankd_session* session = OpenGloo(rank, 30);
  Refused(rankd_session_reform(NULL, 1.0), RANKD_INVALID_ARGUMENT, "session",
          "reform of no session");
  Refused(rankd_session_reform(session, 0.0), RANKD_INVALID_ARGUMENT,
          "timeout_seconds", "reform with a zero timeout");
  ExpectRankSum(session, world, "all_reduce_sum after the refusals");
  uint32_t mine = my_rank, gathered[2];
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, world),
     "the last round");
  rankd_session_free(session);
  printf("C REFORM ARGS %u OK\n", my_rank);
}

/* ---- end of rankd_session_reform ---- */

/* ---- Poisoning and aborting a session (issue 33) ---- */

static double MonotonicSeconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void PoisonAndAbort(rankd_rank* rank, uint32_t world) {
  if (world != 2) Fail("poison needs a world of 2, got %u", world);
  const uint32_t r = my_rank;
  uint32_t mine = r, gathered[2];
  float x[2] = {1, 2}, y[2] = {0, 0};
  const size_t two[1] = {2};
  rankd_tensor in = F32(x, 1, two), out = F32(y, 1, two);
  rankd_work* work = NULL;
  char cause[128];

  /* Refusals latch nothing: the session still sums. */
  rankd_session* session = OpenGloo(rank, 30);
  ExpectPoisonRefusals(session);
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
     "all_reduce_sum after the refusals");
  Wait(work, "all_reduce_sum after the refusals");
  const float want[2] = {2, 4};
  ExpectFloats(y, want, 2, "all_reduce_sum after the refusals");

  /* Poison: operations are refused at once with the cause's code and
   * words; the first cause stays. */
  snprintf(cause, sizeof(cause), "rank %u drained by its scheduler", r);
  Ok(rankd_session_poison(session, RANKD_UNAVAILABLE, cause), "poison");
  ExpectCause(rankd_session_poison_status(session), RANKD_UNAVAILABLE, cause,
              "poison_status after poison");
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
      RANKD_UNAVAILABLE, cause, "all_reduce_sum on a poisoned session");
  Refused(rankd_send(session, RANKD_WORLD_GROUP, 1 - r, &in, NULL, &work),
          RANKD_UNAVAILABLE, cause, "send on a poisoned session");
  Ok(rankd_session_poison(session, RANKD_DATA_LOSS, "a second cause"),
     "a second poison");
  ExpectCause(rankd_session_poison_status(session), RANKD_UNAVAILABLE, cause,
              "poison_status after a second poison");
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);

  /* Abort: rank 0's receive that rank 1 never sends fails now with the
   * cause, not at op_timeout (60 s). Rank 1 aborts only after the barrier,
   * so that its teardown cannot fail rank 0's receive first. */
  session = OpenGloo(rank, 60);
  snprintf(cause, sizeof(cause), "rank %u: its peer was declared gone", r);
  if (r == 0) {
    Ok(rankd_receive(session, RANKD_WORLD_GROUP, 1, &out, NULL, &work),
       "a receive nobody sends");
    /* Most likely running by now (else it is refused as it comes up). */
    usleep(300 * 1000);
    const double start = MonotonicSeconds();
    Ok(rankd_session_abort(session, RANKD_ABORTED, cause), "abort");
    rankd_status* failed = rankd_work_wait(work);
    const double took = MonotonicSeconds() - start;
    Refused(failed, RANKD_ABORTED, cause, "the pending receive after abort");
    if (took > 20) Fail("the aborted receive took %.1f s to fail", took);
    rankd_work_free(work);
  }
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  if (r == 1) Ok(rankd_session_abort(session, RANKD_ABORTED, cause), "abort");
  ExpectCause(rankd_session_poison_status(session), RANKD_ABORTED, cause,
              "poison_status after abort");
  Ok(rankd_session_poison(session, RANKD_DATA_LOSS, "a later cause"),
     "poison after abort");
  Ok(rankd_session_abort(session, RANKD_DATA_LOSS, "a later cause"),
     "a second abort");
  ExpectCause(rankd_session_poison_status(session), RANKD_ABORTED, cause,
              "poison_status after a later poison and abort");
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
      RANKD_ABORTED, cause, "all_reduce_sum on an aborted session");
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);

  /* An INVALID_ARGUMENT cause is latched as FAILED_PRECONDITION, words
   * kept: a poisoned session never answers INVALID_ARGUMENT ("refused, the
   * session is still usable", docs/contract.md). */
  session = OpenGloo(rank, 30);
  Ok(rankd_session_poison(session, RANKD_INVALID_ARGUMENT, "members disagree"),
     "an INVALID_ARGUMENT cause");
  ExpectCause(rankd_session_poison_status(session), RANKD_FAILED_PRECONDITION,
              "members disagree", "poison_status of an INVALID_ARGUMENT cause");
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, NULL, &work),
      RANKD_FAILED_PRECONDITION, "members disagree",
      "all_reduce_sum after an INVALID_ARGUMENT cause");
  Ok(rankd_all_gather_words(rank, &mine, 1, 30, gathered, 2), "barrier");
  rankd_session_free(session);
  printf("C POISON %u OK\n", r);
}

/* ---- end of poisoning and aborting a session ---- */

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr,
            "usage: c_rank "
            "ops|lost|empty|narrowed|rejoin|reform-args|poison\n");
    return 2;
  }
  if (rankd_abi_version() != RANKD_ABI_VERSION) {
    Fail("library ABI %u, header %u", rankd_abi_version(), RANKD_ABI_VERSION);
  }
  rankd_rank* rank = NULL;
  Ok(rankd_join(NULL, &rank), "rankd_join from the environment");
  rankd_descriptor d;
  d.struct_size = sizeof(d);
  Ok(rankd_rank_descriptor(rank, &d), "rankd_rank_descriptor");
  my_rank = d.rank;
  if (strcmp(rankd_rank_job_id(rank), getenv("RANKD_JOB_ID")) != 0) {
    Fail("job id %s", rankd_rank_job_id(rank));
  }
  if (strcmp(argv[1], "ops") == 0) {
    Ops(rank, d.world_size);
  } else if (strcmp(argv[1], "lost") == 0) {
    Lost(rank);
  } else if (strcmp(argv[1], "empty") == 0) {
    Empty(rank, d.world_size);
  } else if (strcmp(argv[1], "rejoin") == 0) {
    Rejoin(rank);
  } else if (strcmp(argv[1], "narrowed") == 0) {
    Narrowed(rank, d.world_size);
  } else if (strcmp(argv[1], "reform-args") == 0) {
    ReformArguments(rank, d.world_size);
  } else if (strcmp(argv[1], "poison") == 0) {
    PoisonAndAbort(rank, d.world_size);
  } else {
    Fail("unknown scenario %s", argv[1]);
  }
  Ok(rankd_leave(rank), "rankd_leave");
  rankd_rank_free(rank);
  return 0;
}
