#include "daemon/coordinator/word_rounds.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "common/rank_list.h"
#include "google/protobuf/io/coded_stream.h"

namespace rankd {
namespace {

constexpr size_t kFailedRoundsKept = 64;

// "node 1: 3; node 2: 7, 8"
std::string MissingByNode(const std::vector<uint32_t>& missing,
                          const WordRounds::NodeOfRank& node_of) {
  std::map<uint32_t, std::vector<uint32_t>> by_node;
  for (uint32_t r : missing) by_node[node_of(r)].push_back(r);
  std::vector<std::string> parts;
  for (auto& [node, ranks] : by_node) {
    parts.push_back(absl::StrCat("node ", node, ": ", FormatRankList(ranks)));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

namespace {
bool ValidDomainSize(uint32_t world_size, uint32_t domain_size) {
  return domain_size > 0 && domain_size <= world_size &&
         world_size % domain_size == 0;
}
}  // namespace

WordRounds::WordRounds(uint32_t world_size, NodeOfRank node_of,
                       DeadlineTimer* timer, size_t max_bytes_per_rank,
                       uint32_t domain_size)
    : world_size_(world_size),
      node_of_(std::move(node_of)),
      timer_(timer),
      max_bytes_per_rank_(max_bytes_per_rank),
      domain_size_(ValidDomainSize(world_size, domain_size)
                       ? domain_size
                       : std::max<uint32_t>(world_size, 1)),
      by_domain_(ValidDomainSize(world_size, domain_size)),
      domains_(std::max<uint32_t>(world_size, 1) / domain_size_),
      bytes_of_rank_(world_size, 0) {}

bool WordRounds::ServesInLocked(uint32_t domain, uint64_t number) const {
  const Domain& d = domains_[domain];
  return d.serving && number >= d.entry_round;
}

uint32_t WordRounds::ExpectedLocked(uint64_t number) const {
  uint32_t expected = 0;
  for (uint32_t d = 0; d < domains_.size(); ++d) {
    if (ServesInLocked(d, number)) expected += domain_size_;
  }
  return expected;
}

void WordRounds::ReleaseLocked(const Round& round) {
  for (uint32_t r = 0; r < world_size_; ++r) {
    if (round.present[r]) {
      bytes_of_rank_[r] -= sizeof(uint32_t) * round.frames[r].size();
    }
  }
}

const std::string& WordRounds::Outcome::Encoded() const {
  absl::call_once(encode_once_, [this] {
    v1::RoundOutcome message;
    message.set_round(round_);
    message.set_code(static_cast<int32_t>(result_.status().code()));
    if (result_.ok()) {
      *message.mutable_result() = *result_;
    } else {
      message.set_message(std::string(result_.status().message()));
    }
    encoded_ = message.SerializeAsString();
  });
  return encoded_;
}

const std::string& WordRounds::Outcome::LinkEncoded() const {
  absl::call_once(link_encode_once_, [this] {
    // Fixed width only when it is smaller: words of serving metadata are
    // often small numbers, one or two bytes as varints.
    size_t varint_bytes = 0;
    if (result_.ok()) {
      for (uint32_t w : result_->words()) {
        varint_bytes +=
            google::protobuf::io::CodedOutputStream::VarintSize32(w);
      }
    }
    if (!result_.ok() ||
        varint_bytes <= 4 * static_cast<size_t>(result_->words_size())) {
      link_ = &Encoded();  // the same bytes, not a copy
      return;
    }
    v1::RoundOutcome message;
    message.set_round(round_);
    v1::AllGatherWordsResponse* result = message.mutable_result();
    result->set_round(result_->round());
    result->set_words_per_rank(result_->words_per_rank());
    result->set_partial(result_->partial());
    *result->mutable_domains() = result_->domains();
    std::string* words = message.mutable_words_le();
    words->resize(4 * static_cast<size_t>(result_->words_size()));
    char* out = words->data();
    for (uint32_t w : result_->words()) {
      for (int b = 0; b < 4; ++b) *out++ = static_cast<char>(w >> (8 * b));
    }
    link_encoded_ = message.SerializeAsString();
    link_ = &link_encoded_;
  });
  return *link_;
}

std::string WordRounds::Outcome::TagSuffix(uint64_t tag) {
  // Field 5 (RoundOutcome.tag) as a varint.
  std::string bytes(1, static_cast<char>((5 << 3) | 0));
  do {
    uint8_t b = tag & 0x7f;
    tag >>= 7;
    bytes.push_back(static_cast<char>(tag != 0 ? (b | 0x80) : b));
  } while (tag != 0);
  return bytes;
}

void WordRounds::Answer(std::vector<Contributor>& contributors, uint64_t number,
                        absl::StatusOr<v1::AllGatherWordsResponse> result) {
  auto outcome = std::make_shared<const Outcome>(number, std::move(result));
  for (auto& c : contributors) c.done(outcome);
}

void WordRounds::Contribute(uint64_t number, std::vector<v1::RankFrame> frames,
                            absl::Time deadline, Done done,
                            absl::Duration waited) {
  ContributeShared(
      number, std::move(frames), deadline,
      [done = std::move(done)](std::shared_ptr<const Outcome> o) {
        done(o->result());
      },
      waited);
}

void WordRounds::ContributeShared(uint64_t number,
                                  std::vector<v1::RankFrame> frames,
                                  absl::Time deadline, SharedDone shared_done,
                                  absl::Duration waited, uint64_t epoch) {
  // A refusal of this contribution alone.
  auto done = [&shared_done, number](absl::Status refusal) {
    shared_done(std::make_shared<const Outcome>(number, std::move(refusal)));
  };
  if (number == 0) {
    return done(absl::InvalidArgumentError("round numbers start at 1"));
  }
  for (const auto& f : frames) {
    if (f.rank() >= world_size_) {
      return done(absl::InvalidArgumentError(absl::StrCat(
          "rank ", f.rank(), " is outside the world of size ", world_size_)));
    }
    if (auto s = CheckFrameWords(f.words_size(), world_size_); !s.ok()) {
      return done(absl::InvalidArgumentError(absl::StrCat(
          "rank ", f.rank(), " in round ", number, ": ", s.message())));
    }
  }
  std::vector<bool> seen(world_size_, false);
  for (const auto& f : frames) {
    if (seen[f.rank()]) {
      return done(absl::InvalidArgumentError(absl::StrCat(
          "rank ", f.rank(), " appears twice in one contribution to round ",
          number)));
    }
    seen[f.rank()] = true;
  }
  std::vector<Contributor> finished;
  absl::StatusOr<v1::AllGatherWordsResponse> result;
  absl::Status rejected;
  {
    absl::MutexLock lock(&mu_);
    // Only a round inside the window (as any round admitted then was): a
    // far-ahead number must not move the rounds' mark (it is refused below).
    if (by_domain_ && epoch != 0 && epoch < epoch_ && failure_.ok() &&
        number > completed_ && !finished_ahead_.contains(number) &&
        !failed_.contains(number) &&
        (open_.contains(number) || number <= HighestAcceptableLocked(frames))) {
      // Admitted before the latest loss: this round was in flight at it,
      // so it fails on every contributor, as LoseDomain failed the rounds
      // open then (never completing with a membership that changed).
      if (auto it = open_.find(number); it != open_.end()) {
        timer_->Cancel(it->second.timer);
        finished = std::move(it->second.contributors);
        ReleaseLocked(it->second);
        open_.erase(it);
      }
      result = restart_cause_;
      highest_round_ = std::max(highest_round_, number);
      RememberFailureLocked(number, restart_cause_);
      FinishLocked(number);
      rejected = restart_cause_;
    }
    // A frame of a domain outside the round first: that names the cause
    // (recovering, or before its entry round) better than the round's state.
    uint64_t entry_round = 0;  // the latest entry among the frames' domains
    for (const auto& f : frames) {
      if (!rejected.ok() || !by_domain_) break;
      const uint32_t d = DomainOfRank(f.rank());
      entry_round = std::max(entry_round, domains_[d].entry_round);
      if (ServesInLocked(d, number)) continue;
      rejected = absl::FailedPreconditionError(
          domains_[d].serving
              ? absl::StrCat("rank ", f.rank(), " of domain ", d,
                             " sent all_gather_words round ", number,
                             ", but domain ", d,
                             " takes part in world rounds from round ",
                             domains_[d].entry_round,
                             " on (the round it re-entered at after its "
                             "recovery at epoch ",
                             domains_[d].epoch, ")")
              : absl::StrCat("rank ", f.rank(), " of domain ", d,
                             " sent all_gather_words round ", number,
                             ", but domain ", d, " is recovering at epoch ",
                             domains_[d].epoch,
                             ": its ranks take part in world rounds again "
                             "once it is whole"));
    }
    if (rejected.ok()) {
      rejected = CheckAcceptsLocked(number, epoch, entry_round);
    }
    if (rejected.ok()) {
      auto [it, inserted] = open_.try_emplace(number);
      Round& round = it->second;
      // What the node says its ranks waited already, within what any wait
      // may last (a caller's figure, shown in timeouts).
      const absl::Time started =
          MonotonicNow() - std::clamp(waited, absl::ZeroDuration(),
                                      absl::Milliseconds(kMaxTimeoutMs));
      if (inserted) {
        round.opened = started;
        round.frames.resize(world_size_);
        round.present.assign(world_size_, false);
        highest_round_ = std::max(highest_round_, number);
      }
      for (const auto& f : frames) {
        if (round.present[f.rank()]) {
          rejected = absl::InvalidArgumentError(absl::StrCat(
              "rank ", f.rank(),
              " contributed twice to all_gather_words round ", number));
          break;
        }
        // One rank's rounds must not exhaust the coordinator either (its
        // node bounds them first; this holds a node to it).
        const size_t bytes = sizeof(uint32_t) * f.words_size();
        if (max_bytes_per_rank_ > 0 &&
            bytes_of_rank_[f.rank()] + bytes > max_bytes_per_rank_) {
          rejected = absl::ResourceExhaustedError(absl::StrCat(
              "rank ", f.rank(),
              "'s frames in open all_gather_words rounds "
              "hold ",
              bytes_of_rank_[f.rank()],
              " bytes on the coordinator; "
              "round ",
              number, "'s ", bytes, " more would pass the limit of ",
              max_bytes_per_rank_,
              " bytes per rank "
              "(--max_round_bytes_per_rank)"));
          break;
        }
      }
      if (rejected.ok()) {
        round.opened = std::min(round.opened, started);
        Contributor c;
        for (auto& f : frames) {
          c.ranks.push_back(f.rank());
          round.present[f.rank()] = true;
          round.frames[f.rank()].assign(f.words().begin(), f.words().end());
          bytes_of_rank_[f.rank()] += sizeof(uint32_t) * f.words_size();
          ++round.contributed;
        }
        c.done = std::move(shared_done);
        round.contributors.push_back(std::move(c));
        if (round.contributed < ExpectedLocked(number)) {
          if (deadline < round.deadline) {
            timer_->Cancel(round.timer);
            round.deadline = deadline;
            round.timer = timer_->Schedule(
                deadline, [this, number, e = epoch_] { Expire(number, e); });
          }
          return;  // the last contributor completes the round
        }
        timer_->Cancel(round.timer);
        result = Assemble(number, round);
        ReleaseLocked(round);
        finished = std::move(round.contributors);
        if (!result.ok()) RememberFailureLocked(number, result.status());
        open_.erase(it);
        FinishLocked(number);
      } else if (inserted) {
        open_.erase(it);
      }
    }
  }
  if (!finished.empty()) Answer(finished, number, std::move(result));
  if (!rejected.ok()) return done(rejected);
}

uint64_t WordRounds::HighestAcceptable(
    const google::protobuf::RepeatedPtrField<v1::RankFrame>& frames) const {
  absl::MutexLock lock(&mu_);
  return HighestAcceptableLocked(frames);
}

template <typename Frames>
uint64_t WordRounds::HighestAcceptableLocked(const Frames& frames) const {
  uint64_t base = open_.empty() ? completed_ : open_.begin()->first - 1;
  // As CheckAcceptsLocked: from the latest entry round among the frames'
  // domains, where that is later.
  for (const v1::RankFrame& f : frames) {
    if (!by_domain_ || f.rank() >= world_size_) continue;
    const uint64_t entry = domains_[DomainOfRank(f.rank())].entry_round;
    if (entry > 0) base = std::max(base, entry - 1);
  }
  return base > UINT64_MAX - kMaxOpenRounds ? UINT64_MAX
                                            : base + kMaxOpenRounds;
}

absl::Status WordRounds::CheckAcceptsLocked(uint64_t number, uint64_t epoch,
                                            uint64_t entry_round) const {
  if (!failure_.ok()) return failure_;
  // By domain, the epoch counter moves at every domain's loss and a later
  // one is a loss LoseDomain is about to apply (ContributeShared handles
  // an earlier one).
  if (epoch != 0 && epoch != epoch_ && !by_domain_) {
    return absl::FailedPreconditionError(
        absl::StrCat("all_gather_words round ", number, " of epoch ", epoch,
                     " is refused: the job is at epoch ", epoch_,
                     restart_cause_.ok() ? "" : " (",
                     restart_cause_.ok() ? "" : restart_cause_.message(),
                     restart_cause_.ok() ? "" : ")"));
  }
  if (auto f = failed_.find(number); f != failed_.end()) return f->second;
  if (open_.contains(number)) return absl::OkStatus();
  if (number <= completed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all_gather_words round ", number,
        " has already completed; rounds are numbered consecutively per "
        "rank and this one was sent twice or out of order"));
  }
  uint64_t base = open_.empty() ? completed_ : open_.begin()->first - 1;
  // A domain that re-entered counts its window from its entry round, which
  // was picked past every round admitted: up to a full window past the
  // oldest open round, when a serving rank ran that far ahead of another.
  const bool from_entry = entry_round > base + 1;
  if (from_entry) base = entry_round - 1;
  if (number > base + kMaxOpenRounds) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all_gather_words round ", number, " is more than ", kMaxOpenRounds,
        " rounds ahead of round ", base + 1,
        from_entry ? ", the round its domain re-entered world rounds at"
                   : ", the oldest one still open"));
  }
  return absl::OkStatus();
}

