#include "dataplane/testing/in_process_control_plane.h"

#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace rankd::dataplane::testing {
namespace {

class InProcessPendingWords final : public PendingWords {
 public:
  InProcessPendingWords(std::shared_ptr<InProcessJob> job, uint64_t epoch,
                        uint32_t rank, uint64_t round,
                        std::vector<uint32_t> frame, absl::Duration timeout)
      : state_(std::make_shared<State>()) {
    std::shared_ptr<State> state = state_;
    thread_ = std::thread([job, epoch, rank, round, frame, timeout, state] {
      auto result = job->Round(epoch, rank, round, frame, timeout);
      absl::MutexLock lock(&state->mu);
      state->result = std::move(result);
      state->done = true;
    });
  }
  ~InProcessPendingWords() override { thread_.join(); }

  bool IsComplete() const override {
    absl::MutexLock lock(&state_->mu);
    return state_->done;
  }
  absl::Status Wait() override { return Result().status(); }
  absl::StatusOr<std::vector<uint32_t>> Result() override {
    absl::MutexLock lock(&state_->mu);
    state_->mu.Await(absl::Condition(&state_->done));
    return state_->result;
  }
  bool SupportsCancellation(CancellationMode mode) const override {
    return mode == CancellationMode::kQuarantineUntilComplete;
  }
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override {
    if (absl::Status s = CheckBoundedWait(*this, timeout, mode, "in-process");
        !s.ok()) {
      return s;
    }
    absl::MutexLock lock(&state_->mu);
    if (!state_->mu.AwaitWithTimeout(absl::Condition(&state_->done), timeout)) {
      return WaitOutcome::DeadlineExceeded(mode);
    }
    if (!state_->result.ok()) return state_->result.status();
    return WaitOutcome::Completed();
  }

 private:
  struct State {
    absl::Mutex mu;
    bool done = false;
    absl::StatusOr<std::vector<uint32_t>> result;
  };
  std::shared_ptr<State> state_;
  std::thread thread_;
};

class InProcessControlPlane final : public ControlPlane {
 public:
  InProcessControlPlane(std::shared_ptr<InProcessJob> job, uint32_t rank,
                        uint64_t epoch)
      : job_(std::move(job)), rank_(rank), epoch_(epoch) {}

  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    return job_->Round(epoch_, rank_, ++round_, {local.begin(), local.end()},
                       timeout);
  }
  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    const uint64_t epoch = epoch_;
    if (absl::Status h = job_->HealthAt(epoch); !h.ok()) return h;
    return std::unique_ptr<PendingWords>(
        std::make_unique<InProcessPendingWords>(
            job_, epoch, rank_, ++round_,
            std::vector<uint32_t>(local.begin(), local.end()), timeout));
  }
  absl::Status KvSet(absl::string_view key, absl::string_view value) override {
    return job_->Set(epoch_, std::string(key), std::string(value));
  }
  absl::StatusOr<std::string> KvGet(absl::string_view key,
                                    absl::Duration timeout) override {
    return job_->Get(epoch_, std::string(key), timeout);
  }
  absl::StatusOr<int64_t> KvAdd(absl::string_view key, int64_t delta) override {
    return job_->Add(epoch_, std::string(key), delta);
  }
  absl::Status JobHealth() const override { return job_->HealthAt(epoch_); }
  void OnJobFailure(
      std::function<void(const absl::Status&)> callback) override {
    job_->AddFailureCallback(epoch_, std::move(callback));
  }
  std::string Namespace() const override { return job_->name_space(); }
  absl::StatusOr<DistributedSessionDescriptor> Rejoin(
      uint64_t ended_epoch, absl::Duration timeout) override {
    if (timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rejoin after epoch ", ended_epoch,
                       ": the timeout must be positive"));
    }
    const uint64_t joined = epoch_;
    if (joined > ended_epoch) return job_->DescriptorAt(rank_, joined);
    auto descriptor = job_->Rejoin(rank_, ended_epoch, timeout);
    if (descriptor.ok() && descriptor->epoch() != joined) {
      // Rounds are numbered per epoch: every rank starts again at 0.
      round_ = 0;
      epoch_ = descriptor->epoch();
    }
    return descriptor;
  }
  uint64_t JoinedEpoch() const override { return epoch_; }

 private:
  std::shared_ptr<InProcessJob> job_;
  const uint32_t rank_;
  // The epoch this rank's process joined; set by Rejoin, read by every call.
  std::atomic<uint64_t> epoch_;
  std::atomic<uint64_t> round_ = 0;
};

}  // namespace

