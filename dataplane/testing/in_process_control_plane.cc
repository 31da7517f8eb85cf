#include "dataplane/testing/in_process_control_plane.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane::testing {
namespace {

class InProcessPendingWords final : public PendingWords {
 public:
  InProcessPendingWords(std::shared_ptr<InProcessJob> job, uint32_t rank,
                        uint64_t round, std::vector<uint32_t> frame,
                        absl::Duration timeout)
      : state_(std::make_shared<State>()) {
    std::shared_ptr<State> state = state_;
    thread_ = std::thread([job, rank, round, frame, timeout, state] {
      auto result = job->Round(rank, round, frame, timeout);
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
  InProcessControlPlane(std::shared_ptr<InProcessJob> job, uint32_t rank)
      : job_(std::move(job)), rank_(rank) {}

  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    return job_->Round(rank_, ++round_, {local.begin(), local.end()}, timeout);
  }
  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    if (absl::Status h = job_->Health(); !h.ok()) return h;
    return std::unique_ptr<PendingWords>(
        std::make_unique<InProcessPendingWords>(
            job_, rank_, ++round_,
            std::vector<uint32_t>(local.begin(), local.end()), timeout));
  }
  absl::Status KvSet(absl::string_view key, absl::string_view value) override {
    return job_->Set(std::string(key), std::string(value));
  }
  absl::StatusOr<std::string> KvGet(absl::string_view key,
                                    absl::Duration timeout) override {
    return job_->Get(std::string(key), timeout);
  }
  absl::StatusOr<int64_t> KvAdd(absl::string_view key, int64_t delta) override {
    return job_->Add(std::string(key), delta);
  }
  absl::Status JobHealth() const override { return job_->Health(); }
  void OnJobFailure(
      std::function<void(const absl::Status&)> callback) override {
    job_->AddFailureCallback(std::move(callback));
  }
  std::string Namespace() const override { return job_->name_space(); }

 private:
  std::shared_ptr<InProcessJob> job_;
  const uint32_t rank_;
  uint64_t round_ = 0;
};

}  // namespace

std::shared_ptr<InProcessJob> InProcessJob::Create(uint32_t world_size,
                                                   std::string name_space) {
  return std::shared_ptr<InProcessJob>(
      new InProcessJob(world_size, std::move(name_space)));
}

std::unique_ptr<ControlPlane> InProcessJob::ForRank(uint32_t rank) {
  return std::make_unique<InProcessControlPlane>(shared_from_this(), rank);
}

void InProcessJob::Fail(const absl::Status& cause) {
  std::vector<std::function<void(const absl::Status&)>> run;
  {
    absl::MutexLock lock(&mu_);
    if (!health_.ok()) return;
    health_ = cause;
    run.swap(callbacks_);
  }
  for (auto& callback : run) callback(cause);
}

void InProcessJob::FailWithoutNotice(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  if (health_.ok()) health_ = cause;
}

std::vector<std::string> InProcessJob::Keys() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> keys;
  for (const auto& [k, v] : kv_) keys.push_back(k);
  return keys;
}

absl::Status InProcessJob::Set(const std::string& key,
                               const std::string& value) {
  absl::MutexLock lock(&mu_);
  if (!health_.ok()) return health_;
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

absl::StatusOr<std::string> InProcessJob::Get(const std::string& key,
                                              absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  ++kv_gets_;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !health_.ok() || kv_.contains(key);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "key ", key, " not set within ", absl::FormatDuration(timeout)));
  }
  if (!health_.ok()) return health_;
  return kv_[key];
}

absl::StatusOr<int64_t> InProcessJob::Add(const std::string& key,
                                          int64_t delta) {
  absl::MutexLock lock(&mu_);
  if (!health_.ok()) return health_;
  int64_t value = 0;
  if (auto it = kv_.find(key); it != kv_.end()) value = std::stoll(it->second);
  value += delta;
  kv_[key] = absl::StrCat(value);
  return value;
}

absl::Status InProcessJob::Health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

void InProcessJob::AddFailureCallback(
    std::function<void(const absl::Status&)> callback) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (health_.ok()) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    failed = health_;
  }
  callback(failed);
}

absl::StatusOr<std::vector<uint32_t>> InProcessJob::Round(
    uint32_t rank, uint64_t round, std::vector<uint32_t> frame,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!health_.ok()) return health_;
  rounds_[round][rank] = std::move(frame);
  auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !health_.ok() || rounds_[round].size() == world_size_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&complete), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("all_gather_words round ", round, " timed out"));
  }
  if (!health_.ok()) return health_;
  const auto& frames = rounds_[round];
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
