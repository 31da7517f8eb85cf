/* c_nccl_rank: one rank of a job, written in C against the C ABI alone
 * (rankd/rankd.h, librankd.so), running NCCL sessions on the caller's
 * device memory and CUDA streams. capi_nccl_test starts one per rank with
 * the launcher's environment ($RANKD_TARGET, $RANKD_JOB_ID,
 * $RANKD_LOCAL_RANK) and checks what each prints.
 *
 * The CUDA runtime the test itself calls (streams, memory, copies, host
 * functions) is the one rankd loaded: $RANKD_CUDART_LIBRARY when set (the
 * CPU stand-in in CI, whose "device" memory is host memory), else
 * libcudart.so.13 or .12 (a GPU host). Each rank drives the device of its
 * local rank.
 *
 *   c_nccl_rank ops         every operation with exact values (point to
 *                           point only on a world of 2 or more), on a
 *                           stream of the caller's and on NULL, the
 *                           stream ordering in both directions (the
 *                           caller's stream held by a host function),
 *                           refused arguments and a refused capturing
 *                           stream; prints "C NCCL RANK <r> OK"
 *   c_nccl_rank quarantine  a bounded wait that misses its deadline in
 *   c_nccl_rank native      each mode: DEADLINE_EXCEEDED, the session
 *                           poisoned; prints "C NCCL RANK <r> <mode> OK"
 *   c_nccl_rank narrowed    a session opened with restrict_capabilities
 *                           refuses point-to-point naming the capability,
 *                           runs collectives, and offers no quarantine
 *                           without exact_completion; prints
 *                           "C NCCL RANK <r> narrowed OK"
 *   c_nccl_rank poison      rankd_session_poison, rankd_session_abort and
 *                           rankd_session_poison_status: their refusals; a
 *                           poisoned session refuses operations with the
 *                           cause, which stays the first; an abort fails
 *                           work queued behind a held stream with its
 *                           cause; prints "C NCCL RANK <r> poison OK"
 *
 * Exits 1 with "FAILED: ..." on the first unexpected result. */
#define _DEFAULT_SOURCE /* usleep */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi/testing/c_checks.h"
#include "rankd/rankd.h"

/* ---- The CUDA runtime, as the test uses it ----------------------------- */

typedef void* Stream; /* cudaStream_t */
static struct {
  int (*SetDevice)(int);
  int (*GetDeviceCount)(int*);
  int (*StreamCreateWithFlags)(Stream*, unsigned);
  int (*StreamDestroy)(Stream);
  int (*StreamSynchronize)(Stream);
  int (*Malloc)(void**, size_t);
  int (*Free)(void*);
  int (*MemcpyAsync)(void*, const void*, size_t, int, Stream);
  int (*LaunchHostFunc)(Stream, void (*)(void*), void*);
  int (*StreamBeginCapture)(Stream, int);
  int (*StreamEndCapture)(Stream, void**);
  int (*GraphDestroy)(void*);
  void* PointerGetAttributes; /* present in the real runtime only */
} cuda;
enum { kHostToDevice = 1, kDeviceToHost = 2 };

static void Cuda(int error, const char* what) {
  if (error != 0) Fail("%s: CUDA error %d", what, error);
}

static void* Symbol(void* library, const char* name) {
  void* f = dlsym(library, name);
  if (f == NULL) Fail("the CUDA runtime lacks %s", name);
  return f;
}

/* After rankd opened its session, so the runtime rankd loaded is found
 * again (by its file, or by its soname with RTLD_NOLOAD). */
