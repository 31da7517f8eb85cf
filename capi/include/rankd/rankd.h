/* rankd.h: the C ABI of rankd, for serving processes written in C or in
 * any language with a C foreign-function interface (the Python package and
 * the Rust crate are built on it).
 *
 * A process joins its job through the node's rankd daemon (rankd_join),
 * reads its identity and groups, exchanges scheduling metadata
 * (rankd_all_gather_words) and bootstrap blobs (rankd_kv_*), hears of a
 * lost peer (rankd_job_health, rankd_on_job_failure), and opens a data-plane
 * session (rankd_session_open) whose operations are the DistributedSession
 * contract of docs/contract.md: all_reduce_sum, all_gather, all_to_all_v,
 * send, receive and batched send/receive, each completed through a
 * rankd_work.
 *
 *   rankd_rank* rank = NULL;
 *   rankd_status* s = rankd_join(NULL, &rank);  // from the launcher's env
 *   if (s != NULL) { fprintf(stderr, "%s\n", rankd_status_message(s)); ... }
 *
 * Conventions, for every function below:
 *   - Errors. A function that can fail returns a rankd_status*: NULL on
 *     success, otherwise an error the caller owns and frees with
 *     rankd_status_free. Its code is one of rankd_code (the same codes as
 *     the C++ library's absl::Status and gRPC); its message is owned by the
 *     status and names the operation and the cause. Out-parameters are
 *     written only on success. No C++ exception leaves the library: a
 *     function that runs out of memory returns RESOURCE_EXHAUSTED ("<function>:
 *     out of memory", or "rankd: out of memory" when even that status could
 *     not be made; freeing that one is harmless too).
 *   - Handles. Every handle (rankd_rank, rankd_session, rankd_work,
 *     rankd_pending_words, rankd_bytes) is opaque, created by the library and
 *     freed by its own *_free function, which accepts NULL. A handle may be
 *     freed in any order relative to the handles made from it: a session
 *     keeps its rank's connection alive, a work keeps its session alive,
 *     until they are freed too.
 *   - Threads. Functions may be called from any thread, on different
 *     handles or the same one, except that a handle must not be freed while
 *     another thread uses it.
 *   - Timeouts are in seconds (double), must be positive and finite unless
 *     a function says otherwise, and bound every wait: nothing here blocks
 *     without a deadline.
 *   - Buffers passed in are borrowed: the library reads them during the
 *     call (or, for tensors, until the work completes, see rankd_tensor) and
 *     never frees them.
 *
 * Enumerations (rankd_code, rankd_dtype, ...) name the values; struct
 * fields and parameters that carry them are int32_t, so their size is fixed
 * and a value outside the enumeration is an error, never undefined.
 *
 * Binary compatibility: rankd_abi_version() returns RANKD_ABI_VERSION of the
 * library that is loaded. Within one ABI version functions are only added,
 * and option structs only grow at their end; every option struct starts
 * with `struct_size`, which its *_init function sets, so an older caller's
 * smaller struct is read correctly by a newer library.
 *
 * The shared library (librankd.so) exports only the rankd_* symbols of this
 * header; see docs/client-api.md for what it needs at run time.
 */
#ifndef RANKD_RANKD_H_
#define RANKD_RANKD_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define RANKD_EXPORT __attribute__((visibility("default")))
#else
#define RANKD_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define RANKD_ABI_VERSION 1

/* The ABI version of the loaded library (RANKD_ABI_VERSION it was built
 * with). A caller built against a newer header should refuse an older
 * library. */
RANKD_EXPORT uint32_t rankd_abi_version(void);

/* ---- Status ------------------------------------------------------------ */

/* The error codes: absl::StatusCode's (and gRPC's) values. */
typedef enum rankd_code {
  RANKD_OK = 0,
  RANKD_CANCELLED = 1,
  RANKD_UNKNOWN = 2,
  RANKD_INVALID_ARGUMENT = 3,
  RANKD_DEADLINE_EXCEEDED = 4,
  RANKD_NOT_FOUND = 5,
  RANKD_ALREADY_EXISTS = 6,
  RANKD_PERMISSION_DENIED = 7,
  RANKD_RESOURCE_EXHAUSTED = 8,
  RANKD_FAILED_PRECONDITION = 9,
  RANKD_ABORTED = 10,
  RANKD_OUT_OF_RANGE = 11,
  RANKD_UNIMPLEMENTED = 12,
  RANKD_INTERNAL = 13,
  RANKD_UNAVAILABLE = 14,
  RANKD_DATA_LOSS = 15,
  RANKD_UNAUTHENTICATED = 16
} rankd_code;

typedef struct rankd_status rankd_status;

/* The status's code; RANKD_OK for NULL. */
RANKD_EXPORT rankd_code rankd_status_code(const rankd_status* status);
/* The status's message, valid until the status is freed; "" for NULL.
 * Never NULL. */
RANKD_EXPORT const char* rankd_status_message(const rankd_status* status);
RANKD_EXPORT void rankd_status_free(rankd_status* status);
/* 1 when `status` is a bounded wait's own timeout rather than a failure:
 * rankd_work_wait_bounded past its deadline (the mode was applied) or
 * rankd_pending_words_wait past its timeout (the round is still in flight).
 * Both carry DEADLINE_EXCEEDED, which the work or round itself may also
 * fail with (a rank that never submitted); this tells them apart without
 * reading the message. 0 for every other status and for NULL. */