std::shared_ptr<InProcessJob> InProcessJob::Create(uint32_t world_size,
                                                   std::string name_space) {
  auto job = std::shared_ptr<InProcessJob>(
      new InProcessJob(world_size, std::move(name_space)));
  absl::MutexLock lock(&job->mu_);
  for (uint32_t r = 0; r < world_size; ++r) job->joined_[1].insert(r);
  return job;
}

std::unique_ptr<ControlPlane> InProcessJob::ForRank(uint32_t rank) {
  return std::make_unique<InProcessControlPlane>(shared_from_this(), rank, 1);
}

void InProcessJob::Fail(const absl::Status& cause) {
  std::vector<std::pair<uint64_t, std::function<void(const absl::Status&)>>>
      run;
  {
    absl::MutexLock lock(&mu_);
    if (!health_.ok()) return;
    health_ = cause;
    run.swap(callbacks_);
  }
  for (auto& [epoch, callback] : run) callback(cause);
}

void InProcessJob::FailWithoutNotice(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  if (health_.ok()) health_ = cause;
}

absl::Status InProcessJob::Lose(uint32_t rank, const absl::Status& cause) {
  std::vector<std::function<void(const absl::Status&)>> run;
  {
    absl::MutexLock lock(&mu_);
    if (!health_.ok() || rank >= world_size_ || cause.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("in-process job: cannot lose rank ", rank, " (world of ",
                       world_size_, ", job health: ", health_.ToString(), ")"));
    }
    const uint64_t ended = epoch_;
    ended_[ended] = cause;
    ++epoch_;
    joined_[epoch_];
    std::vector<std::pair<uint64_t, std::function<void(const absl::Status&)>>>
        keep;
    for (auto& entry : callbacks_) {
      if (entry.first == ended) {
        run.push_back(std::move(entry.second));
      } else {
        keep.push_back(std::move(entry));
      }
    }
    callbacks_.swap(keep);
  }
  for (auto& callback : run) callback(cause);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ControlPlane>> InProcessJob::Replace(
    uint32_t rank) {
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (epoch_ == 1 || rank >= world_size_ || joined_[epoch_].contains(rank)) {
      return absl::FailedPreconditionError(
          absl::StrCat("in-process job: rank ", rank,
                       " has nothing to replace at epoch ", epoch_));
    }
    epoch = epoch_;
    joined_[epoch].insert(rank);
  }
  return std::unique_ptr<ControlPlane>(
      std::make_unique<InProcessControlPlane>(shared_from_this(), rank, epoch));
}

uint64_t InProcessJob::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void InProcessJob::SetGroups(uint32_t rank,
                             std::vector<CollectiveGroupDescriptor> groups) {
  absl::MutexLock lock(&mu_);
  groups_[rank] = std::move(groups);
}

absl::StatusOr<DistributedSessionDescriptor> InProcessJob::DescriptorAt(
    uint32_t rank, uint64_t epoch) const {
  std::vector<CollectiveGroupDescriptor> groups;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = groups_.find(rank); it != groups_.end()) groups = it->second;
  }
  auto descriptor = DistributedSessionDescriptor::Create(world_size_, rank,
                                                         std::move(groups));
  if (!descriptor.ok()) return descriptor.status();
  if (absl::Status s = descriptor->SetEpoch(epoch); !s.ok()) return s;
  return descriptor;
}

absl::StatusOr<DistributedSessionDescriptor> InProcessJob::Rejoin(
    uint32_t rank, uint64_t ended_epoch, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    auto moved_on = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !health_.ok() || epoch_ > ended_epoch;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&moved_on), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("rejoin: the job did not leave epoch ", ended_epoch,
                       " within ", absl::FormatDuration(timeout)));
    }
    if (!health_.ok()) return health_;
    epoch = epoch_;
    joined_[epoch].insert(rank);
    auto whole = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !health_.ok() || ended_.contains(epoch) ||
             joined_[epoch].size() == world_size_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&whole), deadline)) {
      std::vector<uint32_t> missing;
      for (uint32_t r = 0; r < world_size_; ++r) {
        if (!joined_[epoch].contains(r)) missing.push_back(r);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("rejoin: epoch ", epoch, " was not whole within ",
                       absl::FormatDuration(timeout), "; missing ranks ",
                       absl::StrJoin(missing, ", ")));
    }
    if (absl::Status s = HealthAtLocked(epoch); !s.ok()) return s;
  }
  return DescriptorAt(rank, epoch);
}