static void LoadCuda(void) {
  const char* path = getenv("RANKD_CUDART_LIBRARY");
  void* library = NULL;
  if (path != NULL && *path != '\0') {
    library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    const char* names[] = {"libcudart.so.13", "libcudart.so.12"};
    for (int i = 0; i < 2 && library == NULL; ++i) {
      library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    }
    for (int i = 0; i < 2 && library == NULL; ++i) {
      library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
  }
  if (library == NULL) Fail("cannot open the CUDA runtime: %s", dlerror());
  *(void**)&cuda.SetDevice = Symbol(library, "cudaSetDevice");
  *(void**)&cuda.GetDeviceCount = Symbol(library, "cudaGetDeviceCount");
  *(void**)&cuda.StreamCreateWithFlags =
      Symbol(library, "cudaStreamCreateWithFlags");
  *(void**)&cuda.StreamDestroy = Symbol(library, "cudaStreamDestroy");
  *(void**)&cuda.StreamSynchronize = Symbol(library, "cudaStreamSynchronize");
  *(void**)&cuda.Malloc = Symbol(library, "cudaMalloc");
  *(void**)&cuda.Free = Symbol(library, "cudaFree");
  *(void**)&cuda.MemcpyAsync = Symbol(library, "cudaMemcpyAsync");
  *(void**)&cuda.LaunchHostFunc = Symbol(library, "cudaLaunchHostFunc");
  *(void**)&cuda.StreamBeginCapture = Symbol(library, "cudaStreamBeginCapture");
  *(void**)&cuda.StreamEndCapture = Symbol(library, "cudaStreamEndCapture");
  *(void**)&cuda.GraphDestroy = Symbol(library, "cudaGraphDestroy");
  cuda.PointerGetAttributes = dlsym(library, "cudaPointerGetAttributes");
  /* rankd's session runs on the local rank's device; so does this rank. */
  const char* local = getenv("RANKD_LOCAL_RANK");
  Cuda(cuda.SetDevice(local == NULL ? 0 : atoi(local)), "cudaSetDevice");
}

static Stream NewStream(void) {
  Stream s = NULL;
  Cuda(cuda.StreamCreateWithFlags(&s, 1 /* non-blocking */),
       "cudaStreamCreateWithFlags");
  return s;
}

static void* DeviceAlloc(size_t bytes) {
  void* p = NULL;
  Cuda(cuda.Malloc(&p, bytes), "cudaMalloc");
  return p;
}

/* Synchronous copies on a stream of their own. */
static Stream copies;
static void Upload(void* device, const void* host, size_t bytes) {
  Cuda(cuda.MemcpyAsync(device, host, bytes, kHostToDevice, copies), "H2D");
  Cuda(cuda.StreamSynchronize(copies), "sync H2D");
}
static void Download(void* host, const void* device, size_t bytes) {
  Cuda(cuda.MemcpyAsync(host, device, bytes, kDeviceToHost, copies), "D2H");
  Cuda(cuda.StreamSynchronize(copies), "sync D2H");
}

/* A host function that holds its stream until released (or 30 s). */
static atomic_int released;
static void Hold(void* unused) {
  (void)unused;
  for (int i = 0; i < 30000 && !atomic_load(&released); ++i) usleep(1000);
}
static void HoldStream(Stream s) {
  atomic_store(&released, 0);
  Cuda(cuda.LaunchHostFunc(s, Hold, NULL), "cudaLaunchHostFunc");
}
static void ReleaseStream(void) { atomic_store(&released, 1); }

/* ---- Helpers ------------------------------------------------------------ */

static rankd_tensor Tensor(void* data, int32_t dtype, size_t ndim,
                           const size_t* shape) {
  rankd_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  t.shape = shape;
  return t;
}

static void Wait(rankd_work* work, const char* what) {
  Ok(rankd_work_wait(work), what);
  rankd_work_free(work);
}

static void ExpectFloats(const float* got, const float* want, size_t n,
                         const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      Fail("%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
    }
  }
}
static void ExpectInts(const int32_t* got, const int32_t* want, size_t n,
                       const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      Fail("%s: element %zu is %d, expected %d", what, i, got[i], want[i]);
    }
  }
}

static rankd_session* OpenNccl(rankd_rank* rank, double op_timeout) {
  rankd_session_options o;
  rankd_session_options_init(&o);
  o.backend = RANKD_BACKEND_NCCL;
  o.op_timeout_seconds = op_timeout;
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, &o, &session), "rankd_session_open (NCCL)");
  if (rankd_session_backend(session) != RANKD_BACKEND_NCCL) {
    Fail("the session's backend is %d", rankd_session_backend(session));
  }
  return session;
}

/* ---- ops ---------------------------------------------------------------- */