RANKD_EXPORT int rankd_status_is_wait_timeout(const rankd_status* status);
/* 1 when `status` (a key-value call's) is a recovering job's fence between
 * its epochs: the daemon refused this process, which joined an epoch the
 * job has left behind (FAILED_PRECONDITION, "rank R joined into epoch E but
 * the job is at epoch F ..."). The daemon marks it; this reads the mark, not
 * the message.
 * The loss that ended the epoch reaches rankd_job_health (and the failure
 * callback) possibly a moment after such an answer: a caller that wants to
 * report the loss waits for it briefly. 0 for every other status and for
 * NULL. */
RANKD_EXPORT int rankd_status_is_epoch_fence(const rankd_status* status);
/* 1 when `status` (rankd_job_health's) is a loss the job recovers from in
 * place: it ended this rank's epoch (ABORTED, "job J epoch E ended
 * (MEMBER_LOST, ...)", by domain "job J (DOMAIN_RECOVERING, ...)"), and
 * rankd_rejoin continues; 0 for a failed job, a lost daemon connection,
 * every other status and NULL. The library marks such a failure; this reads
 * the mark, not the message. (The failure callback gets code and message
 * only: it may call rankd_job_health for the status.) */
RANKD_EXPORT int rankd_status_ends_an_epoch(const rankd_status* status);
/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_CODE" for a value outside
 * rankd_code. Static storage. */
RANKD_EXPORT const char* rankd_code_name(int32_t code);

/* ---- Joining a job ------------------------------------------------------ */

typedef struct rankd_rank rankd_rank;

/* How to reach the node's daemon and what this process says about itself.
 * Fields left at their rankd_join_options_init value are taken from the
 * environment the launcher (rankd-launch) sets, then from the defaults
 * named below. */
typedef struct rankd_join_options {
  size_t struct_size;
  /* The daemon: "unix:///path.sock", "/path.sock", "host:port", ...
   * NULL: $RANKD_TARGET, else unix:///run/rankd/rankd.sock. */
  const char* target;
  /* The job to join. NULL: $RANKD_JOB_ID; required one way or the other. */
  const char* job_id;
  /* This process's index on its node. -1: $RANKD_LOCAL_RANK, else the
   * daemon's choice: 0, or with a rank given, the rank's slot on the node
   * (its earlier one, else its default one when free, else the lowest
   * free one; a "cuda" device_index -1 then records the slot's GPU,
   * unless the process sees one GPU). */
  int64_t local_rank;
  /* The world rank to claim. -1: $RANKD_RANK when set, else the daemon
   * assigns node_index * nproc_per_node + local_rank. */
  int64_t rank;
  /* When non-zero, must equal the job's world size. 0: $RANKD_WORLD_SIZE
   * when set, else not checked. */
  uint32_t world_size;
  /* The device this rank drives: "cpu" or "cuda". NULL: "cpu". */
  const char* device_kind;
  /* Its index (for "cuda"). -1: the visible device count decides, as
   * torchrun users expect (docs/nccl.md, "The default device"): the local
   * rank where the process sees at least as many GPUs as its node runs
   * ranks, 0 where it sees exactly one (CUDA_VISIBLE_DEVICES set per
   * process, one GPU per container). */
  int32_t device_index;
  /* How long rankd_join waits for every rank of the job to join; 0 returns
   * once this rank is registered. Default 60. */
  double wait_for_world_seconds;
  /* How long to wait for the daemon to answer. Default 10. */
  double connect_timeout_seconds;
  /* A file holding this rank's own token (rank-<rank>.<mac>; `rankctl
   * credentials rank-token`). NULL: $RANKD_TOKEN_FILE when set, else the
   * token in $RANKD_RANK_TOKEN, which rankrun sets for each rank. A
   * regular file of one line of at most 512 characters; anything else (a
   * missing file, a device, a pipe) makes rankd_join return
   * RANKD_INVALID_ARGUMENT naming the path, without reading it. */
  const char* token_file;
} rankd_join_options;

/* Sets every field to "not given" (the defaults above). */
RANKD_EXPORT void rankd_join_options_init(rankd_join_options* options);

/* Connects to the daemon and joins the job; on success *rank is a new
 * handle (free it with rankd_rank_free). `options` may be NULL: everything
 * from the environment. Blocks for about connect_timeout_seconds +
 * wait_for_world_seconds at most (plus the client's call margin). Errors:
 * INVALID_ARGUMENT for bad options or environment (naming the field or
 * variable), UNAVAILABLE when the daemon cannot be reached (naming the target),
 * DEADLINE_EXCEEDED naming the ranks that did not join in time, or the daemon's
 * refusal (a rank already claimed, a wrong world size, ...). */
RANKD_EXPORT rankd_status* rankd_join(const rankd_join_options* options,
                                      rankd_rank** rank);

/* Leaves the job cleanly (the daemon then does not treat this rank as lost).
 * Idempotent. After it, operations that need a joined rank fail with
 * FAILED_PRECONDITION. Sessions should be freed first. */
RANKD_EXPORT rankd_status* rankd_leave(rankd_rank* rank);

