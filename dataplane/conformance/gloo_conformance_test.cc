// The conformance suite (conformance_cases.h) on the Gloo backend: every
// case as one test, with real Gloo TCP connections on 127.0.0.1 between
// sessions that are threads of this process (GlooTestCluster).
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/conformance/conformance_cases.h"
#include "dataplane/conformance/run_case.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/gloo/testing/gloo_test_cluster.h"
#include "dataplane/host_tensor.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::conformance {
namespace {

struct GlooUnderTest {
  using Value = HostTensor;
  using Session = DistributedSession<HostTensor>;
  static constexpr char kName[] = "gloo";

  static void Run(uint32_t world, const SessionSetup& setup,
                  const std::function<void(uint32_t, Session&)>& body) {
    gloo::GlooSessionOptions options =
        gloo::testing::GlooTestCluster::DefaultOptions();
    options.verify_agreement = setup.verify_agreement;
    options.restrict_capabilities = setup.restrict_capabilities;
    options.op_timeout = setup.op_timeout;
    ParallelTopology topology;
    topology.data = world;
    if (setup.domain_size > 0) {
      topology.tensor = setup.domain_size;
      topology.data = world / setup.domain_size;
    }
    gloo::testing::GlooTestCluster cluster(topology, world, options,
                                           setup.domain_size > 0);
    ASSERT_TRUE(cluster.status().ok()) << cluster.status();
    cluster.Run([&](uint32_t rank) { body(rank, cluster.session(rank)); });
  }

  static absl::StatusOr<Value> Make(Session&, const ValueDescriptor& descriptor,
                                    const std::vector<uint8_t>& bytes) {
    return HostTensor::FromBytes(descriptor, bytes);
  }

  static absl::StatusOr<std::vector<uint8_t>> Read(const Value& value) {
    return std::vector<uint8_t>(value.bytes().begin(), value.bytes().end());
  }

  static void Poison(Session& session, const absl::Status& cause) {
    static_cast<gloo::GlooSession&>(session).Poison(cause);
  }

  static void Abort(Session& session, const absl::Status& cause) {
    static_cast<gloo::GlooSession&>(session).Abort(cause);
  }

  static absl::Status PoisonCause(Session& session) {
    return static_cast<gloo::GlooSession&>(session).poison();
  }
};

class GlooConformanceTest : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(GlooConformanceTest, Case) {
  CaseRunner<GlooUnderTest>::Run(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Table, GlooConformanceTest, ::testing::ValuesIn(Cases()),
    [](const ::testing::TestParamInfo<ConformanceCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rankd::dataplane::conformance