std::vector<std::string> InProcessJob::Keys() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> keys;
  for (const auto& [k, v] : kv_) keys.push_back(k);
  return keys;
}

absl::Status InProcessJob::Set(uint64_t epoch, const std::string& key,
                               const std::string& value) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = WritableAt(epoch, key); !s.ok()) return s;
  kv_[key] = value;
  ++kv_sets_;
  return absl::OkStatus();
}

std::optional<std::string> InProcessJob::Peek(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

int InProcessJob::kv_sets() const {
  absl::MutexLock lock(&mu_);
  return kv_sets_;
}

int InProcessJob::kv_gets() const {
  absl::MutexLock lock(&mu_);
  return kv_gets_;
}

absl::StatusOr<std::string> InProcessJob::Get(uint64_t epoch,
                                              const std::string& key,
                                              absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  ++kv_gets_;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !HealthAtLocked(epoch).ok() || kv_.contains(key);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "key ", key, " not set within ", absl::FormatDuration(timeout)));
  }
  if (absl::Status s = HealthAtLocked(epoch); !s.ok()) return s;
  return kv_[key];
}

absl::StatusOr<int64_t> InProcessJob::Add(uint64_t epoch,
                                          const std::string& key,
                                          int64_t delta) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = WritableAt(epoch, key); !s.ok()) return s;
  int64_t value = 0;
  if (auto it = kv_.find(key); it != kv_.end()) value = std::stoll(it->second);
  value += delta;
  kv_[key] = absl::StrCat(value);
  return value;
}

absl::Status InProcessJob::WritableAt(uint64_t epoch,
                                      absl::string_view key) const {
  if (absl::Status s = HealthAtLocked(epoch); !s.ok()) return s;
  // "epoch/<N>/..." is writable only at epoch N (control_plane.h, EpochKey).
  absl::string_view rest = key;
  if (absl::ConsumePrefix(&rest, "epoch/")) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('/')), &n) || n != epoch) {
      return absl::PermissionDeniedError(
          absl::StrCat("key ", key, " cannot be written at epoch ", epoch));
    }
  }
  return absl::OkStatus();
}

absl::Status InProcessJob::HealthAtLocked(uint64_t epoch) const {
  if (!health_.ok()) return health_;
  if (auto it = ended_.find(epoch); it != ended_.end()) return it->second;
  return absl::OkStatus();
}

absl::Status InProcessJob::HealthAt(uint64_t epoch) const {
  absl::MutexLock lock(&mu_);
  return HealthAtLocked(epoch);
}

absl::Status InProcessJob::Health() const {
  absl::MutexLock lock(&mu_);
  return HealthAtLocked(epoch_);
}

void InProcessJob::AddFailureCallback(
    uint64_t epoch, std::function<void(const absl::Status&)> callback) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    failed = HealthAtLocked(epoch);
    if (failed.ok()) {
      callbacks_.emplace_back(epoch, std::move(callback));
      return;
    }
  }
  callback(failed);
}

absl::StatusOr<std::vector<uint32_t>> InProcessJob::Round(
    uint64_t epoch, uint32_t rank, uint64_t round, std::vector<uint32_t> frame,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = HealthAtLocked(epoch); !s.ok()) return s;
  auto& frames = rounds_[{epoch, round}];
  frames[rank] = std::move(frame);
  auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !HealthAtLocked(epoch).ok() || frames.size() == world_size_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&complete), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("all_gather_words round ", round, " timed out"));
  }
  if (absl::Status s = HealthAtLocked(epoch); !s.ok()) return s;
  const size_t length = frames.begin()->second.size();
  std::vector<uint32_t> odd;
  for (const auto& [r, f] : frames) {
    if (f.size() != length) odd.push_back(r);
  }
  if (!odd.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all_gather_words round ", round, ": frame lengths disagree (ranks ",
        absl::StrJoin(odd, ", "), ")"));
  }
  std::vector<uint32_t> out;
  for (const auto& [r, f] : frames) out.insert(out.end(), f.begin(), f.end());
  return out;
}

}  // namespace rankd::dataplane::testing