/* Frees the handle. Once every session opened from this rank is freed too,
 * the rank leaves the job (as rankd_leave, ignoring its errors) and the
 * connection closes. Only a process that dies without either is seen by
 * its peers as a lost rank. */
RANKD_EXPORT void rankd_rank_free(rankd_rank* rank);

/* This rank's identity, fixed at join. */
typedef struct rankd_descriptor {
  size_t struct_size;
  uint32_t rank; /* world rank */
  uint32_t world_size;
  uint32_t local_rank; /* index on its node */
  uint32_t node_index;
  uint32_t nnodes;
  uint32_t nproc_per_node;
  uint64_t job_incarnation;
  /* The parallel layout: tensor x pipeline x expert x data = world size. */
  uint32_t tensor_parallel;
  uint32_t pipeline_parallel;
  uint32_t expert_parallel;
  uint32_t data_parallel;
  /* How many groups this rank belongs to (rankd_rank_group). */
  size_t group_count;
} rankd_descriptor;

/* Fills *descriptor; set descriptor->struct_size to sizeof(*descriptor)
 * first (fields beyond it are not written). INVALID_ARGUMENT for NULL
 * arguments or a struct_size too small for the fields of ABI version 1. */
RANKD_EXPORT rankd_status* rankd_rank_descriptor(const rankd_rank* rank,
                                                 rankd_descriptor* descriptor);

/* The job id, owned by the rank handle. NULL for a NULL rank. */
RANKD_EXPORT const char* rankd_rank_job_id(const rankd_rank* rank);

/* The group id of the whole world; use it as `group` below for
 * world-wide operations. */
#define RANKD_WORLD_GROUP 1u

/* One collective group this rank belongs to. */
typedef struct rankd_group {
  uint32_t id;
  /* "world", "tensor", "pipeline", "expert" or "data"; static storage. */
  const char* kind;
  uint32_t size;
  /* This rank's index in `members`. */
  uint32_t local_rank;
  /* `size` world ranks in group order; owned by the rank handle and valid
   * for its life. */
  const uint32_t* members;
} rankd_group;

/* The index-th group (0 <= index < group_count; the world is index 0).
 * OUT_OF_RANGE for a larger index. */
RANKD_EXPORT rankd_status* rankd_rank_group(const rankd_rank* rank,
                                            size_t index, rankd_group* group);

/* ---- Scheduling metadata: all_gather_words ------------------------------ */

/* One world-wide round: contributes `count` words (every rank the same
 * count, at most 65536) and blocks until every rank contributed or
 * `timeout_seconds` passed. Writes the rank-major concatenation (word i of
 * rank r at r * count + i) to `out`, which must hold world_size * count
 * words (`out_capacity`, in words; INVALID_ARGUMENT otherwise, before any
 * round is used). Every rank must run the same sequence of rounds; once a
 * round failed, later ones fail with FAILED_PRECONDITION naming it.
 * DEADLINE_EXCEEDED names the ranks that did not contribute; a count that
 * differs between ranks is INVALID_ARGUMENT naming them on every rank. */
RANKD_EXPORT rankd_status* rankd_all_gather_words(
    rankd_rank* rank, const uint32_t* words, size_t count,
    double timeout_seconds, uint32_t* out, size_t out_capacity);

/* Recovery by domain (docs/contract.md, "Data-parallel domains"): one
 * data-parallel replica a world round spans and the epoch it served at. */
typedef struct rankd_domain_epoch {
  uint32_t domain;
  uint64_t epoch;
} rankd_domain_epoch;

/* rankd_all_gather_words that returns a partial round too, with the view it
 * was taken in: under the daemons' --recovery=domain a world round spans the
 * data-parallel replicas serving when it ran (rankd_all_gather_words fails
 * a round that did not span every replica, with FAILED_PRECONDITION naming
 * those it spanned). `out` must hold world_size * count words (the most a
 * round gives) and `domains` data_parallel entries (rankd_descriptor);
 * INVALID_ARGUMENT otherwise, or for a NULL out_words, partial or
 * domain_count, before any round is used. On success: *out_words is the
 * number of words written to `out`, the rank-major frames of the ranks of
 * the listed domains (every rank's unless partial; a domain is a contiguous
 * block of tensor x pipeline x expert ranks, so rank r's frame is at block
 * <index of r's domain in `domains`>, offset r mod that block's size);
 * *partial is 1 when the round did not span every replica, else 0; and
 * *domain_count is the number of entries written to `domains`, ascending
 * (0 without recovery by domain). Same numbering, errors and bounds as
 * rankd_all_gather_words. */
RANKD_EXPORT rankd_status* rankd_all_gather_words_with_view(
    rankd_rank* rank, const uint32_t* words, size_t count,
    double timeout_seconds, uint32_t* out, size_t out_capacity,
    size_t* out_words, int* partial, rankd_domain_epoch* domains,
    size_t domains_capacity, size_t* domain_count);

typedef struct rankd_pending_words rankd_pending_words;

/* The bounded form: submits the round now and returns at once;
 * `round_timeout_seconds` bounds the whole round on the daemon. Errors as
 * for rankd_all_gather_words, for what is known at submission. */
RANKD_EXPORT rankd_status* rankd_submit_all_gather_words(
    rankd_rank* rank, const uint32_t* words, size_t count,
    double round_timeout_seconds, rankd_pending_words** pending);