void WordRounds::RememberFailureLocked(uint64_t number, absl::Status status) {
  highest_round_ = std::max(highest_round_, number);
  failed_.emplace(number, std::move(status));
  while (failed_.size() > kFailedRoundsKept) failed_.erase(failed_.begin());
}

absl::StatusOr<v1::AllGatherWordsResponse> WordRounds::Assemble(
    uint64_t number, const Round& round) const {
  // The round's ranks: every domain serving in it (all, without domains).
  std::vector<uint32_t> spanned;
  for (uint32_t d = 0; d < domains_.size(); ++d) {
    if (ServesInLocked(d, number)) spanned.push_back(d);
  }
  std::map<size_t, std::vector<uint32_t>> ranks_by_length;
  for (uint32_t d : spanned) {
    for (uint32_t r = d * domain_size_; r < (d + 1) * domain_size_; ++r) {
      ranks_by_length[round.frames[r].size()].push_back(r);
    }
  }
  if (ranks_by_length.size() > 1) {
    std::vector<std::string> parts;
    for (auto& [length, ranks] : ranks_by_length) {
      parts.push_back(absl::StrCat(length, " words from rank",
                                   ranks.size() > 1 ? "s " : " ",
                                   FormatRankList(ranks)));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "all_gather_words round ", number,
        ": frame lengths disagree (every rank must send the same length): ",
        absl::StrJoin(parts, "; ")));
  }
  v1::AllGatherWordsResponse response;
  response.set_round(number);
  const size_t width = ranks_by_length.begin()->first;
  response.set_words_per_rank(static_cast<uint32_t>(width));
  response.mutable_words()->Reserve(
      static_cast<int>(width * spanned.size() * domain_size_));
  for (uint32_t d : spanned) {
    for (uint32_t r = d * domain_size_; r < (d + 1) * domain_size_; ++r) {
      response.mutable_words()->Add(round.frames[r].begin(),
                                    round.frames[r].end());
    }
  }
  if (by_domain_) {
    // The view, so that no caller takes a partial world for the whole.
    response.set_partial(spanned.size() < domains_.size());
    for (uint32_t d : spanned) {
      v1::DomainEpoch* view = response.add_domains();
      view->set_domain(d);
      view->set_epoch(domains_[d].epoch);
    }
  }
  return response;
}