static void Ops(rankd_rank* rank, uint32_t world) {
  const uint32_t r = my_rank;
  rankd_session* session = OpenNccl(rank, 30);
  LoadCuda();
  rankd_capabilities caps;
  caps.struct_size = sizeof(caps);
  Ok(rankd_session_capabilities(session, &caps), "capabilities");
  if (!caps.world_collectives || !caps.point_to_point ||
      !caps.variable_all_to_all || !caps.exact_completion) {
    Fail("capabilities %d %d %d %d", caps.world_collectives,
         caps.point_to_point, caps.variable_all_to_all, caps.exact_completion);
  }
  if (!rankd_session_supports_group(session, RANKD_WORLD_GROUP)) {
    Fail("the world group is not supported");
  }
  copies = NewStream();
  Stream stream = NewStream();
  rankd_work* work = NULL;

  /* all_reduce_sum on the caller's stream: the result is read by a copy
   * queued on that stream, without waiting for the work. */
  {
    const size_t shape[1] = {4};
    float x[4], want[4], got[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = 10.0f * r + i + 1;
      want[i] = 0;
      for (uint32_t m = 0; m < world; ++m) want[i] += 10.0f * m + i + 1;
    }
    float* dx = DeviceAlloc(sizeof(x));
    float* dy = DeviceAlloc(sizeof(x));
    Upload(dx, x, sizeof(x));
    rankd_tensor in = Tensor(dx, RANKD_F32, 1, shape);
    rankd_tensor out = Tensor(dy, RANKD_F32, 1, shape);
    Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, stream,
                            &work),
       "all_reduce_sum");
    Cuda(cuda.MemcpyAsync(got, dy, sizeof(got), kDeviceToHost, stream),
         "D2H on the caller's stream");
    Cuda(cuda.StreamSynchronize(stream), "sync the caller's stream");
    ExpectFloats(got, want, 4, "all_reduce_sum, read in stream order");
    if (!rankd_work_is_complete(work)) {
      Fail("the caller's stream passed the work, which is not complete");
    }
    Wait(work, "all_reduce_sum");

    /* In place, NULL stream: inputs ready before the call, outputs valid
     * once the work completed. */
    Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &in, NULL, &work),
       "all_reduce_sum in place");
    Wait(work, "all_reduce_sum in place");
    Download(got, dx, sizeof(got));
    ExpectFloats(got, want, 4, "all_reduce_sum in place (NULL stream)");
    printf("CASE all_reduce_sum OK\n");

    /* Refusals, before anything moves. */
    const size_t three[1] = {3};
    rankd_tensor short_out = Tensor(dy, RANKD_F32, 1, three);
    Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &short_out,
                                 stream, &work),
            RANKD_INVALID_ARGUMENT, "the output is", "an output of 3 of 4");
    rankd_tensor bad = in;
    bad.dtype = 42;
    Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &bad, &bad, stream,
                                 &work),
            RANKD_INVALID_ARGUMENT, "not a rankd_dtype", "dtype 42");
    bad = in;
    bad.data = NULL;
    Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &bad, &out, stream,
                                 &work),
            RANKD_INVALID_ARGUMENT, "input.data is NULL", "NULL data");
    Refused(rankd_all_reduce_sum(session, 999, &in, &out, stream, &work),
            RANKD_NOT_FOUND, "999", "group 999");
    Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, stream,
                                 NULL),
            RANKD_INVALID_ARGUMENT, "work is NULL", "work NULL");
    if (world == 2) {
      /* An all_gather whose output (8 floats) starts at its input (the
       * first 4). */
      const size_t eight[1] = {8};
      float* d8 = DeviceAlloc(8 * sizeof(float));
      rankd_tensor in4 = Tensor(d8, RANKD_F32, 1, shape);
      rankd_tensor gathered_over_input = Tensor(d8, RANKD_F32, 1, eight);
      Refused(rankd_all_gather(session, RANKD_WORLD_GROUP, &in4,
                               &gathered_over_input, stream, &work),
              RANKD_INVALID_ARGUMENT, "overlaps the input",
              "all_gather over its input");
      Cuda(cuda.Free(d8), "cudaFree");
    }
    if (cuda.PointerGetAttributes != NULL) {
      /* The real runtime says where memory is: host memory is refused. */
      float host[4] = {0};
      rankd_tensor on_host = Tensor(host, RANKD_F32, 1, shape);
      Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &on_host,
                                   &on_host, stream, &work),
              RANKD_INVALID_ARGUMENT, "host memory", "host memory");
    } else {
      printf(
          "SKIPPED host memory refusal: this CUDA runtime has no "
          "cudaPointerGetAttributes (the CPU stand-in)\n");
    }
    /* A caller's stream that is capturing a CUDA graph (torch.cuda.graph
     * on every rank): refused before anything is queued on it, so the
     * capture ends unbroken, and the session stays usable. */
    {
      Stream capturing = NewStream();
      Cuda(cuda.StreamBeginCapture(capturing, 2 /* relaxed */),
           "cudaStreamBeginCapture");
      Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out,
                                   capturing, &work),
              RANKD_FAILED_PRECONDITION,
              "rankd_all_reduce_sum: the caller's stream is capturing a CUDA "
              "graph",
              "a capturing stream");
      void* graph = NULL;
      Cuda(cuda.StreamEndCapture(capturing, &graph),
           "cudaStreamEndCapture after rankd refused");
      if (graph != NULL) Cuda(cuda.GraphDestroy(graph), "cudaGraphDestroy");
      Cuda(cuda.StreamDestroy(capturing), "cudaStreamDestroy");
      printf("CASE capturing stream refused OK\n");
    }
    int devices = 0;
    Cuda(cuda.GetDeviceCount(&devices), "cudaGetDeviceCount");
    if (devices >= 2) {
      /* A stream of another device. */
      const char* local = getenv("RANKD_LOCAL_RANK");
      const int mine = local == NULL ? 0 : atoi(local);
      const int other = (mine + 1) % devices;
      Cuda(cuda.SetDevice(other), "cudaSetDevice(other)");
      Stream foreign = NewStream();
      Cuda(cuda.SetDevice(mine), "cudaSetDevice(mine)");
      Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out,
                                   foreign, &work),
              RANKD_INVALID_ARGUMENT, "stream must be a CUDA stream of",
              "a stream of another device");
      if (world == 2) {
        /* all_to_all_v checks its counts first, so the member that refuses
         * its own arguments (rank 1: that foreign stream) tells the other,
         * which refuses too instead of waiting for op_timeout. */
        size_t counts[2] = {1, 1};
        const size_t rows[2] = {2, 2};
        int32_t* da = DeviceAlloc(4 * sizeof(int32_t));
        int32_t* db = DeviceAlloc(4 * sizeof(int32_t));
        rankd_tensor a = Tensor(da, RANKD_I32, 2, rows);
        rankd_tensor b = Tensor(db, RANKD_I32, 2, rows);
        if (r == 1) {
          Refused(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &a, counts,
                                     counts, 2, &b, foreign, &work),
                  RANKD_INVALID_ARGUMENT, "are told and refuse it too",
                  "all_to_all_v on a foreign stream");
        } else {
          Ok(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &a, counts, counts,
                                2, &b, stream, &work),
             "all_to_all_v while rank 1 refuses");
          Refused(rankd_work_wait(work), RANKD_INVALID_ARGUMENT,
                  "rank 1 refused it on its own arguments",
                  "all_to_all_v refused by rank 1");
          rankd_work_free(work);
        }
        Cuda(cuda.Free(da), "cudaFree");
        Cuda(cuda.Free(db), "cudaFree");
        printf("CASE told refusal OK\n");
      }
      Cuda(cuda.StreamDestroy(foreign), "cudaStreamDestroy");
    }
    Cuda(cuda.Free(dx), "cudaFree");
    Cuda(cuda.Free(dy), "cudaFree");
  }

  /* Stream order, both ways: the caller's stream is held, and the input
   * is uploaded on it behind the hold; the collective must read the
   * uploaded values (so it waits for the hold), and the caller's copy of
   * the result queued right after the submission must see the sum. */
  {
    const size_t shape[1] = {3};
    int32_t x[3], zeros[3] = {0, 0, 0}, want[3], got[3];
    for (int i = 0; i < 3; ++i) {
      x[i] = (int32_t)(100 * (r + 1) + i);
      want[i] = 0;
      for (uint32_t m = 0; m < world; ++m) want[i] += 100 * (m + 1) + i;
    }
    int32_t* dx = DeviceAlloc(sizeof(x));
    int32_t* dy = DeviceAlloc(sizeof(x));
    Upload(dx, zeros, sizeof(zeros));
    Upload(dy, zeros, sizeof(zeros));
    HoldStream(stream);
    Cuda(cuda.MemcpyAsync(dx, x, sizeof(x), kHostToDevice, stream),
         "H2D behind the hold");
    rankd_tensor in = Tensor(dx, RANKD_I32, 1, shape);
    rankd_tensor out = Tensor(dy, RANKD_I32, 1, shape);
    Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &in, &out, stream,
                            &work),
       "all_reduce_sum behind a held stream");
    usleep(300 * 1000);
    if (rankd_work_is_complete(work)) {
      Fail("the work completed while the caller's stream was held");
    }
    ReleaseStream();
    Cuda(cuda.MemcpyAsync(got, dy, sizeof(got), kDeviceToHost, stream),
         "D2H after the work");
    Cuda(cuda.StreamSynchronize(stream), "sync");
    ExpectInts(got, want, 3, "all_reduce_sum in stream order");
    Wait(work, "all_reduce_sum behind a held stream");
    Cuda(cuda.Free(dx), "cudaFree");
    Cuda(cuda.Free(dy), "cudaFree");
    printf("CASE stream_order OK\n");
  }

  /* all_gather: [2, 3] rows of r*100 + k give [2 * world, 3]. */
  {
    const size_t in_shape[2] = {2, 3};
    const size_t out_shape[2] = {2 * world, 3};
    float x[6], got[6 * 8], want[6 * 8];
    for (int k = 0; k < 6; ++k) x[k] = 100.0f * r + k;
    for (uint32_t m = 0; m < world; ++m) {
      for (int k = 0; k < 6; ++k) want[m * 6 + k] = 100.0f * m + k;
    }
    float* dx = DeviceAlloc(sizeof(x));
    float* dy = DeviceAlloc(world * sizeof(x));
    Upload(dx, x, sizeof(x));
    rankd_tensor in = Tensor(dx, RANKD_F32, 2, in_shape);
    rankd_tensor out = Tensor(dy, RANKD_F32, 2, out_shape);
    Ok(rankd_all_gather(session, RANKD_WORLD_GROUP, &in, &out, stream, &work),
       "all_gather");
    Wait(work, "all_gather");
    Download(got, dy, world * sizeof(x));
    ExpectFloats(got, want, 6 * world, "all_gather");
    Cuda(cuda.Free(dx), "cudaFree");
    Cuda(cuda.Free(dy), "cudaFree");
    printf("CASE all_gather OK\n");
  }

  /* all_to_all_v: rank r sends r + d + 1 rows of 2 to member d; element c
   * of row j from s to d is 10000 s + 100 d + 10 j + c. */
  {
    size_t send_counts[8], receive_counts[8], sent = 0, received = 0;
    for (uint32_t m = 0; m < world; ++m) {
      send_counts[m] = r + m + 1;
      receive_counts[m] = m + r + 1;
      sent += send_counts[m];
      received += receive_counts[m];
    }
    int32_t x[64], want[64], got[64];
    size_t k = 0;
    for (uint32_t d = 0; d < world; ++d) {
      for (size_t j = 0; j < send_counts[d]; ++j) {
        for (int c = 0; c < 2; ++c) x[k++] = 10000 * r + 100 * d + 10 * j + c;
      }
    }
    k = 0;
    for (uint32_t s = 0; s < world; ++s) {
      for (size_t j = 0; j < receive_counts[s]; ++j) {
        for (int c = 0; c < 2; ++c)
          want[k++] = 10000 * s + 100 * r + 10 * j + c;
      }
    }
    const size_t in_shape[2] = {sent, 2}, out_shape[2] = {received, 2};
    int32_t* dx = DeviceAlloc(sent * 2 * sizeof(int32_t));
    int32_t* dy = DeviceAlloc(received * 2 * sizeof(int32_t));
    Upload(dx, x, sent * 2 * sizeof(int32_t));
    rankd_tensor in = Tensor(dx, RANKD_I32, 2, in_shape);
    rankd_tensor out = Tensor(dy, RANKD_I32, 2, out_shape);
    Ok(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &in, send_counts,
                          receive_counts, world, &out, stream, &work),
       "all_to_all_v");
    Cuda(cuda.MemcpyAsync(got, dy, received * 2 * sizeof(int32_t),
                          kDeviceToHost, stream),
         "D2H on the caller's stream");
    Cuda(cuda.StreamSynchronize(stream), "sync");
    ExpectInts(got, want, received * 2, "all_to_all_v");
    Wait(work, "all_to_all_v");
    Refused(rankd_all_to_all_v(session, RANKD_WORLD_GROUP, &in, NULL,
                               receive_counts, world, &out, stream, &work),
            RANKD_INVALID_ARGUMENT, "send_counts", "NULL send_counts");
    Cuda(cuda.Free(dx), "cudaFree");
    Cuda(cuda.Free(dy), "cudaFree");
    printf("CASE all_to_all_v OK\n");
  }

  if (world >= 2) {
    /* send / receive: rank 0 to rank 1, then back; f64[5]. */
    const size_t shape[1] = {5};
    double x[5], got[5];
    double* d = DeviceAlloc(sizeof(x));
    for (int pass = 0; pass < 2; ++pass) {
      const uint32_t sender = pass == 0 ? 0 : 1, receiver = 1 - sender;
      rankd_tensor t = Tensor(d, RANKD_F64, 1, shape);
      if (r == sender) {
        for (int i = 0; i < 5; ++i) x[i] = 0.5 * i + 7 * pass;
        Upload(d, x, sizeof(x));
        Ok(rankd_send(session, RANKD_WORLD_GROUP, receiver, &t, stream, &work),
           "send");
        Wait(work, "send");
      } else if (r == receiver) {
        Ok(rankd_receive(session, RANKD_WORLD_GROUP, sender, &t, stream, &work),
           "receive");
        Cuda(cuda.MemcpyAsync(got, d, sizeof(got), kDeviceToHost, stream),
             "D2H on the caller's stream");
        Cuda(cuda.StreamSynchronize(stream), "sync");
        for (int i = 0; i < 5; ++i) {
          if (got[i] != 0.5 * i + 7 * pass) {
            Fail("receive pass %d: element %d is %g", pass, i, got[i]);
          }
        }
        Wait(work, "receive");
      }
    }
    Cuda(cuda.Free(d), "cudaFree");
    printf("CASE send_receive OK\n");

    /* batch_send_receive: a ring of u8[7] (send to r + 1, receive from
     * r - 1), posted together. */
    const size_t seven[1] = {7};
    uint8_t mine[7], theirs[7];
    const uint32_t next = (r + 1) % world, prev = (r + world - 1) % world;
    for (int i = 0; i < 7; ++i) mine[i] = (uint8_t)(r * 16 + i);
    uint8_t* ds = DeviceAlloc(7);
    uint8_t* dr = DeviceAlloc(7);
    Upload(ds, mine, 7);
    rankd_peer_tensor send = {next, Tensor(ds, RANKD_U8, 1, seven)};
    rankd_peer_tensor receive = {prev, Tensor(dr, RANKD_U8, 1, seven)};
    Ok(rankd_batch_send_receive(session, RANKD_WORLD_GROUP, &send, 1, &receive,
                                1, stream, &work),
       "batch_send_receive");
    Cuda(cuda.MemcpyAsync(theirs, dr, 7, kDeviceToHost, stream), "D2H");
    Cuda(cuda.StreamSynchronize(stream), "sync");
    for (int i = 0; i < 7; ++i) {
      if (theirs[i] != (uint8_t)(prev * 16 + i)) {
        Fail("batch_send_receive: element %d is %u", i, theirs[i]);
      }
    }
    Wait(work, "batch_send_receive");
    Refused(
        rankd_send(session, RANKD_WORLD_GROUP, 5, &send.tensor, stream, &work),
        RANKD_INVALID_ARGUMENT, "peer 5 is outside", "send to member 5");
    Cuda(cuda.Free(ds), "cudaFree");
    Cuda(cuda.Free(dr), "cudaFree");
    printf("CASE batch_send_receive OK\n");
  }

  /* The session is still usable after the refusals; the last round is a
   * barrier before closing. */
  uint32_t word = r, words[8];
  Ok(rankd_all_gather_words(rank, &word, 1, 30, words, world), "barrier");
  Cuda(cuda.StreamDestroy(stream), "cudaStreamDestroy");
  rankd_session_free(session);
  printf("C NCCL RANK %u OK\n", r);
}