/* 1 once the round finished (successfully or not), else 0. Never blocks. */
RANKD_EXPORT int rankd_pending_words_is_ready(
    const rankd_pending_words* pending);

/* Waits at most `timeout_seconds` (INFINITY waits for the round itself,
 * which its round timeout bounds) and writes the result as
 * rankd_all_gather_words does. DEADLINE_EXCEEDED when the wait timed out:
 * the round stays in flight and may be waited for again. May be called
 * again after it returned. */
RANKD_EXPORT rankd_status* rankd_pending_words_wait(
    rankd_pending_words* pending, double timeout_seconds, uint32_t* out,
    size_t out_capacity);

/* Cancels the round if still in flight (later rounds then fail, as after
 * any failed round) and frees the handle. */
RANKD_EXPORT void rankd_pending_words_free(rankd_pending_words* pending);

/* ---- The job's key-value broker ----------------------------------------- */

/* Bytes owned by the library. */
typedef struct rankd_bytes rankd_bytes;
RANKD_EXPORT const uint8_t* rankd_bytes_data(const rankd_bytes* bytes);
RANKD_EXPORT size_t rankd_bytes_size(const rankd_bytes* bytes);
RANKD_EXPORT void rankd_bytes_free(rankd_bytes* bytes);

/* Keys are 1..512 bytes (NUL-terminated here), values at most 1 MiB;
 * INVALID_ARGUMENT otherwise. Keys are private to the job's incarnation. */
RANKD_EXPORT rankd_status* rankd_kv_set(rankd_rank* rank, const char* key,
                                        const void* value, size_t size);
/* Blocks until `key` exists or the timeout passes (DEADLINE_EXCEEDED naming
 * the key); a timeout of 0 does not wait (NOT_FOUND when absent). *value is
 * a new rankd_bytes. */
RANKD_EXPORT rankd_status* rankd_kv_get(rankd_rank* rank, const char* key,
                                        double timeout_seconds,
                                        rankd_bytes** value);
/* Adds `delta` to the integer at `key` (created as 0) and writes the new
 * value to *result. */
RANKD_EXPORT rankd_status* rankd_kv_add(rankd_rank* rank, const char* key,
                                        int64_t delta, int64_t* result);
/* Deletes `key`; *existed (may be NULL) says whether it was there. */
RANKD_EXPORT rankd_status* rankd_kv_delete(rankd_rank* rank, const char* key,
                                           int* existed);
/* Compare-and-set, the write for keys under a prefix the job declares
 * shared (rankd --kv_shared_prefixes): with `if_absent` non-zero, stores
 * `value` only when `key` does not exist; otherwise only when `key` holds
 * exactly the `expected_size` bytes at `expected` (0 bytes: the empty
 * value). *stored says whether it stored. */
RANKD_EXPORT rankd_status* rankd_kv_compare_set(
    rankd_rank* rank, const char* key, int if_absent, const void* expected,
    size_t expected_size, const void* value, size_t size, int* stored);
/* Deletes `key` only when it holds exactly the `expected_size` bytes at
 * `expected` (required for shared keys); *deleted (may be NULL) says
 * whether it did. */
RANKD_EXPORT rankd_status* rankd_kv_compare_delete(rankd_rank* rank,
                                                   const char* key,
                                                   const void* expected,
                                                   size_t expected_size,
                                                   int* deleted);
/* Writes to *count how many keys of the job's store start with `prefix`
 * (NUL-terminated, 0..512 bytes; "" counts every key, the data plane's
 * own included), as of one moment: keys set or deleted meanwhile may or
 * may not be counted. INVALID_ARGUMENT for a longer prefix; the job's
 * failure (ABORTED naming the lost rank) once it failed. */
RANKD_EXPORT rankd_status* rankd_kv_count(rankd_rank* rank, const char* prefix,
                                          uint64_t* count);

/* ---- Job failure ------------------------------------------------------- */

/* NULL while the job is healthy as far as this rank knows; otherwise the
 * first failure seen (ABORTED naming the lost rank or node, or UNAVAILABLE
 * when the connection to the daemon was lost), which the caller frees.
 * Never blocks and never contacts the daemon. */
RANKD_EXPORT rankd_status* rankd_job_health(const rankd_rank* rank);

/* Called once, on a library thread, when the job fails: `code` and
 * `message` as rankd_job_health would return them (the message is valid
 * during the call only). It must return quickly and must not free the rank
 * or any handle made from it. It may run while another thread is in
 * rankd_rank_free for the rank (the job failed as it was being freed): a
 * callback that calls functions on the rank must know that it is not being
 * freed. Whichever of rankd_rank_free and the rank's sessions'
 * rankd_session_free frees the last of them returns only after every call
 * already running has returned: `user_data` may be freed once it has.
 * rankd_rejoin called from it on the library's event thread returns
 * RANKD_FAILED_PRECONDITION at once: that thread reads the events a rejoin
 * waits for. */
typedef void (*rankd_failure_fn)(void* user_data, rankd_code code,
                                 const char* message);

/* Registers `callback` (called at once, on this thread, when the job
 * already failed). Several callbacks may be registered; each is called
 * once. The rank keeps `user_data` and never frees it. */