void WordRounds::FinishLocked(uint64_t number) {
  highest_round_ = std::max(highest_round_, number);
  if (number <= completed_) return;
  if (number != completed_ + 1) {
    finished_ahead_.insert(number);
    return;
  }
  completed_ = number;
  while (finished_ahead_.erase(completed_ + 1) > 0) ++completed_;
}

void WordRounds::Expire(uint64_t number, uint64_t epoch) {
  std::vector<Contributor> failed;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (epoch != epoch_) return;  // a round of an epoch that ended
    auto it = open_.find(number);
    if (it == open_.end()) return;
    Round& round = it->second;
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < world_size_; ++r) {
      if (!round.present[r] && ServesInLocked(DomainOfRank(r), number)) {
        missing.push_back(r);
      }
    }
    status = absl::DeadlineExceededError(absl::StrCat(
        "all_gather_words round ", number, " timed out after ",
        absl::ToInt64Milliseconds(round.deadline - round.opened),
        " ms waiting for rank", missing.size() > 1 ? "s " : " ",
        FormatRankList(missing), " (", MissingByNode(missing, node_of_), ")"));
    failed = std::move(round.contributors);
    ReleaseLocked(round);
    open_.erase(it);
    RememberFailureLocked(number, status);
    FinishLocked(number);
  }
  Answer(failed, number, status);
}

