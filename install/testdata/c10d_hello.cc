// c10d_hello.cc: a C++ libtorch program that brings c10d::ProcessGroupGloo
// up over rankd's c10d store (c10d_store/store.h; librankd_c10d.so when
// installed), built by install/install_test.sh against the installed copy
// with pkg-config's rankd-c10d. Two ranks under rankrun (which declares
// "torch/" shared); each prints "rank R of 2: c10d all_reduce [3 30]".
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "c10d_store/store.h"
#include "client/client.h"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"

// After c10d's headers (ATen/ATen.h first does not compile as C++20 with
// clang).
#include "ATen/ATen.h"

int main() {
  rankd::ClientOptions options;  // the launcher's RANKD_TARGET and token
  const char* target = std::getenv("RANKD_TARGET");
  options.target = target ? target : "";
  auto connected = rankd::Client::Connect(options);
  if (!connected.ok()) {
    std::fprintf(stderr, "%s\n", connected.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<rankd::Client> client(std::move(*connected));
  rankd::JoinOptions join;
  const char* job = std::getenv("RANKD_JOB_ID");
  const char* local_rank = std::getenv("RANKD_LOCAL_RANK");
  join.job_id = job ? job : "";
  join.local_rank = local_rank ? std::atoi(local_rank) : 0;
  join.device.set_kind("cpu");
  auto session = client->Join(join);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  const int rank = session->rank(), world = session->world_size();
  try {
    auto store = rankd::c10d_store::Store::Create(client);
    auto pg_options = c10d::ProcessGroupGloo::Options::create();
    pg_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    c10d::ProcessGroupGloo pg(store, rank, world, pg_options);
    // Rank r holds {r + 1, 10 (r + 1)}: two ranks sum to {3, 30}.
    std::vector<at::Tensor> t = {
        at::tensor({int64_t{rank + 1}, int64_t{10 * (rank + 1)}})};
    pg.allreduce(t)->wait();
    std::printf("rank %d of %d: c10d all_reduce [%lld %lld]\n", rank, world,
                static_cast<long long>(t[0][0].item<int64_t>()),
                static_cast<long long>(t[0][1].item<int64_t>()));
    std::fflush(stdout);
    // A barrier before anyone leaves: nobody closes while a peer still
    // sends.
    std::vector<at::Tensor> last = {at::ones({1})};
    pg.allreduce(last)->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return client->Leave().ok() ? 0 : 1;
}