RANKD_EXPORT rankd_status* rankd_on_job_failure(rankd_rank* rank,
                                                rankd_failure_fn callback,
                                                void* user_data);

/* ---- Recovery (rankd --recovery=on) ------------------------------------ */

/* The job epoch this rank joined into (docs/architecture.md, "Epochs and
 * recovery"): 1 when the job formed (0 from a daemon that names no epoch),
 * later after rankd_rejoin. 0 for a NULL rank. Never blocks. */
RANKD_EXPORT uint64_t rankd_rank_epoch(const rankd_rank* rank);

/* What a loss does to the job (the daemons' --recovery; fixed at join). */
typedef enum rankd_recovery {
  /* It fails the job: rankd_job_health says "job J failed (...)"
   * (--recovery=off). Also for a NULL rank, and from a daemon that does
   * not say. */
  RANKD_RECOVERY_OFF = 0,
  /* It ends the whole job's epoch: rankd_job_health says "job J epoch E
   * ended (...)", and the survivors continue with rankd_rejoin
   * (--recovery=on). */
  RANKD_RECOVERY_JOB = 1,
  /* It ends the epoch of the lost rank's data-parallel replica only; the
   * other replicas serve on (--recovery=domain with data_parallel > 1;
   * docs/contract.md, "Data-parallel domains"). */
  RANKD_RECOVERY_DOMAIN = 2
} rankd_recovery;

/* The job's rankd_recovery. Never blocks. */
RANKD_EXPORT rankd_recovery rankd_rank_recovery(const rankd_rank* rank);

/* Enters the job's next epoch after epoch `ended_epoch` ended (a rank or
 * node was lost: rankd_job_health then names it) and returns once this
 * rank is joined there and every rank of the job is back, or
 * `timeout_seconds` passed. Returns NULL at once when this rank already
 * joined into an epoch later than `ended_epoch` (each data-plane user may
 * call it with the epoch its own failure named). Otherwise waits for the
 * job to move past `ended_epoch`, then joins again as the same process.
 * Afterwards rankd_rank_epoch is the new epoch, rankd_job_health is NULL
 * again (until a loss ends the new epoch), all_gather_words rounds are
 * numbered afresh and a round sequence that failed in the ended epoch is
 * usable again; the descriptor's other fields do not change. Callbacks
 * registered with rankd_on_job_failure in the ended epoch have run and are
 * dropped; those registered afterwards run for a loss of the new epoch.
 * Data-plane sessions opened before are not re-formed by it
 * (rankd_session_reform).
 * Errors: INVALID_ARGUMENT for a NULL rank or a timeout that is not
 * positive and finite; FAILED_PRECONDITION after rankd_leave; the job's
 * failure (ABORTED, or UNAVAILABLE when the connection to the daemon was
 * lost) at once when no epoch can follow (the job FAILED: recovery off,
 * or its recovery deadline passed); DEADLINE_EXCEEDED naming the epoch
 * waited for, and the ranks still missing, when the timeout passes. A
 * failed rankd_rejoin may be retried. */
RANKD_EXPORT rankd_status* rankd_rejoin(rankd_rank* rank, uint64_t ended_epoch,
                                        double timeout_seconds);

/* ---- Data-plane sessions ------------------------------------------------ */

typedef struct rankd_session rankd_session;

typedef enum rankd_backend {
  /* Host memory over Gloo's TCP transport; runs anywhere. */
  RANKD_BACKEND_GLOO = 1,
  /* CUDA device memory over NCCL, on the device the rank joined with
   * (rankd_join_options.device_kind "cuda" and device_index), else on the
   * default device (device_index -1 above). The CUDA runtime and NCCL are
   * opened when the first session needs them (where they are looked for:
   * docs/nccl.md). */
  RANKD_BACKEND_NCCL = 2
} rankd_backend;

/* What a session can do (docs/contract.md, "Capabilities"); nonzero for
 * each capability it has. Fail closed: an operation whose capability the
 * session lacks is refused, before any data moves, with UNIMPLEMENTED
 * naming the backend, the operation and the capability, e.g. "gloo
 * backend: send needs capability 'point_to_point', which this backend does
 * not advertise". Collectives on a group other than the world also need
 * the group (rankd_session_supports_group). Without exact_completion, works
 * do not offer RANKD_QUARANTINE_UNTIL_COMPLETE. */
typedef struct rankd_capabilities {
  size_t struct_size;      /* sizeof(rankd_capabilities), set by the caller */
  int world_collectives;   /* collectives on RANKD_WORLD_GROUP */
  int point_to_point;      /* send, receive, batch_send_receive */
  int variable_all_to_all; /* all_to_all_v */
  int exact_completion;    /* exact completions, and so the quarantine */
} rankd_capabilities;

