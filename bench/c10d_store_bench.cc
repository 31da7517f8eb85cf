// c10d store latency: rankd's C++ c10d::Store (c10d_store/store.h) against
// libtorch's own c10d::TCPStore, in one process and one run, the C++ twin
// of bench/torch_rankd_bench.py's store latency (same operations: set of a
// new 100-byte value, get of an existing key, add of 1).
//
// Starts a real job of 2 rankd daemons (1 rank each, through
// tests/harness), joins both ranks from this process and measures the
// store of each: "rankd" from the coordinator's node (its daemon answers
// itself), "rankd-fwd" from the other node (its daemon forwards every call
// to the coordinator over the round link); "tcpstore" is a TCPStore server
// on 127.0.0.1 measured from its own process, as torch's rank 0 uses it.
// The three take turns per repetition. Prints the median of --iterations
// calls per operation and system, in microseconds, and rankd / tcpstore.
//
//   bazel run -c opt //bench:c10d_store_bench -- --iterations=1000 --repeat=3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "c10d_store/store.h"
#include "client/client.h"
#include "tests/harness/cluster.h"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"

ABSL_FLAG(int, iterations, 1000, "calls per operation and system");
ABSL_FLAG(int, repeat, 3, "repetitions (the systems take turns in each)");

namespace {

using Clock = std::chrono::steady_clock;

const char* const kOps[] = {"set", "get", "add"};

// {op: median microseconds} of `store`'s set, get and add.
std::map<std::string, double> Measure(c10d::Store& store, int iterations,
                                      const std::string& tag) {
  const std::vector<uint8_t> value(100, 'v');
  store.set(tag + "fixed", value);
  std::map<std::string, double> medians;
  for (const char* op : kOps) {
    std::vector<double> us;
    us.reserve(iterations);
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      if (op == std::string("set")) {
        store.set(absl::StrCat(tag, "k", i), value);
      } else if (op == std::string("get")) {
        store.get(tag + "fixed");
      } else {
        store.add(tag + "counter", 1);
      }
      us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count());
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    medians[op] = us[us.size() / 2];
    if (op == std::string("set")) {
      // Untimed: the next repetition sets new keys again, and a rank may
      // hold only so many (rankd --kv_max_keys_per_rank).
      for (int i = 0; i < iterations; ++i) {
        store.deleteKey(absl::StrCat(tag, "k", i));
      }
    }
  }
  return medians;
}

int Run() {
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const int repeat = absl::GetFlag(FLAGS_repeat);
  if (iterations < 1 || repeat < 1) {
    std::fprintf(stderr, "--iterations and --repeat must be >= 1\n");
    return 2;
  }
  rankd::testing::ClusterOptions options;
  options.job_id = "c10d-store-bench";
  options.nnodes = 2;
  options.nproc_per_node = 1;
  options.declare_shared_prefix = false;
  options.extra_flags = {"--kv_shared_prefixes=torch/"};
  rankd::testing::LocalCluster cluster(options);
  if (absl::Status s = cluster.Start(); !s.ok()) {
    std::fprintf(stderr, "starting the daemons: %s\n", s.ToString().c_str());
    return 1;
  }
  // Both ranks stay joined until the end: a rank that leaves drains the job.
  std::vector<std::shared_ptr<rankd::Client>> clients;
  for (uint32_t node = 0; node < 2; ++node) {
    rankd::ClientOptions client_options;
    client_options.target = cluster.socket_target(node);
    client_options.bearer_token = cluster.rank_token(node);
    auto client = rankd::Client::Connect(client_options);
    if (!client.ok()) {
      std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
      return 1;
    }
    rankd::JoinOptions join;
    join.job_id = options.job_id;
    join.local_rank = 0;
    join.device.set_kind("cpu");
    join.wait_for_world = absl::ZeroDuration();
    if (auto joined = (*client)->Join(join); !joined.ok()) {
      std::fprintf(stderr, "join: %s\n", joined.status().ToString().c_str());
      return 1;
    }
    clients.push_back(std::shared_ptr<rankd::Client>(std::move(*client)));
  }
  c10d::TCPStoreOptions tcp;
  tcp.port = 0;
  tcp.isServer = true;
  tcp.numWorkers = 1;
  tcp.waitWorkers = false;
  auto tcpstore = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", tcp);

  std::printf(
      "c10d store latency, median of %d calls, microseconds (100-byte "
      "values)\n",
      iterations);
  std::printf("%-6s %-4s %9s %9s %9s %15s %19s\n", "repeat", "op", "rankd",
              "rankd-fwd", "tcpstore", "rankd/tcpstore", "rankd-fwd/tcpstore");
  for (int r = 0; r < repeat; ++r) {
    const std::string tag = absl::StrCat("r", r, "/");
    std::map<std::string, std::map<std::string, double>> by_system;
    by_system["tcpstore"] = Measure(*tcpstore, iterations, tag);
    for (uint32_t node = 0; node < 2; ++node) {
      rankd::c10d_store::StoreOptions store_options;
      store_options.prefix = absl::StrCat("torch/bench", node, "/");
      store_options.install_failure_callback = false;
      auto store =
          rankd::c10d_store::Store::Create(clients[node], store_options);
      by_system[node == 0 ? "rankd" : "rankd-fwd"] =
          Measure(*store, iterations, tag);
    }
    for (const char* op : kOps) {
      const double t = by_system["tcpstore"][op];
      std::printf("%-6d %-4s %9.1f %9.1f %9.1f %15.2f %19.2f\n", r + 1, op,
                  by_system["rankd"][op], by_system["rankd-fwd"][op], t,
                  by_system["rankd"][op] / t, by_system["rankd-fwd"][op] / t);
    }
  }
  for (auto& client : clients) (void)client->Leave();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  try {
    return Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d_store_bench: %s\n", e.what());
    return 1;
  }
}
