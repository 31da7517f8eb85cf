// rankd's c10d::Store over a joined rank (c10d_store/store.h).
#include "c10d_store/store.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "c10d_store/internal/failure_watch.h"
#include "c10d_store/internal/gloo_sockets.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"

namespace rankd::c10d_store {
namespace {

// How long a store call the daemon aborted (or fenced as of an ended
// epoch) waits for the job's failure to reach this rank (its watch stream may
// be a moment behind the call's answer), to throw it in the failure's own
// words.
constexpr absl::Duration kFailureGrace = absl::Seconds(2);

// The longest single KvGet (the daemon refuses waits over kMaxTimeoutMs);
// a longer wait, or one without limit (kNoTimeout), goes on in such
// slices.
constexpr absl::Duration kWaitSlice = absl::Minutes(10);
static_assert(kWaitSlice <= absl::Milliseconds(kMaxTimeoutMs));

std::string Text(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::vector<uint8_t> Bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// When a wait of `timeout` that starts now ends (c10d::Store::kNoTimeout:
// never).
absl::Time DeadlineAfter(std::chrono::milliseconds timeout) {
  return timeout == c10d::Store::kNoTimeout
             ? absl::InfiniteFuture()
             : MonotonicNow() + absl::FromChrono(timeout);
}

std::string Seconds(std::chrono::milliseconds timeout) {
  return absl::StrFormat("%g s", timeout.count() / 1000.0);
}

[[noreturn]] void Throw(absl::Status status) {
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    throw StoreTimeoutError(std::move(status));
  }
  throw StoreError(std::move(status));
}

}  // namespace

c10::intrusive_ptr<Store> Store::Create(std::shared_ptr<Client> client,
                                        StoreOptions options) {
  if (client == nullptr) {
    throw StoreError(absl::InvalidArgumentError("rankd store: null client"));
  }
  if (options.prefix.empty() || options.prefix.size() >= kMaxKeyBytes) {
    throw StoreError(absl::InvalidArgumentError(
        absl::StrCat("rankd store: the prefix must be 1 to ", kMaxKeyBytes - 1,
                     " bytes, not ", options.prefix.size())));
  }
  if (client->epoch() == 0) {
    throw StoreError(absl::FailedPreconditionError(
        "rankd store: the client has not joined the job"));
  }
  if (client->descriptor().recovers_in_place()) {
    options.prefix =
        absl::StrCat("epoch/", client->epoch(), "/", options.prefix);
    if (options.prefix.size() >= kMaxKeyBytes) {
      throw StoreError(absl::InvalidArgumentError(absl::StrCat(
          "rankd store: the epoch-scoped prefix '", options.prefix,
          "' (the job recovers in place) is ", options.prefix.size(),
          " bytes; at most ", kMaxKeyBytes - 1)));
    }
  }
  const bool install = options.install_failure_callback;
  c10::intrusive_ptr<Store> store = c10::make_intrusive<Store>(
      Token(), std::move(client), std::move(options));
  if (install) {
    std::weak_ptr<internal::FailureWatch> watch = store->watch_;
    store->failure_callback_ = store->client_->AddFailureCallback(
        [watch](const absl::Status& failure) {
          if (auto alive = watch.lock()) alive->Fail(failure);
        });
  }
  return store;
}

Store::Store(Token, std::shared_ptr<Client> client, StoreOptions options)
    : c10d::Store(options.timeout),
      client_(std::move(client)),
      prefix_(std::move(options.prefix)),
      watch_(std::make_shared<internal::FailureWatch>()) {}

Store::~Store() {
  if (failure_callback_ != 0) client_->RemoveFailureCallback(failure_callback_);
}

void Store::OnJobFailure(const absl::Status& failure) { watch_->Fail(failure); }

int Store::sockets_shut_down() const { return watch_->sockets_shut_down(); }

template <typename Operation>
auto Store::Call(const char* method, Operation operation) {
  auto job_failed = [&](const absl::Status& failure) {
    watch_->Fail(failure);
    absl::Status first = watch_->failure();
    absl::Status error(first.code(), absl::StrCat("rankd store ", method, ": ",
                                                  first.message()));
    if (Client::EndsAnEpoch(first)) throw EpochEndedError(std::move(error));
    throw JobFailedError(std::move(error));
  };
  if (absl::Status failure = watch_->failure(); !failure.ok()) {
    job_failed(failure);
  }
  if (absl::Status health = client_->JobHealth(); !health.ok()) {
    job_failed(health);
  }
  auto result = operation();
  if (result.ok()) return *std::move(result);
  const absl::Status& error = result.status();
  // The job's failure: the client answers with JobHealth() once it knows;
  // a call the daemon aborted, or fenced as of an ended epoch
  // (Client::FencedByALaterEpoch), may arrive before the watch stream's
  // news, which the call then reports instead (as the Python store does,
  // rankd/torch_store.py _failure_behind).
  absl::Status health = client_->JobHealth();
  if (health.ok() && (error.code() == absl::StatusCode::kAborted ||
                      Client::FencedByALaterEpoch(error))) {
    const absl::Time deadline = MonotonicNow() + kFailureGrace;
    while (health.ok() && MonotonicNow() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
      health = client_->JobHealth();
    }
  }
  // Only a failure the client confirms latches the store (and shuts its
  // Gloo connections down); an abort it never confirms is this call's.
  if (!health.ok()) job_failed(health);
  Throw(error);
}

absl::StatusOr<std::optional<std::string>> Store::Peek(
    const std::string& full_key) {
  absl::StatusOr<std::string> value =
      client_->KvGet(full_key, absl::ZeroDuration());
  if (value.ok()) return std::optional<std::string>(*std::move(value));
  if (value.status().code() == absl::StatusCode::kNotFound) {
    return std::optional<std::string>();
  }
  return value.status();
}

void Store::NoteValue(const std::string& value) {
  watch_->NoteEndpoints(internal::GlooEndpoints(absl::Span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(value.data()), value.size())));
}