typedef struct rankd_session_options {
  size_t struct_size;
  /* 0 (as rankd_session_options_init sets it): $RANKD_BACKEND ("gloo" or
   * "nccl") when set, else RANKD_BACKEND_GLOO. */
  int32_t backend; /* a rankd_backend */
  /* Every operation must complete within this (default 60). */
  double op_timeout_seconds;
  /* Nonzero: members compare each operation's description before moving
   * data and refuse disagreeing work on every member (default 0). */
  int verify_agreement;
  /* Gloo: the address peers reach this rank's transport at (the pod IP
   * in Kubernetes). NULL: $RANKD_GLOO_HOSTNAME when set, else $POD_IP
   * (the Kubernetes downward API) when set, else "127.0.0.1". */
  const char* gloo_hostname;
  /* Narrowing the session's capabilities (as C++'s
   * {Gloo,Nccl}SessionOptions::restrict_capabilities): the session then
   * advertises and serves only what both its backend can do and these
   * allow; everything else fails closed as rankd_capabilities says. Both
   * are read during rankd_session_open only (borrowed).
   *
   * restrict_capabilities: NULL (the default) narrows no flag. Otherwise
   * each capability stays only where its field is nonzero; its
   * struct_size must be at least sizeof(rankd_capabilities)
   * (INVALID_ARGUMENT otherwise). */
  const rankd_capabilities* restrict_capabilities;
  /* restrict_groups: NULL (the default) narrows no group. Otherwise the
   * `restrict_group_count` group ids whose collectives stay allowed; other
   * groups of the rank are refused (a non-NULL pointer with a count of 0
   * allows none; ids of groups the rank is not in are ignored). The world
   * (RANKD_WORLD_GROUP) is governed by world_collectives instead. A count
   * above 0 with NULL is INVALID_ARGUMENT. */
  const uint32_t* restrict_groups;
  size_t restrict_group_count;
} rankd_session_options;

/* Sets every field to its default (struct_size to sizeof(*options)). A
 * caller built against an older header passes its smaller struct_size:
 * the fields beyond it keep their defaults. */
RANKD_EXPORT void rankd_session_options_init(rankd_session_options* options);

/* Opens a session over `rank` (options may be NULL: defaults). Blocks
 * until the data plane is connected to every peer (every rank of the job
 * must open one; a rank may open several, and then every rank opens its
 * sessions of each backend in the same order). INVALID_ARGUMENT for a
 * value outside rankd_backend or a malformed restriction (restrict_*
 * above); UNAVAILABLE naming why an NCCL session
 * cannot run here (the CUDA runtime or NCCL library that could not be
 * loaded and where it was looked for, no CUDA device); FAILED_PRECONDITION
 * when the node runs more ranks than it has visible GPUs; DEADLINE_EXCEEDED
 * naming peers that never connected. A caller may fall back to
 * RANKD_BACKEND_GLOO after UNAVAILABLE. */
RANKD_EXPORT rankd_status* rankd_session_open(
    rankd_rank* rank, const rankd_session_options* options,
    rankd_session** session);

/* Frees the handle; the session closes once every work made from it is
 * freed too. Every rank should finish its data-plane work (for example
 * with a last all_gather_words round) before closing. */
RANKD_EXPORT void rankd_session_free(rankd_session* session);

/* ---- Re-forming after a loss (issue 38; docs/dataplane.md, "Re-forming
 * after a loss") ---- */

/* Replaces *session, in place, by its session of the next job epoch, after
 * a lost rank or node moved the job on (rankd --recovery=on): aborts and
 * closes the ended session (its pending works fail), waits up to
 * timeout_seconds for the job to pass the ended epoch and for the world to
 * be whole again, then opens the new epoch's session with the same options
 * on the same backend (NCCL: the same device, a new session stream).
 * Buffers the caller owns (its weights) are untouched. Every rank must
 * re-form (the replacement: open) its sessions in the same order. It waits
 * for calls on the session already running on other threads (submissions:
 * short); calls made meanwhile on other threads, a second
 * rankd_session_reform included, return FAILED_PRECONDITION ("the session
 * is being re-formed") at once and do nothing (rankd_session_supports_group
 * returns 0); works already submitted are not held by this.
 * INVALID_ARGUMENT for a NULL session or a timeout that is not positive and
 * finite; FAILED_PRECONDITION when the job is still healthy at the ended
 * epoch (nothing was lost, so there is no later epoch: a session poisoned
 * by a stalled peer or a disagreement), after at most 10 s for a loss notice
 * on its way; DEADLINE_EXCEEDED naming the epoch when the world was not
 * whole in time; the ended session's error code when the job failed for good;
 * UNIMPLEMENTED when the rank's control plane cannot join a later epoch.
 * After an error the session is gone: every call but rankd_session_free
 * returns that error (FAILED_PRECONDITION from a second reform). */
RANKD_EXPORT rankd_status* rankd_session_reform(rankd_session* session,
                                                double timeout_seconds);

/* ---- end of re-forming after a loss ---- */

/* Fills *capabilities with the session's (set its struct_size first;
 * INVALID_ARGUMENT when it is too small). */
RANKD_EXPORT rankd_status* rankd_session_capabilities(
    const rankd_session* session, rankd_capabilities* capabilities);
/* 1 when collectives on `group` are supported (RANKD_WORLD_GROUP:
 * world_collectives), else 0. */
RANKD_EXPORT int rankd_session_supports_group(const rankd_session* session,
                                              uint32_t group);
/* The session's rankd_backend. */
RANKD_EXPORT int32_t rankd_session_backend(const rankd_session* session);

/* ---- Poisoning and aborting a session (issue 33; docs/contract.md,
 * "Failures: one vocabulary") ---- */

