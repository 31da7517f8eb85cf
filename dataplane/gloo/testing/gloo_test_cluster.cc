#include "dataplane/gloo/testing/gloo_test_cluster.h"

#include <utility>

namespace rankd::dataplane::gloo::testing {

GlooSessionOptions GlooTestCluster::DefaultOptions() {
  GlooSessionOptions options;
  options.connect_timeout = absl::Seconds(20);
  options.op_timeout = absl::Seconds(20);
  options.words_timeout = absl::Seconds(20);
  options.failure_attribution_grace = absl::Seconds(2);
  return options;
}

GlooTestCluster::GlooTestCluster(ParallelTopology topology, uint32_t world_size,
                                 GlooSessionOptions options,
                                 bool recovery_by_domain)
    : GlooTestCluster(topology,
                      std::vector<GlooSessionOptions>(world_size, options),
                      recovery_by_domain) {}

GlooTestCluster::GlooTestCluster(ParallelTopology topology,
                                 std::vector<GlooSessionOptions> per_rank,
                                 bool recovery_by_domain)
    : world_size_(static_cast<uint32_t>(per_rank.size())),
      job_(InProcessJob::Create(world_size_)) {
  const uint32_t world_size = world_size_;
  for (uint32_t r = 0; r < world_size; ++r) {
    control_planes_.push_back(job_->ForRank(r));
  }
  sessions_.resize(world_size);
  std::vector<absl::Status> statuses(world_size);
  Run([&](uint32_t r) {
    auto descriptor =
        DistributedSessionDescriptor::FromTopology(topology, world_size, r);
    if (!descriptor.ok()) {
      statuses[r] = descriptor.status();
      return;
    }
    if (recovery_by_domain) {
      const uint32_t size = DomainSizeOf(topology);
      const uint32_t domain = r / size;
      if (absl::Status s =
              descriptor->SetRecoveryDomain({domain, domain * size, size});
          !s.ok()) {
        statuses[r] = s;
        return;
      }
    }
    auto session =
        GlooSession::Open(*descriptor, control_planes_[r].get(), per_rank[r]);
    if (!session.ok()) {
      statuses[r] = session.status();
      return;
    }
    sessions_[r] = *std::move(session);
  });
  for (const auto& s : statuses) {
    if (!s.ok() && status_.ok()) status_ = s;
  }
}

void GlooTestCluster::Run(const std::function<void(uint32_t rank)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world_size_; ++r) {
    threads.emplace_back([&fn, r] { fn(r); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace rankd::dataplane::gloo::testing