void WordRounds::FailOpenLocked(
    const absl::Status& cause,
    std::map<uint64_t, std::vector<Contributor>>* failed) {
  for (auto& [number, round] : open_) {
    timer_->Cancel(round.timer);
    (*failed)[number] = std::move(round.contributors);
    ReleaseLocked(round);
  }
  open_.clear();
}

void WordRounds::Fail(absl::Status cause) {
  std::map<uint64_t, std::vector<Contributor>> failed;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = cause;
    FailOpenLocked(cause, &failed);
  }
  for (auto& [number, contributors] : failed) {
    Answer(contributors, number, cause);
  }
}

void WordRounds::Restart(uint64_t epoch, absl::Status cause) {
  std::map<uint64_t, std::vector<Contributor>> failed;
  {
    absl::MutexLock lock(&mu_);
    // Two losses on different threads may call in either order: an epoch
    // never moves backwards, or every contribution of the newer one would
    // be refused.
    if (!failure_.ok() || epoch <= epoch_) return;
    epoch_ = epoch;
    restart_cause_ = cause;
    FailOpenLocked(cause, &failed);
    failed_.clear();
    finished_ahead_.clear();
    completed_ = 0;
  }
  for (auto& [number, contributors] : failed) {
    Answer(contributors, number, cause);
  }
}

