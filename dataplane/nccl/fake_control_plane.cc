#include "dataplane/nccl/fake_control_plane.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace rankd::dataplane::nccl::testing {
namespace {

class FakePendingWords final : public PendingWords {
 public:
  explicit FakePendingWords(
      std::function<absl::StatusOr<std::vector<uint32_t>>()> run)
      : thread_([this, run = std::move(run)] {
          auto result = run();
          absl::MutexLock lock(&mu_);
          result_ = std::move(result);
          done_ = true;
        }) {}
  ~FakePendingWords() override { thread_.join(); }

  bool IsComplete() const override {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  absl::Status Wait() override { return Result().status(); }
  bool SupportsCancellation(CancellationMode) const override { return true; }
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override {
    absl::Status valid = CheckBoundedWait(*this, timeout, mode, "fake");
    if (!valid.ok()) return valid;
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
      return WaitOutcome::DeadlineExceeded(mode);
    }
    if (!result_.ok()) return result_.status();
    return WaitOutcome::Completed();
  }
  absl::StatusOr<std::vector<uint32_t>> Result() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return result_;
  }

 private:
  mutable absl::Mutex mu_;
  bool done_ = false;
  absl::StatusOr<std::vector<uint32_t>> result_ = std::vector<uint32_t>{};
  std::thread thread_;
};

}  // namespace

class FakeControlPlane final : public ControlPlane {
 public:
  FakeControlPlane(std::shared_ptr<FakeJob> job, uint32_t rank)
      : job_(std::move(job)), rank_(rank) {}

  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    uint64_t round;
    {
      absl::MutexLock lock(&round_mu_);
      round = ++rounds_;
    }
    return Round(round, std::vector<uint32_t>(local.begin(), local.end()),
                 timeout);
  }

  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    uint64_t round;
    {
      absl::MutexLock lock(&round_mu_);
      round = ++rounds_;
    }
    std::vector<uint32_t> frame(local.begin(), local.end());
    return std::unique_ptr<PendingWords>(
        new FakePendingWords([this, round, frame, timeout] {
          return Round(round, frame, timeout);
        }));
  }

  absl::Status KvSet(absl::string_view key, absl::string_view value) override {
    absl::MutexLock lock(&job_->mu_);
    if (!job_->failure_.ok()) return job_->failure_;
    job_->kv_[std::string(key)] = std::string(value);
    ++job_->kv_sets_;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> KvGet(absl::string_view key,
                                    absl::Duration timeout) override {
    const std::string k(key);
    FakeJob* job = job_.get();
    absl::MutexLock lock(&job->mu_);
    ++job->kv_gets_;
    auto ready = [job, &k]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mu_) {
      return !job->failure_.ok() || job->kv_.count(k) > 0;
    };
    job->mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    if (!job->failure_.ok()) return job->failure_;
    auto it = job->kv_.find(k);
    if (it == job->kv_.end()) {
      return absl::DeadlineExceededError(
          absl::StrCat("fake control plane: key '", k, "' was not set within ",
                       absl::FormatDuration(timeout)));
    }
    return it->second;
  }

  absl::StatusOr<int64_t> KvAdd(absl::string_view key, int64_t delta) override {
    absl::MutexLock lock(&job_->mu_);
    if (!job_->failure_.ok()) return job_->failure_;
    std::string& v = job_->kv_[std::string(key)];
    int64_t value = v.empty() ? 0 : std::stoll(v);
    value += delta;
    v = std::to_string(value);
    return value;
  }

  absl::Status JobHealth() const override {
    absl::MutexLock lock(&job_->mu_);
    return job_->failure_;
  }

  void OnJobFailure(
      std::function<void(const absl::Status&)> callback) override {
    absl::Status failed;
    {
      absl::MutexLock lock(&job_->mu_);
      if (job_->failure_.ok()) {
        job_->callbacks_.push_back(std::move(callback));
        return;
      }
      failed = job_->failure_;
    }
    callback(failed);
  }

  std::string Namespace() const override { return job_->ns_; }

 private:
  absl::StatusOr<std::vector<uint32_t>> Round(uint64_t round,
                                              std::vector<uint32_t> frame,
                                              absl::Duration timeout) {
    FakeJob* job = job_.get();
    absl::MutexLock lock(&job->mu_);
    if (!job->failure_.ok()) return job->failure_;
    job->rounds_[round][rank_] = std::move(frame);
    auto complete = [job, round]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mu_) {
      return !job->failure_.ok() ||
             job->rounds_[round].size() == job->world_size_;
    };
    if (!job->mu_.AwaitWithTimeout(absl::Condition(&complete), timeout)) {
      std::vector<uint32_t> missing;
      for (uint32_t r = 0; r < job->world_size_; ++r) {
        if (!job->rounds_[round].count(r)) missing.push_back(r);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("fake control plane: round ", round,
                       " is missing ranks ", absl::StrJoin(missing, ", ")));
    }
    if (!job->failure_.ok()) return job->failure_;
    const auto& frames = job->rounds_[round];
    const size_t size = frames.begin()->second.size();
    std::vector<uint32_t> disagree;
    for (const auto& [r, f] : frames) {
      if (f.size() != size) disagree.push_back(r);
    }
    if (!disagree.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fake control plane: round ", round, ": ranks ",
          absl::StrJoin(disagree, ", "), " sent a different frame length"));
    }
    std::vector<uint32_t> out;
    for (const auto& [r, f] : frames) out.insert(out.end(), f.begin(), f.end());
    return out;
  }

  std::shared_ptr<FakeJob> job_;
  const uint32_t rank_;
  absl::Mutex round_mu_;
  uint64_t rounds_ = 0;
};

std::shared_ptr<FakeJob> FakeJob::Create(uint32_t world_size, std::string ns) {
  return std::shared_ptr<FakeJob>(new FakeJob(world_size, std::move(ns)));
}

std::unique_ptr<ControlPlane> FakeJob::ControlPlaneFor(uint32_t rank) {
  return std::make_unique<FakeControlPlane>(shared_from_this(), rank);
}

void FakeJob::Fail(const absl::Status& cause) {
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return;
    failure_ = cause.ok() ? absl::AbortedError("fake job failed") : cause;
    failure = failure_;
    callbacks.swap(callbacks_);
  }
  for (auto& cb : callbacks) cb(failure);
}

std::optional<std::string> FakeJob::Get(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> FakeJob::Keys() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> keys;
  for (const auto& [k, v] : kv_) keys.push_back(k);
  return keys;
}

int FakeJob::kv_sets() const {
  absl::MutexLock lock(&mu_);
  return kv_sets_;
}

int FakeJob::kv_gets() const {
  absl::MutexLock lock(&mu_);
  return kv_gets_;
}

}  // namespace rankd::dataplane::nccl::testing
