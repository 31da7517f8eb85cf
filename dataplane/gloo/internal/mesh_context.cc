#include "dataplane/gloo/internal/mesh_context.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "gloo/common/error.h"
#include "gloo/transport/context.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// What the connect's workers share. Owned by the workers and the calling
// thread together, so that workers the caller abandons (a pair still
// connecting when `health` failed) keep their transport context, its pairs
// and device alive until Gloo's connect returns.
struct Connect {
  Connect(int rank, int size, std::chrono::milliseconds timeout)
      : rank(rank), size(size), timeout(timeout) {}
  const int rank;
  const int size;
  const std::chrono::milliseconds timeout;
  std::shared_ptr<::gloo::transport::Context> transport;
  size_t address_bytes = 0;

  std::mutex mu;
  std::condition_variable changed;
  // Guarded by mu.
  int next_peer = 0;
  // Set by the first failure or by the caller giving up: no worker takes
  // another peer, and none starts a connect or a store read.
  bool stopped = false;
  // Workers in a store read (the store is the caller's: it must not be
  // used once the caller returns), and workers not yet ended.
  int reading_store = 0;
  int running = 0;
  int connecting = 0;
  std::exception_ptr first_error;

  // Keeps the first error and stops the connect; mu held.
  void FailLocked(std::exception_ptr error) {
    if (!first_error) first_error = std::move(error);
    stopped = true;
  }
};

// One worker: takes the lowest unconnected peer, reads its address from
// the store and connects the pair, until none is left or the connect
// stopped.
void ConnectPairs(const std::shared_ptr<Connect>& c,
                  ::gloo::rendezvous::Store& store) {
  for (;;) {
    int peer = 0;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (c->stopped) break;
      do {
        peer = c->next_peer++;
      } while (peer == c->rank);
      if (peer >= c->size) break;
      ++c->reading_store;
    }
    std::vector<char> address;
    std::exception_ptr error;
    try {
      const std::string key = std::to_string(peer);
      store.wait({key}, c->timeout);
      std::vector<char> all = store.get(key);
      // The peer's list skips the peer itself: this member's address is
      // at its index among the peer's others.
      const size_t index =
          static_cast<size_t>(c->rank > peer ? c->rank - 1 : c->rank);
      const size_t expected =
          c->address_bytes * static_cast<size_t>(c->size - 1);
      if (all.size() != expected) {
        GLOO_THROW_IO_EXCEPTION("member ", peer, " published ", all.size(),
                                " bytes of addresses; expected ", expected);
      }
      address.assign(all.begin() + index * c->address_bytes,
                     all.begin() + (index + 1) * c->address_bytes);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(c->mu);
      --c->reading_store;
      if (error) c->FailLocked(std::move(error));
      c->changed.notify_all();
      if (c->stopped) break;
      ++c->connecting;
    }
    try {
      c->transport->getPair(peer)->connect(address);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(c->mu);
    --c->connecting;
    if (error) c->FailLocked(std::move(error));
  }
  std::lock_guard<std::mutex> lock(c->mu);
  --c->running;
  c->changed.notify_all();
}

}  // namespace

MeshContext::MeshContext(int rank, int size) : ::gloo::Context(rank, size) {}

void MeshContext::ConnectFullMesh(
    ::gloo::rendezvous::Store& store,
    const std::shared_ptr<::gloo::transport::Device>& device,
    std::function<absl::Status()> health) {
  auto c = std::make_shared<Connect>(rank, size, getTimeout());
  c->transport = device->createContext(rank, size);
  c->transport->setTimeout(getTimeout());
  // This member's address for every other member, in member order.
  std::vector<char> addresses;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    std::vector<char> bytes = c->transport->createPair(peer)->address().bytes();
    c->address_bytes = bytes.size();
    addresses.insert(addresses.end(), bytes.begin(), bytes.end());
  }
  store.set(std::to_string(rank), addresses);

  // Workers take the peers in member order: the lowest unconnected pairs
  // of every member are always in progress, so no wait can close a cycle.
  const int workers = std::min(kMaxConcurrentPairConnects, size - 1);
  c->running = workers;
  std::vector<std::thread> threads;
  absl::Status gave_up;
  try {
    for (int i = 0; i < workers; ++i) {
      threads.emplace_back([c, &store] { ConnectPairs(c, store); });
    }
  } catch (const std::system_error& e) {
    // No thread to spare: give up as at a failure, leaving the workers
    // that did start (a joinable thread destroyed in unwinding would end
    // the process).
    gave_up = absl::ResourceExhaustedError(
        std::string("cannot start a pair-connect thread: ") + e.what());
  }
  const auto every = absl::ToChronoMilliseconds(kConnectHealthEvery);
  std::unique_lock<std::mutex> lock(c->mu);
  if (!gave_up.ok()) {
    c->stopped = true;
    c->running -= workers - static_cast<int>(threads.size());
  }
  while (gave_up.ok() && c->running > 0) {
    if (health == nullptr) {
      c->changed.wait(lock, [&] { return c->running == 0; });
      break;
    }
    if (c->changed.wait_for(lock, every, [&] { return c->running == 0; })) {
      break;
    }
    lock.unlock();
    absl::Status s = health();
    lock.lock();
    if (!s.ok()) {
      gave_up = std::move(s);
      c->stopped = true;
      break;
    }
  }
  if (!gave_up.ok()) {
    // The store reads in flight end on their own (the store bounds them);
    // the pair connects are left to Gloo.
    c->changed.wait(lock, [&] { return c->reading_store == 0; });
    const int abandoned = c->connecting;
    lock.unlock();
    for (auto& t : threads) t.detach();
    GLOO_THROW_IO_EXCEPTION("stopped connecting (", abandoned,
                            " pair connect(s) abandoned to Gloo): ",
                            std::string(gave_up.message()));
  }
  std::exception_ptr first_error = c->first_error;
  lock.unlock();
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  device_ = device;
  transportContext_ = c->transport;
}

}  // namespace rankd::dataplane::gloo::internal
