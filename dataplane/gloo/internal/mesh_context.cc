#include "dataplane/gloo/internal/mesh_context.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gloo/common/error.h"
#include "gloo/transport/context.h"

namespace rankd::dataplane::gloo::internal {

MeshContext::MeshContext(int rank, int size) : ::gloo::Context(rank, size) {}

void MeshContext::ConnectFullMesh(
    ::gloo::rendezvous::Store& store,
    const std::shared_ptr<::gloo::transport::Device>& device) {
  std::shared_ptr<::gloo::transport::Context> transport =
      device->createContext(rank, size);
  transport->setTimeout(getTimeout());
  // This member's address for every other member, in member order.
  std::vector<char> addresses;
  size_t address_bytes = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    std::vector<char> bytes = transport->createPair(peer)->address().bytes();
    address_bytes = bytes.size();
    addresses.insert(addresses.end(), bytes.begin(), bytes.end());
  }
  store.set(std::to_string(rank), addresses);

  // Workers take the peers in member order: the lowest unconnected pairs
  // of every member are always in progress, so no wait can close a cycle.
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr first_error;
  auto work = [&] {
    while (!failed.load()) {
      const int peer = next.fetch_add(1);
      if (peer >= size) return;
      if (peer == rank) continue;
      try {
        const std::string key = std::to_string(peer);
        store.wait({key}, getTimeout());
        std::vector<char> all = store.get(key);
        // The peer's list skips the peer itself: this member's address is
        // at its index among the peer's others.
        const size_t index = static_cast<size_t>(rank > peer ? rank - 1 : rank);
        if (all.size() != address_bytes * static_cast<size_t>(size - 1)) {
          GLOO_THROW_IO_EXCEPTION("member ", peer, " published ", all.size(),
                                  " bytes of addresses; expected ",
                                  address_bytes * (size - 1));
        }
        std::vector<char> address(all.begin() + index * address_bytes,
                                  all.begin() + (index + 1) * address_bytes);
        transport->getPair(peer)->connect(address);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception();
        failed.store(true);
        return;
      }
    }
  };
  const int workers = std::min(kMaxConcurrentPairConnects, size - 1);
  std::vector<std::thread> threads;
  for (int i = 1; i < workers; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  device_ = device;
  transportContext_ = std::move(transport);
}

}  // namespace rankd::dataplane::gloo::internal