/* A poisoned session refuses every later operation, at once and before any
 * data moves, with its cause's code and a message that ends with the
 * cause's message. The first cause wins and is kept for the session's life:
 * whatever poisons it first (these two functions, a native failure, a
 * missed deadline, a lost peer) is the cause rankd_session_poison_status
 * returns. Both functions act on this rank's session only: peers are not
 * told. */

/* Poisons the session with the cause (`code`, `message`) and tears nothing
 * down: work already submitted (running or queued) still runs, on both
 * backends; only later calls are refused. For a caller that
 * decided the session must not be used any more but whose submitted work is
 * still good (a scheduler draining a rank). `message` is copied. On a session
 * already poisoned it changes nothing and returns NULL.
 * INVALID_ARGUMENT, before anything is latched, for a NULL session, a NULL
 * message, a value outside rankd_code or RANKD_OK (a cause is an error).
 * A RANKD_INVALID_ARGUMENT cause is latched as RANKD_FAILED_PRECONDITION
 * with its message: INVALID_ARGUMENT means "refused, the session is still
 * usable" (docs/contract.md), which a poisoned session never answers, the
 * same in C++. After a failed rankd_session_reform: that error (the session
 * is gone). */
RANKD_EXPORT rankd_status* rankd_session_poison(rankd_session* session,
                                                int32_t code,
                                                const char* message);

/* rankd_session_poison, then aborts the session's native contexts (Gloo's
 * contexts, NCCL's communicators) so that its pending works fail now
 * instead of waiting for a peer or for the op timeout: what a native
 * failure or a missed deadline does. For a caller that knows a peer is
 * gone. On a session already poisoned, the first cause stays and the
 * contexts are aborted if they were not yet (they are aborted once).
 * Returns once they are (NCCL: within the session's abort deadline).
 * Errors as rankd_session_poison, checked before anything is latched or
 * aborted. */
RANKD_EXPORT rankd_status* rankd_session_abort(rankd_session* session,
                                               int32_t code,
                                               const char* message);

/* NULL while the session is healthy. Once it is poisoned, a new status the
 * caller owns (rankd_status_free) carrying the first cause: the code
 * (RANKD_INVALID_ARGUMENT latched as RANKD_FAILED_PRECONDITION) and message
 * given to rankd_session_poison or rankd_session_abort,
 * or the native failure, missed deadline or lost peer that poisoned it.
 * Waits for nothing. INVALID_ARGUMENT for a NULL session (so NULL always means
 * healthy); after a failed rankd_session_reform, that error. */
RANKD_EXPORT rankd_status* rankd_session_poison_status(
    const rankd_session* session);

/* ---- end of poisoning and aborting a session ---- */

/* Element types. */
typedef enum rankd_dtype {
  RANKD_BOOL = 0,
  RANKD_F32 = 1,
  RANKD_F16 = 2,
  RANKD_BF16 = 3,
  RANKD_F64 = 4,
  RANKD_I8 = 5,
  RANKD_I16 = 6,
  RANKD_I32 = 7,
  RANKD_I64 = 8,
  RANKD_U8 = 9,
  RANKD_U16 = 10,
  RANKD_U32 = 11,
  RANKD_U64 = 12,
  RANKD_COMPLEX64 = 13
} rankd_dtype;

/* Bytes per element (bool: 1); 0 for a value outside rankd_dtype. */
RANKD_EXPORT size_t rankd_dtype_size(int32_t dtype);

/* A dense row-major tensor the caller owns: host memory for Gloo, device
 * memory for NCCL. `shape` has `ndim` extents (ndim 0 is a scalar; at most
 * 64, more is INVALID_ARGUMENT). Only
 * the leading extent may be 0: a tensor of no rows is valid for every
 * operation and pairs like any other (a receive of no rows waits for its
 * send); any other zero extent is INVALID_ARGUMENT naming the dimension
 * (docs/contract.md, "Empty values"). `data` may be NULL when the tensor
 * has no elements.
 *   - Gloo (host memory): an input is copied during the submitting call, so
 *     it may be reused as soon as that returns; an output is written when
 *     the work's success is first observed (rankd_work_is_complete
 *     returning 1, or a wait returning NULL), never earlier and never after
 *     its work handle is freed.
 *   - NCCL (device memory of the session's device): nothing is copied or
 *     allocated; the library reads the inputs and writes the outputs in
 *     place, on its own stream, ordered against the operation's `stream`
 *     (below). The memory must stay allocated until the work completed
 *     (observed through the work, or through `stream` having passed it:
 *     cudaFreeAsync on `stream` after the call is fine). Host memory is
 *     refused with INVALID_ARGUMENT where the CUDA runtime can tell
 *     (cudaPointerGetAttributes), as is memory of another device. */
typedef struct rankd_tensor {
  void* data;
  int32_t dtype; /* a rankd_dtype */
  size_t ndim;
  const size_t* shape;
} rankd_tensor;

/* One transfer of a batched send/receive: `tensor` goes to (or is filled
 * from) member `peer` of the group. */
typedef struct rankd_peer_tensor {
  size_t peer;
  rankd_tensor tensor;
} rankd_peer_tensor;

typedef struct rankd_work rankd_work;

