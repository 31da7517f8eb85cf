// The world round under recovery by domain (see replica_round.h).
#include "examples/serving/replica_round.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/topology.h"
#include "examples/serving/resume_agreement.h"

namespace rankd::examples {
namespace {

uint32_t FloatBits(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float BitsFloat(uint32_t bits) {
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

ReplicaFrame::Kind KindOf(uint32_t flags) {
  if (flags & kFlagResume) return ReplicaFrame::Kind::kResume;
  if (flags & kFlagIdle) return ReplicaFrame::Kind::kIdle;
  return ReplicaFrame::Kind::kStep;
}

const char* KindName(ReplicaFrame::Kind kind) {
  switch (kind) {
    case ReplicaFrame::Kind::kStep:
      return "step";
    case ReplicaFrame::Kind::kIdle:
      return "idle";
    case ReplicaFrame::Kind::kResume:
      return "resume";
  }
  return "?";
}

}  // namespace

std::vector<uint32_t> EncodeReplicaFrame(const ReplicaFrame& f) {
  const bool step = f.kind == ReplicaFrame::Kind::kStep;
  std::vector<uint32_t> words =
      EncodeFrame(f.step, step ? f.batch : nullptr, f.stop, f.drain);
  if (f.kind == ReplicaFrame::Kind::kIdle) words[2] |= kFlagIdle;
  if (f.kind == ReplicaFrame::Kind::kResume) words[2] |= kFlagResume;
  if (f.fresh) words[2] |= kFlagFresh;
  words.push_back(static_cast<uint32_t>(f.generation));
  words.push_back(static_cast<uint32_t>(f.epoch));
  words.push_back(f.checks.passed);
  words.push_back(f.checks.failed);
  words.push_back(static_cast<uint32_t>(f.checks.values));
  words.push_back(static_cast<uint32_t>(f.checks.values >> 32));
  words.push_back(FloatBits(f.checks.max_abs_error));
  const CollectiveStats none;
  const std::vector<uint32_t> report =
      EncodeReport(f.stats != nullptr ? *f.stats : none, f.tokens, f.failed);
  words.insert(words.end(), report.begin(), report.end());
  return words;
}

const ReplicaInRound* ReplicaRound::Find(uint32_t replica) const {
  for (const ReplicaInRound& r : replicas) {
    if (r.replica == replica) return &r;
  }
  return nullptr;
}

bool ReplicaRound::AllIdle() const {
  return std::all_of(replicas.begin(), replicas.end(), [](const auto& r) {
    return r.kind == ReplicaFrame::Kind::kIdle;
  });
}

bool ReplicaRound::AnyActive() const { return !AllIdle(); }

absl::StatusOr<ReplicaRound> DecodeReplicaRound(
    const ServingLayout& layout, bool partial,
    absl::Span<const uint32_t> replicas, absl::Span<const uint64_t> epochs,
    absl::Span<const uint32_t> words) {
  const uint32_t size = DomainSizeOf(layout.topology);
  const auto fail = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("world round by replica: ", what));
  };
  if (replicas.size() != epochs.size() || replicas.empty() ||
      words.size() != replicas.size() * size * kReplicaFrameWords) {
    return fail(absl::StrCat(
        "got ", words.size(), " words for ", replicas.size(), " replicas of ",
        size, " ranks; expected frames of ", kReplicaFrameWords, " words"));
  }
  ReplicaRound round;
  round.partial = partial;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const uint32_t d = replicas[i];
    if (d >= layout.topology.data || (i > 0 && d <= replicas[i - 1])) {
      return fail(absl::StrCat("replicas ", absl::StrJoin(replicas, ", "),
                               " are not ascending replicas of ",
                               layout.topology.data));
    }
    absl::Span<const uint32_t> block =
        words.subspan(i * size * kReplicaFrameWords, size * kReplicaFrameWords);
    ReplicaInRound replica;
    replica.replica = d;
    replica.epoch = epochs[i];
    std::vector<uint32_t> bad;
    for (uint32_t j = 0; j < size; ++j) {
      const uint32_t* f = &block[j * kReplicaFrameWords];
      const uint32_t* x = f + kFrameWords;
      RankInRound rank;
      rank.rank = d * size + j;
      rank.flags = f[2];
      rank.generation = x[0];
      rank.epoch = x[1];
      rank.checks.passed = x[2];
      rank.checks.failed = x[3];
      rank.checks.values = x[4] | (static_cast<uint64_t>(x[5]) << 32);
      rank.checks.max_abs_error = BitsFloat(x[6]);
      auto report = DecodeReports(absl::MakeConstSpan(x + 7, kReportWords), 1);
      if (f[0] != kFrameMagic || !report.ok()) {
        bad.push_back(rank.rank);
        continue;
      }
      rank.report = (*report)[0];
      if (rank.flags & kFlagStop) round.stop_requested_by.push_back(rank.rank);
      if (rank.flags & kFlagDrain) {
        round.drain_requested_by.push_back(rank.rank);
      }
      round.ranks.push_back(rank);
    }
    if (!bad.empty()) {
      return fail(absl::StrCat("malformed frames from ranks ",
                               absl::StrJoin(bad, ", ")));
    }
    // One kind per replica.
    const RankInRound* first = &round.ranks[round.ranks.size() - size];
    replica.kind = KindOf(first->flags);
    for (uint32_t j = 0; j < size; ++j) {
      const RankInRound& r = first[j];
      if (KindOf(r.flags) != replica.kind) {
        return fail(
            absl::StrCat("replica ", d, " disagrees: rank ", first->rank,
                         " sent a ", KindName(replica.kind), " frame, rank ",
                         r.rank, " a ", KindName(KindOf(r.flags)), " frame"));
      }
    }
    const uint32_t first_step = block[1];
    switch (replica.kind) {
      case ReplicaFrame::Kind::kStep: {
        auto plan = DecodeRankFrames(layout, first_step, d * size, size,
                                     kReplicaFrameWords, block);
        if (!plan.ok()) {
          return fail(
              absl::StrCat("replica ", d, ": ", plan.status().message()));
        }
        replica.plan = *std::move(plan);
        replica.step = first_step;
        break;
      }
      case ReplicaFrame::Kind::kIdle:
        replica.step = first_step;
        break;
      case ReplicaFrame::Kind::kResume: {
        std::vector<uint32_t> resume;
        for (uint32_t j = 0; j < size; ++j) {
          const std::vector<uint32_t> one = EncodeResumeFrame(
              block[j * kReplicaFrameWords + 1], first[j].epoch);
          resume.insert(resume.end(), one.begin(), one.end());
        }
        auto step = DecodeResumeFrames(size, first->epoch, resume, first->rank);
        if (!step.ok()) {
          return fail(
              absl::StrCat("replica ", d, ": ", step.status().message()));
        }
        replica.step = *step;
        break;
      }
    }
    round.replicas.push_back(std::move(replica));
  }
  return round;
}

}  // namespace rankd::examples