/* ---- bounded waits ------------------------------------------------------ */

static void Bounded(rankd_rank* rank, uint32_t world, int32_t mode,
                    const char* name) {
  const uint32_t r = my_rank;
  rankd_session* session = OpenNccl(rank, 30);
  LoadCuda();
  copies = NewStream();
  Stream stream = NewStream();
  const size_t shape[1] = {2};
  float x[2] = {1, 2};
  float* d = DeviceAlloc(sizeof(x));
  Upload(d, x, sizeof(x));
  rankd_tensor t = Tensor(d, RANKD_F32, 1, shape);
  rankd_work* work = NULL;
  HoldStream(stream);
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, stream, &work),
     "all_reduce_sum behind a held stream");
  if (!rankd_work_supports_cancellation(work, mode)) {
    Fail("the work does not support %s", name);
  }
  Refused(rankd_work_wait_bounded(work, 0, mode), RANKD_INVALID_ARGUMENT,
          "timeout_seconds", "a zero timeout");
  rankd_status* missed = rankd_work_wait_bounded(work, 0.3, mode);
  if (!rankd_status_is_wait_timeout(missed)) {
    Fail("a missed deadline is not marked as the wait's timeout");
  }
  Refused(missed, RANKD_DEADLINE_EXCEEDED, "poisoned", "a missed deadline");
  /* Poisoned: later work fails at once. */
  rankd_work* later = NULL;
  rankd_status* s =
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, stream, &later);
  if (s == NULL) {
    rankd_status* w = rankd_work_wait(later);
    if (w == NULL) Fail("work after the missed deadline succeeded");
    rankd_status_free(w);
    rankd_work_free(later);
  } else {
    printf("REFUSED after the deadline: %s\n", rankd_status_message(s));
    rankd_status_free(s);
  }
  ReleaseStream();
  rankd_status* done = rankd_work_wait(work);
  if (done == NULL) Fail("the missed work reports success");
  if (rankd_status_is_wait_timeout(done)) {
    Fail("the missed work's own failure is marked as a wait's timeout");
  }
  printf("MISSED %s: %s\n", rankd_code_name(rankd_status_code(done)),
         rankd_status_message(done));
  rankd_status_free(done);
  rankd_work_free(work);
  Cuda(cuda.StreamSynchronize(stream), "sync");
  uint32_t word = r, words[8];
  Ok(rankd_all_gather_words(rank, &word, 1, 30, words, world), "barrier");
  rankd_session_free(session);
  Cuda(cuda.StreamDestroy(stream), "cudaStreamDestroy");
  Cuda(cuda.Free(d), "cudaFree");
  printf("C NCCL RANK %u %s OK\n", r, name);
}

