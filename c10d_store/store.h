// rankd::c10d_store::Store: a c10d::Store (libtorch's key-value store for
// process-group rendezvous) over a joined rankd rank, so a C++ libtorch
// program brings c10d::ProcessGroupGloo up over rankd instead of a
// TCPStore that one rank hosts:
//
//   std::shared_ptr<rankd::Client> client = ...;  // connected and joined
//   auto store = rankd::c10d_store::Store::Create(client);
//   auto options = c10d::ProcessGroupGloo::Options::create();
//   options->devices.push_back(
//       c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
//   c10d::ProcessGroupGloo pg(store, rank, world_size, options);
//
// The C++ twin of python/rankd/torch_store.py, with the same semantics
// (docs/client-api.md, "torch.distributed"): keys are rankd keys under a
// prefix the job declares shared (rankd --kv_shared_prefixes; rankrun
// declares "torch/"), so set and deleteKey are compare-and-set loops;
// values are bytes, at most rankd's limit (1 MiB); results are TCPStore's
// (c10d_store/store_conformance_test.cc runs the same cases on both).
// The Python store's wait in barrier reads (add(key, 0) on torch 1.13's
// store_based_barrier_key) is not here: that barrier is Python's
// (init_process_group, new_group); c10d's C++ process groups run none.
//
// Job failure: once rankd reports the job failed (a lost rank or node), a
// pending store call and every later one throw JobFailedError in rankd's
// words, naming the lost rank, and the store shuts down this process's
// connections to the Gloo addresses published through it, so a pending
// ProcessGroupGloo collective ends (torch 1.13 has no process-group abort;
// c10d_store/internal/gloo_sockets.h).
//
// Depends only on client/, common/ and libtorch (and abseil).
#ifndef RANKD_C10D_STORE_STORE_H_
#define RANKD_C10D_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "c10d_store/errors.h"
#include "client/client.h"
#include "torch/csrc/api/include/torch/version.h"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace rankd::c10d_store {

namespace internal {
class FailureWatch;
}  // namespace internal

// The namespace rankrun and deploy/kubernetes declare shared for torch.
inline constexpr char kDefaultPrefix[] = "torch/";

struct StoreOptions {
  // Every key the store touches is `prefix` + key. The job must declare
  // the prefix shared (else the first write of a key another rank created
  // throws StoreError with code PermissionDenied, naming the rule). Use a
  // fresh prefix per rendezvous (e.g. "torch/run3/") when a process brings
  // process groups up more than once: nothing deletes old keys. Where the
  // job recovers in place (Client::descriptor().recovers_in_place()),
  // Create puts it under "epoch/<e>/", e the client's epoch
  // (Store::prefix() is the whole): such keys are written only while the
  // job is at epoch e, and dropped once it is READY at a later one
  // (docs/operations.md, "Recovery: job epochs"), so a replacement and the
  // survivors that rejoined meet under the same fresh keys.
  std::string prefix = kDefaultPrefix;
  // The store's timeout (getTimeout/setTimeout): how long get and the
  // one-argument wait wait for a key. c10d::Store::kNoTimeout (zero) waits
  // without limit, as TCPStore does.
  std::chrono::milliseconds timeout = c10d::Store::kDefaultTimeout;
  // Whether Create adds a failure callback to the client
  // (Client::AddFailureCallback, beside any other: several stores and a
  // data-plane session on one client each hear of a failure), removed when
  // the store is destroyed. A program that tells the store itself sets
  // this false and calls Store::OnJobFailure. Either way every store call
  // checks Client::JobHealth first.
  bool install_failure_callback = true;
};

class Store : public c10d::Store {
 public:
  // A store over `client`, which must be joined (FailedPrecondition as a
  // StoreError otherwise; InvalidArgument for an empty prefix or one of
  // kMaxKeyBytes or more, or a null client). The store shares ownership of
  // the client: the client lives at least as long as the store; the
  // program may keep using it (its own keys, rounds) meanwhile. Leaving
  // the job (Client::Leave) makes later store calls fail with
  // FailedPrecondition. A store belongs to the job epoch its client is in:
  // once it saw the job fail it stays failed, also after Client::Rejoin
  // (in-place recovery); make a new Store, and new process groups, then.
  //
  // Returned as c10's intrusive pointer, which c10d::ProcessGroupGloo and
  // c10d::PrefixStore take.
  static c10::intrusive_ptr<Store> Create(std::shared_ptr<Client> client,
                                          StoreOptions options = {});

  // For Create only (the Token is private); use Create.
  struct Token {
   private:
    friend class Store;
    Token() = default;
  };
  Store(Token, std::shared_ptr<Client> client, StoreOptions options);
  ~Store() override;