/* The operations. `group` is RANKD_WORLD_GROUP or the id of a group this
 * rank belongs to (NOT_FOUND otherwise); peers and counts index the
 * group's members. `stream` must be NULL for Gloo (INVALID_ARGUMENT
 * otherwise). For NCCL it is the caller's cudaStream_t, on the session's
 * device (INVALID_ARGUMENT otherwise), as a CUDA library call takes it:
 * the operation runs after the work queued on `stream` before the call
 * (which produced its inputs and last used its outputs), and work queued on
 * `stream` after the call runs after the operation, so it may read the
 * outputs and reuse the inputs without waiting on the host. Special
 * handles (cudaStreamLegacy, cudaStreamPerThread) are passed to CUDA as
 * they are. NULL orders nothing: the operation runs on the session's own
 * stream as soon as its turn comes, so the inputs must be ready when the
 * call is made (e.g. after cudaStreamSynchronize), and the outputs are valid
 * once the work completed (rankd_work_wait, ...). Either way the work's
 * completion is exact: rankd_work_is_complete returns 1 only once the
 * device finished the operation. On success *work is a new handle; the
 * output is valid once the work completed successfully.
 * Validation errors (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED) come
 * before any data moves; a failure afterwards is reported by the work and
 * poisons the session: later operations fail at once with its cause. */

/* Element-wise sum; `output` has the input's shape and dtype and may be
 * the input itself (in place). */
RANKD_EXPORT rankd_status* rankd_all_reduce_sum(
    rankd_session* session, uint32_t group, const rankd_tensor* input,
    const rankd_tensor* output, void* stream, rankd_work** work);
/* Inputs concatenated along the leading axis in member order: [n, ...]
 * gives [members * n, ...]; a scalar gives [members]. */
RANKD_EXPORT rankd_status* rankd_all_gather(rankd_session* session,
                                            uint32_t group,
                                            const rankd_tensor* input,
                                            const rankd_tensor* output,
                                            void* stream, rankd_work** work);
/* Leading-axis rows: send_counts[d] rows go to member d (input compact,
 * destination-major), receive_counts[s] rows come from member s (output
 * source-major, sum(receive_counts) rows). Both arrays have `members`
 * entries, the group's size. */
RANKD_EXPORT rankd_status* rankd_all_to_all_v(
    rankd_session* session, uint32_t group, const rankd_tensor* input,
    const size_t* send_counts, const size_t* receive_counts, size_t members,
    const rankd_tensor* output, void* stream, rankd_work** work);
/* Pairs with a rankd_receive of the same shape and dtype on member `peer`,
 * in the same order. */
RANKD_EXPORT rankd_status* rankd_send(rankd_session* session, uint32_t group,
                                      size_t peer, const rankd_tensor* input,
                                      void* stream, rankd_work** work);
RANKD_EXPORT rankd_status* rankd_receive(rankd_session* session, uint32_t group,
                                         size_t peer,
                                         const rankd_tensor* output,
                                         void* stream, rankd_work** work);
/* Sends and receives posted together, completing together: two members
 * can swap tensors, and a ring needs no even/odd ordering. */
RANKD_EXPORT rankd_status* rankd_batch_send_receive(
    rankd_session* session, uint32_t group, const rankd_peer_tensor* sends,
    size_t send_count, const rankd_peer_tensor* receives, size_t receive_count,
    void* stream, rankd_work** work);

/* ---- Completions -------------------------------------------------------- */

/* What happens to work that misses a bounded wait's deadline. */
typedef enum rankd_cancellation {
  /* The work keeps running, quarantined with its buffers' use until it
   * completes; its outcome is the deadline; the session refuses new
   * work. */
  RANKD_QUARANTINE_UNTIL_COMPLETE = 1,
  /* Native cancellation: communicators are aborted before the wait
   * returns. */
  RANKD_NATIVE_CANCEL = 2
} rankd_cancellation;

/* 1 once the work completed (successfully or not; its output is then
 * valid when rankd_work_wait would return NULL), else 0. Never blocks. */
RANKD_EXPORT int rankd_work_is_complete(rankd_work* work);

/* Blocks until the work completed (the session's op_timeout bounds it);
 * NULL on success, else the error that failed it (for example ABORTED
 * naming a lost rank, or DEADLINE_EXCEEDED naming who did not submit). */
RANKD_EXPORT rankd_status* rankd_work_wait(rankd_work* work);

/* Waits at most `timeout_seconds`. NULL when the work completed
 * successfully; its error when it failed; DEADLINE_EXCEEDED, with the mode
 * named, once `mode` was applied after the deadline (the session is then
 * poisoned); INTERNAL when RANKD_NATIVE_CANCEL's teardown could not be
 * confirmed (the work is then quarantined). INVALID_ARGUMENT for a
 * non-positive timeout and
 * FAILED_PRECONDITION for a mode the session does not support, both before
 * waiting. */
RANKD_EXPORT rankd_status* rankd_work_wait_bounded(rankd_work* work,
                                                   double timeout_seconds,
                                                   int32_t mode);

/* 1 when rankd_work_wait_bounded accepts `mode` for this work, else 0. */
RANKD_EXPORT int rankd_work_supports_cancellation(const rankd_work* work,
                                                  int32_t mode);

/* Frees the handle without waiting: work still running keeps what the
 * library owns for it (and its session) until it completes. A Gloo work's
 * output is then never written. */
RANKD_EXPORT void rankd_work_free(rankd_work* work);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RANKD_RANKD_H_ */