absl::StatusOr<std::string> Store::Await(const std::string& key,
                                         absl::Time deadline,
                                         std::chrono::milliseconds timeout) {
  const std::string full_key = prefix_ + key;
  while (true) {
    const absl::Duration left =
        std::max(deadline - MonotonicNow(), absl::ZeroDuration());
    absl::StatusOr<std::string> value =
        client_->KvGet(full_key, std::min(left, kWaitSlice));
    if (value.ok()) {
      NoteValue(*value);
      return value;
    }
    const absl::StatusCode code = value.status().code();
    // NotFound: a wait whose time earlier keys used up.
    if (code != absl::StatusCode::kDeadlineExceeded &&
        code != absl::StatusCode::kNotFound) {
      return value.status();
    }
    if (MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rankd store: key '", key, "' was not set within ",
                       Seconds(timeout), " (", value.status().message(), ")"));
    }
  }
}

void Store::set(const std::string& key, const std::vector<uint8_t>& value) {
  Call("set", [&]() -> absl::StatusOr<bool> {
    const std::string data = Text(value);
    NoteValue(data);
    const std::string full_key = prefix_ + key;
    // Most torch keys are written once: create-only first, one call.
    absl::StatusOr<bool> stored =
        client_->KvCompareAndSet(full_key, std::nullopt, data);
    while (stored.ok() && !*stored) {
      absl::StatusOr<std::optional<std::string>> current = Peek(full_key);
      if (!current.ok()) return current.status();
      std::optional<absl::string_view> expected;
      if (current->has_value()) expected = **current;
      stored = client_->KvCompareAndSet(full_key, expected, data);
    }
    return stored;
  });
}

std::vector<uint8_t> Store::compareSet(const std::string& key,
                                       const std::vector<uint8_t>& expected,
                                       const std::vector<uint8_t>& desired) {
  return Call("compareSet", [&]() -> absl::StatusOr<std::vector<uint8_t>> {
    const std::string full_key = prefix_ + key;
    const std::string want = Text(expected);
    const std::string data = Text(desired);
    while (true) {
      absl::StatusOr<std::optional<std::string>> current = Peek(full_key);
      if (!current.ok()) return current.status();
      std::optional<absl::string_view> condition;
      if (!current->has_value()) {
        if (!want.empty()) return expected;
      } else if (**current == want) {
        condition = **current;
      } else {
        return Bytes(**current);
      }
      absl::StatusOr<bool> stored =
          client_->KvCompareAndSet(full_key, condition, data);
      if (!stored.ok()) return stored.status();
      if (*stored) {
        NoteValue(data);
        return desired;
      }
    }
  });
}