/* ---- narrowed capabilities ---------------------------------------------- */

static void Narrowed(rankd_rank* rank, uint32_t world) {
  const uint32_t r = my_rank;
  rankd_capabilities allow;
  memset(&allow, 0, sizeof(allow));
  allow.struct_size = sizeof(allow);
  allow.world_collectives = 1;
  allow.variable_all_to_all = 1;
  rankd_session_options o;
  rankd_session_options_init(&o);
  o.backend = RANKD_BACKEND_NCCL;
  o.op_timeout_seconds = 30;
  o.restrict_capabilities = &allow;
  rankd_session* session = NULL;
  Ok(rankd_session_open(rank, &o, &session), "a narrowed NCCL session");
  LoadCuda();
  rankd_capabilities caps;
  caps.struct_size = sizeof(caps);
  Ok(rankd_session_capabilities(session, &caps), "capabilities");
  if (!caps.world_collectives || caps.point_to_point ||
      !caps.variable_all_to_all || caps.exact_completion) {
    Fail("narrowed capabilities %d %d %d %d", caps.world_collectives,
         caps.point_to_point, caps.variable_all_to_all, caps.exact_completion);
  }
  const size_t shape[1] = {2};
  float x[2] = {1, 2}, y[2] = {0, 0};
  float* d = DeviceAlloc(sizeof(x));
  Upload(d, x, sizeof(x));
  rankd_tensor t = Tensor(d, RANKD_F32, 1, shape);
  rankd_work* work = NULL;
  Refused(rankd_send(session, RANKD_WORLD_GROUP, 0, &t, NULL, &work),
          RANKD_UNIMPLEMENTED,
          "nccl backend: send needs capability 'point_to_point', which this "
          "backend does not advertise",
          "send on a narrowed NCCL session");
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, NULL, &work),
     "all_reduce_sum on a narrowed NCCL session");
  if (rankd_work_supports_cancellation(work, RANKD_QUARANTINE_UNTIL_COMPLETE)) {
    Fail("the quarantine is offered without exact_completion");
  }
  Wait(work, "all_reduce_sum on a narrowed NCCL session");
  Download(y, d, sizeof(y));
  const float want[2] = {1.0f * world, 2.0f * world};
  ExpectFloats(y, want, 2, "all_reduce_sum on a narrowed NCCL session");
  uint32_t word = r, words[8];
  Ok(rankd_all_gather_words(rank, &word, 1, 30, words, world), "barrier");
  rankd_session_free(session);
  Cuda(cuda.Free(d), "cudaFree");
  printf("C NCCL RANK %u narrowed OK\n", r);
}