absl::StatusOr<WordRounds::Answers> WordRounds::LoseDomain(uint32_t domain,
                                                           uint64_t epoch,
                                                           absl::Status cause) {
  if (!by_domain_) {
    return absl::FailedPreconditionError(
        "rounds are not kept by domain (recovery by domain is off)");
  }
  std::map<uint64_t, std::vector<Contributor>> failed;
  {
    absl::MutexLock lock(&mu_);
    if (domain >= domains_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("domain ", domain, " is outside the job's ",
                       domains_.size(), " domains"));
    }
    if (!failure_.ok()) return failure_;
    if (epoch > epoch_) {
      epoch_ = epoch;
      restart_cause_ = cause;
    }
    Domain& d = domains_[domain];
    if (epoch >= d.epoch) {
      d.serving = false;
      d.epoch = epoch;
    }
    // Every open round fails, remembered so its late contributors get
    // the same answer: no round completes with a membership that changed
    // while it was open.
    FailOpenLocked(cause, &failed);
    for (const auto& [number, contributors] : failed) {
      RememberFailureLocked(number, cause);
      FinishLocked(number);
    }
  }
  Answers owed;
  for (auto& [number, contributors] : failed) {
    owed.sends_.push_back([number = number, cause,
                           contributors = std::move(contributors)]() mutable {
      Answer(contributors, number, cause);
    });
  }
  return owed;
}

absl::Status WordRounds::AdmitDomain(uint32_t domain, uint64_t domain_epoch,
                                     uint64_t entry_round) {
  if (!by_domain_) {
    return absl::FailedPreconditionError(
        "rounds are not kept by domain (recovery by domain is off)");
  }
  absl::MutexLock lock(&mu_);
  if (domain >= domains_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("domain ", domain, " is outside the job's ",
                     domains_.size(), " domains"));
  }
  if (!failure_.ok()) return failure_;
  Domain& d = domains_[domain];
  if (d.serving || domain_epoch < d.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "domain ", domain, " cannot be admitted at epoch ", domain_epoch,
        ": it is ", d.serving ? "serving" : "recovering", " at epoch ",
        d.epoch));
  }
  if (entry_round <= highest_round_) {
    // A round at or past it was opened without the domain: admitting it
    // there would change that round's membership while it is open.
    return absl::FailedPreconditionError(absl::StrCat(
        "domain ", domain, " cannot enter world rounds at round ", entry_round,
        ": round ", highest_round_, " was opened already"));
  }
  d.serving = true;
  d.epoch = domain_epoch;
  d.entry_round = entry_round;
  return absl::OkStatus();
}

uint64_t WordRounds::completed_rounds() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

std::map<uint32_t, uint64_t> WordRounds::WaitingRanks() const {
  absl::MutexLock lock(&mu_);
  std::map<uint32_t, uint64_t> out;
  for (const auto& [number, round] : open_) {
    for (uint32_t r = 0; r < world_size_; ++r) {
      if (round.present[r] && !out.contains(r)) out[r] = number;
    }
  }
  return out;
}

}  // namespace rankd
