// dataplane_worker: a serving-process stand-in for the data-plane
// integration tests (tests/dataplane_test.cc). It joins a rankd job through
// the client library, opens a GlooSession over the client's control plane
// and runs the scenario its flags ask for, checking every result exactly.
// One line per outcome:
//   JOINED rank=R world=W
//   SESSION_READY
//   CHECK name                                   (a check passed)
//   MISMATCH name: detail                        (exit 4)
//   ERROR code=CODE elapsed_ms=T msg=MESSAGE     (exit 3)
//   STALLING iteration=K                         (fault victim)
//   OP_FAILED code=CODE elapsed_ms=T msg=MESSAGE (fault survivor)
//   POISONED code=CODE elapsed_ms=T msg=MESSAGE  (fault survivor, exit 5)
//   DONE                                         (exit 0)
//
// Scenarios (--scenario):
//   ops        every DistributedSession and CommunicationBackend operation
//              on the world and on the rank's groups, with exact values.
//   subgroups  collectives and point-to-point on every group of an
//              overlapping layout (e.g. TP2 x PP2 x EP2), exact values.
//   fault      a loop of world all_reduce_sum; --victim stalls at
//              --stall_iteration (and is killed by the test); survivors
//              report how their pending completion failed and that the
//              session is poisoned.
//   mismatch   a loop of world all_reduce_sum of f32[64]; at
//              --stall_iteration --victim submits f32[3] instead; every
//              rank reports how that operation failed (OP_FAILED, exit 5).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/element_types.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"

ABSL_FLAG(std::string, target, "", "daemon target");
ABSL_FLAG(std::string, job_id, "itest", "job id");
ABSL_FLAG(uint32_t, local_rank, 0, "local rank");
ABSL_FLAG(uint32_t, world_size, 0, "expected world size");
ABSL_FLAG(std::string, scenario, "ops", "ops | subgroups | fault | mismatch");
ABSL_FLAG(int, op_timeout_ms, 30000, "Gloo per-operation timeout");
ABSL_FLAG(int, victim, -1,
          "fault: the rank that stalls; mismatch: the rank that disagrees");
ABSL_FLAG(int, stall_iteration, 3,
          "fault, mismatch: the iteration the victim stalls or disagrees");
ABSL_FLAG(int, iterations, 1000, "fault: all_reduce_sum iterations");