  // Every call below may throw: JobFailedError once the job failed (in
  // the failure's words: "rankd store get: job J failed (MEMBER_LOST,
  // node 0, rank 1, ...): ..."; EpochEndedError, "... job J epoch 1 ended
  // (...)", where the job recovers in place); StoreError with rankd's code and
  // message for rankd's refusals (InvalidArgument for a key or value over
  // rankd's limits, PermissionDenied, ResourceExhausted for the key quota,
  // FailedPrecondition after Leave, ...). Every call may be made from any
  // thread concurrently, except setTimeout, which must not race with
  // calls that read the timeout (c10d::Store keeps it as a plain member).

  // Stores `value` under `key`, replacing any previous value (a
  // compare-and-set loop: shared keys are written only so).
  void set(const std::string& key, const std::vector<uint8_t>& value) override;

  // TCPStore's compare-and-set: stores `desired` when `key` holds
  // `expected`, or when `key` is absent and `expected` is empty. Returns
  // the value `key` then holds; for an absent key and a non-empty
  // `expected`, returns `expected` and stores nothing (as TCPStore does).
  std::vector<uint8_t> compareSet(const std::string& key,
                                  const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;

  // The value of `key`, waiting up to the store's timeout for it to be set.
  // StoreTimeoutError naming the key and the timeout when it is not.
  std::vector<uint8_t> get(const std::string& key) override;

  // Adds `value` to the counter at `key` (absent: 0) and returns the new
  // count; get then reads it as decimal text, as from TCPStore. StoreError
  // (FailedPrecondition) when `key` holds a value that is not a decimal
  // counter.
  int64_t add(const std::string& key, int64_t value) override;

  // Removes `key`; returns whether it existed.
  bool deleteKey(const std::string& key) override;

  // Whether every key of `keys` exists now (no waiting).
  bool check(const std::vector<std::string>& keys) override;

  // How many keys exist under the store's prefix: every key any rank set
  // through a store with this prefix. (TCPStore counts one key of its own
  // besides; both change alike.)
  int64_t getNumKeys() override;

  // Returns once every key of `keys` is set, all within the store's
  // timeout (wait(keys)) or `timeout` (kNoTimeout: without limit).
  // StoreTimeoutError naming the first key missing at the deadline.
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // torch >= 2.1's extended API (not compiled against torch 1.13, which
  // has none of it): append is a compare-and-set loop like set; multiGet
  // waits for every key within one store timeout; multiSet sets one key
  // after another (not atomically, unlike TCPStore).
  void append(const std::string& key,
              const std::vector<uint8_t>& value) override;
  std::vector<std::vector<uint8_t>> multiGet(
      const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::vector<uint8_t>>& values) override;
  bool hasExtendedApi() const override { return true; }
#endif

  // Tells the store the job failed with `failure` (a non-OK status, as
  // Client::JobHealth reports it): from now on every call throws
  // JobFailedError with its message, and this process's connections to
  // the Gloo addresses seen in the store's values are shut down (also
  // those of addresses seen later). The installed failure callback calls
  // it; a program that keeps its own callback calls it from there. Only
  // the first failure counts. Never throws.
  void OnJobFailure(const absl::Status& failure);

  // The joined client the store talks through.
  const std::shared_ptr<Client>& client() const { return client_; }
  const std::string& prefix() const { return prefix_; }
  // How many sockets the failure shut down so far (for tests and logs).
  int sockets_shut_down() const;

 private:
  // Runs one store operation named `method`, turning rankd errors into
  // exceptions (see above).
  template <typename Operation>
  auto Call(const char* method, Operation operation);
  // The value at `full_key`, or nullopt when absent (no waiting).
  absl::StatusOr<std::optional<std::string>> Peek(const std::string& full_key);
  // Waits until `deadline` (absl::InfiniteFuture(): without limit) for
  // `key` and returns its value; a timeout is a StoreTimeoutError naming
  // `key` and `timeout`.
  absl::StatusOr<std::string> Await(const std::string& key, absl::Time deadline,
                                    std::chrono::milliseconds timeout);
  // Notes the Gloo addresses in a value this store sets or reads.
  void NoteValue(const std::string& value);

  const std::shared_ptr<Client> client_;
  const std::string prefix_;
  // Shared with the client's failure callback, which may outlive the
  // store.
  const std::shared_ptr<internal::FailureWatch> watch_;
  // Client::AddFailureCallback's id; 0 when Create added none.
  uint64_t failure_callback_ = 0;
};

}  // namespace rankd::c10d_store

#endif  // RANKD_C10D_STORE_STORE_H_