/* ---- poisoning and aborting a session (issue 33) ------------------------ */

static void PoisonAndAbort(rankd_rank* rank, uint32_t world) {
  const uint32_t r = my_rank;
  rankd_session* session = OpenNccl(rank, 30);
  LoadCuda();
  copies = NewStream();
  Stream stream = NewStream();
  const size_t shape[1] = {2};
  float x[2] = {1, 2}, y[2] = {0, 0};
  float* d = DeviceAlloc(sizeof(x));
  Upload(d, x, sizeof(x));
  rankd_tensor t = Tensor(d, RANKD_F32, 1, shape);
  rankd_work* work = NULL;
  uint32_t word = r, words[8];
  char cause[128];

  /* Refusals latch nothing: the session still sums. */
  ExpectPoisonRefusals(session);
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, NULL, &work),
     "all_reduce_sum after the refusals");
  Wait(work, "all_reduce_sum after the refusals");
  Download(y, d, sizeof(y));
  const float want[2] = {1.0f * world, 2.0f * world};
  ExpectFloats(y, want, 2, "all_reduce_sum after the refusals");

  /* Poison: operations are refused at once with the cause's code and
   * words; the first cause stays. */
  snprintf(cause, sizeof(cause), "rank %u drained by its scheduler", r);
  Ok(rankd_session_poison(session, RANKD_UNAVAILABLE, cause), "poison");
  ExpectCause(rankd_session_poison_status(session), RANKD_UNAVAILABLE, cause,
              "poison_status after poison");
  Refused(
      rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, stream, &work),
      RANKD_UNAVAILABLE, cause, "all_reduce_sum on a poisoned session");
  Ok(rankd_session_poison(session, RANKD_DATA_LOSS, "a second cause"),
     "a second poison");
  ExpectCause(rankd_session_poison_status(session), RANKD_UNAVAILABLE, cause,
              "poison_status after a second poison");
  Ok(rankd_all_gather_words(rank, &word, 1, 30, words, world), "barrier");
  rankd_session_free(session);

  /* Abort: work queued behind the caller's held stream fails with the
   * cause once the stream moves, instead of running. Each rank aborts
   * before its stream is released, so the cause is always its own. */
  session = OpenNccl(rank, 30);
  snprintf(cause, sizeof(cause), "rank %u: its peer was declared gone", r);
  HoldStream(stream);
  Ok(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, stream, &work),
     "all_reduce_sum behind a held stream");
  Ok(rankd_session_abort(session, RANKD_ABORTED, cause), "abort");
  ReleaseStream();
  Refused(rankd_work_wait(work), RANKD_ABORTED, cause,
          "the held work after abort");
  rankd_work_free(work);
  ExpectCause(rankd_session_poison_status(session), RANKD_ABORTED, cause,
              "poison_status after abort");
  Ok(rankd_session_poison(session, RANKD_DATA_LOSS, "a later cause"),
     "poison after abort");
  Ok(rankd_session_abort(session, RANKD_DATA_LOSS, "a later cause"),
     "a second abort");
  ExpectCause(rankd_session_poison_status(session), RANKD_ABORTED, cause,
              "poison_status after a later poison and abort");
  Refused(rankd_all_reduce_sum(session, RANKD_WORLD_GROUP, &t, &t, NULL, &work),
          RANKD_ABORTED, cause, "all_reduce_sum on an aborted session");
  Cuda(cuda.StreamSynchronize(stream), "sync");
  Ok(rankd_all_gather_words(rank, &word, 1, 30, words, world), "barrier");
  rankd_session_free(session);
  Cuda(cuda.StreamDestroy(stream), "cudaStreamDestroy");
  Cuda(cuda.Free(d), "cudaFree");
  printf("C NCCL RANK %u poison OK\n", r);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr,
            "usage: c_nccl_rank ops|quarantine|native|narrowed|poison\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  rankd_join_options o;
  rankd_join_options_init(&o);
  o.device_kind = "cuda"; /* device_index -1: the default device */
  rankd_rank* rank = NULL;
  Ok(rankd_join(&o, &rank), "rankd_join from the environment");
  rankd_descriptor d;
  d.struct_size = sizeof(d);
  Ok(rankd_rank_descriptor(rank, &d), "rankd_rank_descriptor");
  my_rank = d.rank;
  if (d.world_size > 8) Fail("a world of at most 8, got %u", d.world_size);
  if (strcmp(argv[1], "ops") == 0) {
    Ops(rank, d.world_size);
  } else if (strcmp(argv[1], "quarantine") == 0) {
    Bounded(rank, d.world_size, RANKD_QUARANTINE_UNTIL_COMPLETE, "quarantine");
  } else if (strcmp(argv[1], "native") == 0) {
    Bounded(rank, d.world_size, RANKD_NATIVE_CANCEL, "native");
  } else if (strcmp(argv[1], "narrowed") == 0) {
    Narrowed(rank, d.world_size);
  } else if (strcmp(argv[1], "poison") == 0) {
    PoisonAndAbort(rank, d.world_size);
  } else {
    Fail("unknown scenario %s", argv[1]);
  }
  Ok(rankd_leave(rank), "rankd_leave");
  rankd_rank_free(rank);
  return 0;
}