std::vector<uint8_t> Store::get(const std::string& key) {
  return Call("get", [&]() -> absl::StatusOr<std::vector<uint8_t>> {
    const std::chrono::milliseconds timeout = timeout_;
    const absl::Time deadline = DeadlineAfter(timeout);
    absl::StatusOr<std::string> value = Await(key, deadline, timeout);
    if (!value.ok()) return value.status();
    return Bytes(*value);
  });
}

int64_t Store::add(const std::string& key, int64_t value) {
  return Call("add", [&] { return client_->KvAdd(prefix_ + key, value); });
}

bool Store::deleteKey(const std::string& key) {
  return Call("deleteKey", [&]() -> absl::StatusOr<bool> {
    const std::string full_key = prefix_ + key;
    while (true) {
      absl::StatusOr<std::optional<std::string>> current = Peek(full_key);
      if (!current.ok()) return current.status();
      if (!current->has_value()) return false;
      absl::StatusOr<bool> removed =
          client_->KvCompareAndDelete(full_key, **current);
      if (!removed.ok() || *removed) return removed;
    }
  });
}

bool Store::check(const std::vector<std::string>& keys) {
  return Call("check", [&]() -> absl::StatusOr<bool> {
    for (const std::string& key : keys) {
      absl::StatusOr<std::optional<std::string>> current = Peek(prefix_ + key);
      if (!current.ok()) return current.status();
      if (!current->has_value()) return false;
    }
    return true;
  });
}

int64_t Store::getNumKeys() {
  return Call("getNumKeys", [&]() -> absl::StatusOr<int64_t> {
    absl::StatusOr<uint64_t> count = client_->KvCount(prefix_);
    if (!count.ok()) return count.status();
    return static_cast<int64_t>(*count);
  });
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void Store::wait(const std::vector<std::string>& keys,
                 const std::chrono::milliseconds& timeout) {
  Call("wait", [&]() -> absl::StatusOr<bool> {
    const absl::Time deadline = DeadlineAfter(timeout);
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value = Await(key, deadline, timeout);
      if (!value.ok()) return value.status();
    }
    return true;
  });
}

#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
void Store::append(const std::string& key, const std::vector<uint8_t>& value) {
  Call("append", [&]() -> absl::StatusOr<bool> {
    const std::string full_key = prefix_ + key;
    while (true) {
      absl::StatusOr<std::optional<std::string>> current = Peek(full_key);
      if (!current.ok()) return current.status();
      std::optional<absl::string_view> expected;
      std::string data = Text(value);
      if (current->has_value()) {
        expected = **current;
        data = **current + data;
      }
      absl::StatusOr<bool> stored =
          client_->KvCompareAndSet(full_key, expected, data);
      if (!stored.ok() || *stored) return stored;
    }
  });
}

std::vector<std::vector<uint8_t>> Store::multiGet(
    const std::vector<std::string>& keys) {
  return Call(
      "multiGet", [&]() -> absl::StatusOr<std::vector<std::vector<uint8_t>>> {
        const std::chrono::milliseconds timeout = timeout_;
        const absl::Time deadline = DeadlineAfter(timeout);
        std::vector<std::vector<uint8_t>> values;
        for (const std::string& key : keys) {
          absl::StatusOr<std::string> value = Await(key, deadline, timeout);
          if (!value.ok()) return value.status();
          values.push_back(Bytes(*value));
        }
        return values;
      });
}

void Store::multiSet(const std::vector<std::string>& keys,
                     const std::vector<std::vector<uint8_t>>& values) {
  if (keys.size() != values.size()) {
    throw StoreError(absl::InvalidArgumentError(
        absl::StrCat("rankd store multiSet: ", keys.size(), " keys but ",
                     values.size(), " values")));
  }
  for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}
#endif

}  // namespace rankd::c10d_store