namespace {

using rankd::dataplane::BFloat16;
using rankd::dataplane::CancellationMode;
using rankd::dataplane::CollectiveGroupId;
using rankd::dataplane::CollectiveScope;
using rankd::dataplane::Float16;
using rankd::dataplane::HostTensor;
using rankd::dataplane::PeerCounts;
using rankd::dataplane::TensorDtype;
using rankd::dataplane::ValueDescriptor;
using rankd::dataplane::gloo::GlooBackend;
using rankd::dataplane::gloo::GlooGroup;
using rankd::dataplane::gloo::GlooSession;

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// A scenario step failed: ERROR (status) or MISMATCH (value).
struct Failure {
  int exit_code;
};

absl::Time g_started;

[[noreturn]] void Fail(const absl::Status& status) {
  Print(absl::StrCat(
      "ERROR code=", absl::StatusCodeToString(status.code()),
      " elapsed_ms=", absl::ToInt64Milliseconds(absl::Now() - g_started),
      " msg=", status.message()));
  throw Failure{3};
}

template <typename T>
T Must(absl::StatusOr<T> value) {
  if (!value.ok()) Fail(value.status());
  return *std::move(value);
}

void Must(const absl::Status& status) {
  if (!status.ok()) Fail(status);
}

template <typename T>
std::vector<T> ValuesOf(const HostTensor& t) {
  auto v = Must(t.Values<T>());
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void Expect(const std::string& name, const std::vector<T>& got,
            const std::vector<T>& want) {
  if (got == want) {
    Print(absl::StrCat("CHECK ", name));
    return;
  }
  std::vector<std::string> g, w;
  for (const T& v : got) g.push_back(absl::StrCat(v));
  for (const T& v : want) w.push_back(absl::StrCat(v));
  Print(absl::StrCat("MISMATCH ", name, ": got [", absl::StrJoin(g, ","),
                     "] want [", absl::StrJoin(w, ","), "]"));
  throw Failure{4};
}

void ExpectTrue(const std::string& name, bool ok, const std::string& detail) {
  if (ok) {
    Print(absl::StrCat("CHECK ", name));
    return;
  }
  Print(absl::StrCat("MISMATCH ", name, ": ", detail));
  throw Failure{4};
}

// Waits for a completion, also exercising the bounded form.
template <typename C>
void Complete(const C& completion) {
  auto outcome = Must(completion->WaitBounded(
      absl::Seconds(60), CancellationMode::kQuarantineUntilComplete));
  if (!outcome.completed()) Fail(absl::DeadlineExceededError("op timed out"));
  Must(completion->Wait());
}

struct Layout {
  uint32_t rank = 0;
  uint32_t world = 0;
  // kind -> (group id, members) of this rank's groups.
  std::map<rankd::v1::GroupKind,
           std::pair<CollectiveGroupId, std::vector<uint32_t>>>
      groups;
};

Layout LayoutOf(const rankd::v1::SessionDescriptor& d) {
  Layout layout;
  layout.rank = d.rank();
  layout.world = d.world_size();
  for (const auto& g : d.groups()) {
    layout.groups[g.kind()] = {
        g.id(), std::vector<uint32_t>(g.members().begin(), g.members().end())};
  }
  return layout;
}

template <typename T>
void WorldSum(GlooSession& s, const Layout& l, const std::string& name,
              T (*make)(uint32_t rank, int i)) {
  std::vector<T> mine, want(4);
  for (int i = 0; i < 4; ++i) mine.push_back(make(l.rank, i));
  for (int i = 0; i < 4; ++i) {
    for (uint32_t r = 0; r < l.world; ++r) want[i] = want[i] + make(r, i);
  }
  auto sub = Must(s.AllReduceSum(
      CollectiveScope::World(), Must(HostTensor::FromVector<T>({2, 2}, mine))));
  Complete(sub.completion);
  Expect(name, ValuesOf<T>(sub.output), want);
}

// ---- scenario: ops ----------------------------------------------------------

void RunOps(GlooSession& s, const Layout& l) {
  const uint32_t r = l.rank, w = l.world;
  // all_reduce_sum over the world, one dtype after another.
  WorldSum<float>(s, l, "all_reduce_sum f32",
                  [](uint32_t k, int i) { return 0.5f * k + i; });
  WorldSum<double>(s, l, "all_reduce_sum f64",
                   [](uint32_t k, int i) { return 0.25 * k - i; });
  WorldSum<int32_t>(s, l, "all_reduce_sum i32",
                    [](uint32_t k, int i) { return -1000 * int(k) + i; });
  WorldSum<int64_t>(s, l, "all_reduce_sum i64", [](uint32_t k, int i) {
    return (int64_t{1} << 40) * k + i;
  });
  WorldSum<uint32_t>(s, l, "all_reduce_sum u32",
                     [](uint32_t k, int i) { return 3u * k + i; });
  WorldSum<uint8_t>(s, l, "all_reduce_sum u8", [](uint32_t k, int i) {
    return static_cast<uint8_t>(50 * k + i);
  });
  {
    std::vector<Float16> h;
    std::vector<BFloat16> b;
    for (int i = 0; i < 4; ++i) {
      h.push_back(Float16::FromFloat(float(r + i)));
      b.push_back(BFloat16::FromFloat(float(2 * r + i)));
    }
    auto hs =
        Must(s.AllReduceSum(CollectiveScope::World(),
                            Must(HostTensor::FromVector<Float16>({4}, h))));
    auto bs =
        Must(s.AllReduceSum(CollectiveScope::World(),
                            Must(HostTensor::FromVector<BFloat16>({4}, b))));
    Complete(hs.completion);
    Complete(bs.completion);
    std::vector<float> got_h, got_b, want_h, want_b;
    const float ranks = float(w) * float(w - 1) / 2;  // 0 + 1 + ... + w-1
    for (int i = 0; i < 4; ++i) {
      got_h.push_back(ValuesOf<Float16>(hs.output)[i].ToFloat());
      got_b.push_back(ValuesOf<BFloat16>(bs.output)[i].ToFloat());
      want_h.push_back(ranks + float(w) * i);
      want_b.push_back(2 * ranks + float(w) * i);
    }
    Expect("all_reduce_sum f16", got_h, want_h);
    Expect("all_reduce_sum bf16", got_b, want_b);
  }
  // all_reduce_sum over every group of this rank (subgroup scopes).
  for (const auto& [kind, group] : l.groups) {
    auto sub = Must(s.AllReduceSum(
        CollectiveScope::Group(group.first),
        Must(HostTensor::FromVector<int64_t>({1}, {int64_t(r) + 1}))));
    Complete(sub.completion);
    int64_t want = 0;
    for (uint32_t m : group.second) want += m + 1;
    Expect(absl::StrCat("all_reduce_sum group ", group.first),
           ValuesOf<int64_t>(sub.output), {want});
  }
  // all_gather over the world: members' inputs in member order.
  {
    auto g = Must(s.AllGather(
        CollectiveScope::World(),
        Must(HostTensor::FromVector<int32_t>(
            {2, 2}, {int(r), int(r) + 100, int(r) + 200, int(r) + 300}))));
    Complete(g.completion);
    std::vector<int32_t> want;
    for (uint32_t m = 0; m < w; ++m) {
      for (int k = 0; k < 4; ++k) want.push_back(int(m) + 100 * k);
    }
    Expect("all_gather world", ValuesOf<int32_t>(g.output), want);
  }
  // all_to_all_v: counts[s][d] rows from s to d; rank 1 sends nothing.
  auto count = [](uint32_t src, uint32_t dst) -> size_t {
    return src == 1 ? 0 : (src + 2 * dst) % 3;
  };
  {
    std::vector<size_t> send(w), receive(w);
    std::vector<uint32_t> rows;
    size_t total = 0;
    for (uint32_t d = 0; d < w; ++d) {
      send[d] = count(r, d);
      receive[d] = count(d, r);
      for (size_t k = 0; k < send[d]; ++k) {
        rows.push_back(r * 1000 + d * 10 + uint32_t(k));
        rows.push_back(7);
      }
      total += send[d];
    }
    auto input = Must(HostTensor::FromRows<uint32_t>(total, {2}, rows));
    auto a = Must(s.AllToAllV(CollectiveScope::World(), input, send, receive));
    Complete(a.completion);
    std::vector<uint32_t> want;
    for (uint32_t src = 0; src < w; ++src) {
      for (size_t k = 0; k < count(src, r); ++k) {
        want.push_back(src * 1000 + r * 10 + uint32_t(k));
        want.push_back(7);
      }
    }
    Expect("all_to_all_v asymmetric", ValuesOf<uint32_t>(a.output), want);
    // The all-zero exchange: everyone takes part, nothing moves.
    std::vector<size_t> zeros(w, 0);
    auto z = Must(s.AllToAllV(CollectiveScope::World(),
                              Must(HostTensor::FromRows<uint32_t>(0, {2}, {})),
                              zeros, zeros));
    Complete(z.completion);
    ExpectTrue("all_to_all_v all zero", z.output.descriptor().rows() == 0,
               z.output.descriptor().ToString());
  }
  // Send / receive along the pipeline: stage p sends to stage p+1.
  if (auto it = l.groups.find(rankd::v1::GROUP_KIND_PIPELINE);
      it != l.groups.end() && it->second.second.size() > 1) {
    const auto& [id, members] = it->second;
    size_t me = 0;
    while (members[me] != r) ++me;
    const CollectiveScope pipe = CollectiveScope::Group(id);
    if (me > 0) {
      auto got = Must(s.Receive(
          pipe, me - 1, Must(ValueDescriptor::Create({3}, TensorDtype::kF32))));
      Complete(got.completion);
      const float from = float(members[me - 1]);
      Expect("receive from previous stage", ValuesOf<float>(got.output),
             {from, from + 0.5f, -from});
    }
    if (me + 1 < members.size()) {
      auto sent = Must(s.Send(pipe, me + 1,
                              Must(HostTensor::FromVector<float>(
                                  {3}, {float(r), r + 0.5f, -float(r)}))));
      Complete(sent.completion);
      Print("CHECK send to next stage");
    }
  }
  // all_gather_words over the control plane.
  {
    auto words = Must(s.AllGatherWords(std::vector<uint32_t>{r, 7}));
    std::vector<uint32_t> want;
    for (uint32_t m = 0; m < w; ++m) {
      want.push_back(m);
      want.push_back(7);
    }
    Expect("all_gather_words", words, want);
    auto pending = Must(s.SubmitAllGatherWords(std::vector<uint32_t>{r + 1},
                                               absl::Seconds(30)));
    std::vector<uint32_t> want2;
    for (uint32_t m = 0; m < w; ++m) want2.push_back(m + 1);
    Expect("all_gather_words bounded", Must(pending->Result()), want2);
  }

  // ---- the CommunicationBackend contract on the same communicators ----
  GlooBackend& b = s.backend();
  auto& e = b.executor();
  GlooGroup& world = b.world();
  // Local dependencies order behind earlier work.
  {
    HostTensor x = Must(HostTensor::FromVector<int32_t>({1}, {1}));
    const HostTensor* values[] = {&x};
    auto deps = Must(GlooBackend::SubmitLocalDependencies(values, e));
    Complete(deps.completion);
    Print("CHECK submit_local_dependencies");
  }
  // Uneven gather: member m contributes m % 3 rows (some contribute none).
  {
    std::vector<size_t> counts(w);
    for (uint32_t m = 0; m < w; ++m) counts[m] = m % 3;
    std::vector<int16_t> rows;
    for (size_t k = 0; k < counts[r]; ++k) {
      rows.push_back(int16_t(r * 10 + k));
      rows.push_back(int16_t(-int(r)));
    }
    auto u = Must(b.AllGatherUneven(
        Must(HostTensor::FromRows<int16_t>(counts[r], {2}, rows)), counts, 0,
        world, e));
    Complete(u.completion);
    std::vector<int16_t> want;
    for (uint32_t m = 0; m < w; ++m) {
      for (size_t k = 0; k < counts[m]; ++k) {
        want.push_back(int16_t(m * 10 + k));
        want.push_back(int16_t(-int(m)));
      }
    }
    Expect("all_gather_uneven", ValuesOf<int16_t>(u.output), want);
  }
  // Even gather along axis 1.
  {
    auto g =
        Must(b.AllGatherEven(Must(HostTensor::FromVector<uint16_t>(
                                 {2, 1}, {uint16_t(r), uint16_t(r + 100)})),
                             1, world, e));
    Complete(g.completion);
    std::vector<uint16_t> want;
    for (uint32_t m = 0; m < w; ++m) want.push_back(uint16_t(m));
    for (uint32_t m = 0; m < w; ++m) want.push_back(uint16_t(m + 100));
    Expect("all_gather_even axis 1", ValuesOf<uint16_t>(g.output), want);
  }
  // Variable all-to-all along axis 0 on the backend (same matrix as above).
  {
    PeerCounts counts;
    std::vector<double> rows;
    for (uint32_t d = 0; d < w; ++d) {
      counts.send.push_back(count(r, d));
      counts.receive.push_back(count(d, r));
      for (size_t k = 0; k < count(r, d); ++k) rows.push_back(r + d / 10.0);
    }
    auto a = Must(b.VariableAllToAll(
        Must(HostTensor::FromRows<double>(rows.size(), {}, rows)), counts, 0,
        world, e));
    Complete(a.completion);
    std::vector<double> want;
    for (uint32_t src = 0; src < w; ++src) {
      for (size_t k = 0; k < count(src, r); ++k) want.push_back(src + r / 10.0);
    }
    Expect("variable_all_to_all", ValuesOf<double>(a.output), want);
  }
  // Broadcast from the last member (a non-zero root).
  {
    auto bc = Must(b.Broadcast(
        Must(HostTensor::FromVector<int64_t>({2}, {int64_t(r), -int64_t(r)})),
        w - 1, world, e));
    Complete(bc.completion);
    Expect("broadcast root", ValuesOf<int64_t>(bc.output),
           {int64_t(w - 1), -int64_t(w - 1)});
  }
  // Barrier, then agree_success with one false vote, then a unanimous one.
  {
    auto barrier = Must(b.Barrier(world, e));
    Complete(barrier.completion);
    Print("CHECK barrier");
    auto vote = Must(b.AgreeSuccess(r != 2, world, e));
    auto all = Must(b.AgreeSuccess(true, world, e));
    Complete(vote.completion);
    Complete(all.completion);
    ExpectTrue("agree_success one false vote", !Must(vote.output->Resolve()),
               "resolved true");
    ExpectTrue("agree_success unanimous", Must(all.output->Resolve()),
               "resolved false");
  }
  // Send/receive bundles along pipeline routes (stage p -> p+1).
  if (auto it = l.groups.find(rankd::v1::GROUP_KIND_PIPELINE);
      it != l.groups.end() && it->second.second.size() > 1) {
    GlooGroup& pipe = *Must(b.group(it->second.first));
    const auto& members = pipe.members();
    const uint32_t me = pipe.local_rank();
    if (me > 0) {
      auto route = Must(b.Route(pipe, members[me - 1], r));
      std::vector<ValueDescriptor> shapes = {
          Must(ValueDescriptor::Create({2}, TensorDtype::kF32)),
          Must(ValueDescriptor::Create({1, 3}, TensorDtype::kI64))};
      auto got = Must(b.ReceiveBundle(shapes, route, e));
      Complete(got.completion);
      const uint32_t from = members[me - 1];
      Expect("bundle tensor 0", ValuesOf<float>(got.output[0]),
             {float(from), 1.5f});
      Expect("bundle tensor 1", ValuesOf<int64_t>(got.output[1]),
             {int64_t(from), 2, 3});
    }
    if (me + 1 < members.size()) {
      auto route = Must(b.Route(pipe, r, members[me + 1]));
      std::vector<HostTensor> bundle = {
          Must(HostTensor::FromVector<float>({2}, {float(r), 1.5f})),
          Must(HostTensor::FromVector<int64_t>({1, 3}, {int64_t(r), 2, 3}))};
      auto sent = Must(b.SendReceive(bundle, route, e));
      Complete(sent.completion);
      Print("CHECK bundle sent");
    }
  }
}

// ---- scenario: subgroups ----------------------------------------------------

void RunSubgroups(GlooSession& s, const Layout& l) {
  const uint32_t r = l.rank;
  GlooBackend& b = s.backend();
  // Interleave operations on every group, twice, to show the overlapping
  // groups keep their own order.
  for (int round = 0; round < 2; ++round) {
    for (const auto& [kind, group] : l.groups) {
      const auto& [id, members] = group;
      const std::string name = absl::StrCat(rankd::v1::GroupKind_Name(kind),
                                            " group ", id, " round ", round);
      auto sum = Must(s.AllReduceSum(
          CollectiveScope::Group(id),
          Must(HostTensor::FromVector<int32_t>({2}, {int(r), round}))));
      auto gathered = Must(s.AllGather(
          CollectiveScope::Group(id),
          Must(HostTensor::FromVector<uint32_t>({}, {r * 10 + round}))));
      Complete(sum.completion);
      Complete(gathered.completion);
      int32_t want_sum = 0;
      std::vector<uint32_t> want_gather;
      for (uint32_t m : members) {
        want_sum += int(m);
        want_gather.push_back(m * 10 + round);
      }
      Expect(absl::StrCat("sum ", name), ValuesOf<int32_t>(sum.output),
             {want_sum, round * int(members.size())});
      Expect(absl::StrCat("gather ", name), ValuesOf<uint32_t>(gathered.output),
             want_gather);
      // A ring of sends within the group: member i -> i+1 (mod n).
      if (members.size() > 1) {
        GlooGroup& g = *Must(b.group(id));
        const uint32_t me = g.local_rank(), n = g.size();
        const uint32_t next = members[(me + 1) % n];
        const uint32_t prev = members[(me + n - 1) % n];
        HostTensor payload =
            Must(HostTensor::FromVector<uint32_t>({1}, {r * 100 + id}));
        // Even members send first, odd members receive first, so a
        // two-member ring does not wait on itself.
        std::vector<HostTensor> got;
        auto send = [&] {
          auto route = Must(b.Route(g, r, next));
          auto sub = Must(b.SendReceive({payload}, route, b.executor()));
          Complete(sub.completion);
        };
        auto receive = [&] {
          auto route = Must(b.Route(g, prev, r));
          std::vector<ValueDescriptor> shape = {payload.descriptor()};
          auto sub = Must(b.ReceiveBundle(shape, route, b.executor()));
          Complete(sub.completion);
          got = sub.output;
        };
        if (me % 2 == 0) {
          send();
          receive();
        } else {
          receive();
          send();
        }
        Expect(absl::StrCat("ring ", name), ValuesOf<uint32_t>(got[0]),
               {prev * 100 + id});
      }
    }
  }
}

// ---- scenario: fault --------------------------------------------------------

int RunFault(GlooSession& s, const Layout& l) {
  const int victim = absl::GetFlag(FLAGS_victim);
  const int stall = absl::GetFlag(FLAGS_stall_iteration);
  for (int i = 0; i < absl::GetFlag(FLAGS_iterations); ++i) {
    if (int(l.rank) == victim && i == stall) {
      Print(absl::StrCat("STALLING iteration=", i));
      absl::SleepFor(absl::Seconds(120));  // the test kills us
      return 3;
    }
    absl::Time submitted = absl::Now();
    auto sum = Must(s.AllReduceSum(
        CollectiveScope::World(),
        Must(HostTensor::FromVector<float>({64}, std::vector<float>(64, 1)))));
    if (i == stall) Print(absl::StrCat("SUBMITTED iteration=", i));
    absl::Status status = sum.completion->Wait();
    if (!status.ok()) {
      Print(absl::StrCat(
          "OP_FAILED code=", absl::StatusCodeToString(status.code()),
          " elapsed_ms=", absl::ToInt64Milliseconds(absl::Now() - submitted),
          " msg=", status.message()));
      absl::Time again = absl::Now();
      auto later =
          s.AllReduceSum(CollectiveScope::World(),
                         Must(HostTensor::FromVector<float>({1}, {1.0f})));
      absl::Status refused = later.status();
      Print(absl::StrCat(
          "POISONED code=", absl::StatusCodeToString(refused.code()),
          " elapsed_ms=", absl::ToInt64Milliseconds(absl::Now() - again),
          " msg=", refused.message()));
      return 5;
    }
    Expect(absl::StrCat("iteration ", i), {ValuesOf<float>(sum.output)[0]},
           std::vector<float>{float(l.world)});
  }
  return 0;
}

// ---- scenario: mismatch -----------------------------------------------------

int RunMismatch(GlooSession& s, const Layout& l) {
  const int victim = absl::GetFlag(FLAGS_victim);
  const int at = absl::GetFlag(FLAGS_stall_iteration);
  for (int i = 0; i <= at; ++i) {
    const size_t n = int(l.rank) == victim && i == at ? 3 : 64;
    const absl::Time submitted = absl::Now();
    auto sum = Must(s.AllReduceSum(
        CollectiveScope::World(),
        Must(HostTensor::FromVector<float>({n}, std::vector<float>(n, 1)))));
    absl::Status status = sum.completion->Wait();
    if (i < at) {
      Must(status);
      Expect(absl::StrCat("iteration ", i), {ValuesOf<float>(sum.output)[0]},
             std::vector<float>{float(l.world)});
      continue;
    }
    if (status.ok()) {
      Print(absl::StrCat("MISMATCH iteration ", i,
                         ": the disagreeing all_reduce_sum succeeded"));
      return 4;
    }
    Print(absl::StrCat(
        "OP_FAILED code=", absl::StatusCodeToString(status.code()),
        " elapsed_ms=", absl::ToInt64Milliseconds(absl::Now() - submitted),
        " msg=", status.message()));
    return !s.backend().poison().ok() ? 5 : 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  g_started = absl::Now();
  try {
    rankd::ClientOptions options;
    options.target = absl::GetFlag(FLAGS_target);
    auto client = Must(rankd::Client::Connect(options));
    rankd::JoinOptions join;
    join.job_id = absl::GetFlag(FLAGS_job_id);
    join.local_rank = absl::GetFlag(FLAGS_local_rank);
    join.world_size = absl::GetFlag(FLAGS_world_size);
    join.device.set_kind("cpu");
    join.wait_for_world = absl::Seconds(60);
    const rankd::v1::SessionDescriptor descriptor = Must(client->Join(join));
    const Layout layout = LayoutOf(descriptor);
    Print(absl::StrCat("JOINED rank=", layout.rank, " world=", layout.world));

    auto control_plane = rankd::dataplane::MakeClientControlPlane(client.get());
    rankd::dataplane::gloo::GlooSessionOptions gloo;
    gloo.op_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_op_timeout_ms));
    gloo.connect_timeout = absl::Seconds(60);
    auto session = Must(GlooSession::Open(
        Must(rankd::dataplane::DescriptorFromProto(descriptor)),
        control_plane.get(), gloo));
    Print("SESSION_READY");

    const std::string scenario = absl::GetFlag(FLAGS_scenario);
    if (scenario == "ops") {
      RunOps(*session, layout);
    } else if (scenario == "subgroups") {
      RunSubgroups(*session, layout);
    } else if (scenario == "fault") {
      if (int code = RunFault(*session, layout); code != 0) return code;
    } else if (scenario == "mismatch") {
      if (int code = RunMismatch(*session, layout); code != 0) return code;
    } else {
      Fail(absl::InvalidArgumentError("unknown --scenario " + scenario));
    }
    // Every rank is done with the data plane before anyone closes it.
    Must(session->AllGatherWords(std::vector<uint32_t>{layout.rank}));
    session.reset();
    Must(client->Leave());
    Print("DONE");
    return 0;
  } catch (const Failure& failure) {
    return failure.exit_code;
  }
}
