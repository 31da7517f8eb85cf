// SessionCollectives: the example's Collectives (collectives.h) on a rankd
// DistributedSession<Value> of any backend. A Codec moves a host Matrix in
// and out of the backend's value type:
//
//   struct Codec {
//     // A value holding `m` as f32[m.rows, m.cols] (m.rows may be zero).
//     static absl::StatusOr<Value> Upload(Session& s, const Matrix& m);
//     // The host copy of a completed value of f32[rows, cols].
//     static absl::StatusOr<Matrix> Download(const Value& v, size_t cols);
//   };
//
// Each operation submits, waits for its completion (the output is
// authoritative only then), records the elapsed time under its kind and
// prefixes any error with the operation and group. Reform replaces the
// session in place through the backend's own Session::Reform.
#ifndef RANKD_EXAMPLES_SERVING_SESSION_COLLECTIVES_H_
#define RANKD_EXAMPLES_SERVING_SESSION_COLLECTIVES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "dataplane/collective_scope.h"
#include "dataplane/dtype.h"
#include "dataplane/session.h"
#include "dataplane/value_descriptor.h"
#include "examples/serving/collectives.h"

namespace rankd::examples {

// f32[rows, cols], rows may be zero.
inline absl::StatusOr<dataplane::ValueDescriptor> MatrixDescriptor(
    size_t rows, size_t cols) {
  auto row =
      dataplane::ValueDescriptor::Create({cols}, dataplane::TensorDtype::kF32);
  if (!row.ok()) return row.status();
  return dataplane::ValueDescriptor::Rows(rows, *row);
}

// `status` with "<what>: " in front of its message, same code.
inline absl::Status Annotate(const absl::Status& status,
                             const std::string& what) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
}

template <typename Session, typename Codec>
class SessionCollectives final : public Collectives {
 public:
  using Value = typename Session::Value;

  SessionCollectives(const char* backend, std::unique_ptr<Session> session)
      : backend_(backend), session_(std::move(session)) {}

  const char* backend() const override { return backend_; }
  // The current session; not null unless a Reform failed.
  Session* session() { return session_.get(); }

  uint64_t epoch() const override {
    return session_ != nullptr ? session_->descriptor().epoch() : 0;
  }

  absl::Status Reform(absl::Duration timeout) override {
    if (session_ == nullptr) return NoSession();
    auto next = Session::Reform(std::move(session_), timeout);
    if (!next.ok()) return next.status();
    session_ = *std::move(next);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> frame) override {
    if (session_ == nullptr) return NoSession();
    const absl::Time start = MonotonicNow();
    auto words = session_->AllGatherWords(frame);
    stats_.Record(CollectiveKind::kAllGatherWords, MonotonicNow() - start);
    if (!words.ok()) return Annotate(words.status(), "all_gather_words");
    return words;
  }

  absl::Status AllReduceSum(uint32_t group, Matrix& inout) override {
    const std::string what = absl::StrCat("all_reduce_sum on group ", group);
    auto output =
        Run(CollectiveKind::kAllReduceSum, what, inout, [&](const Value& v) {
          return session_->AllReduceSum(
              dataplane::CollectiveScope::Group(group), v);
        });
    if (!output.ok()) return output.status();
    inout = *std::move(output);
    return absl::OkStatus();
  }

  absl::StatusOr<Matrix> AllToAllV(
      uint32_t group, const Matrix& input, absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts) override {
    const std::string what = absl::StrCat("all_to_all_v on group ", group);
    return Run(CollectiveKind::kAllToAllV, what, input, [&](const Value& v) {
      return session_->AllToAllV(dataplane::CollectiveScope::Group(group), v,
                                 send_counts, receive_counts);
    });
  }

  absl::Status Send(uint32_t group, size_t peer, const Matrix& input) override {
    if (session_ == nullptr) return NoSession();
    const std::string what =
        absl::StrCat("send to member ", peer, " of group ", group);
    const absl::Time start = MonotonicNow();
    absl::Status status = [&]() -> absl::Status {
      auto value = Codec::Upload(*session_, input);
      if (!value.ok()) return value.status();
      auto sub = session_->Send(dataplane::CollectiveScope::Group(group), peer,
                                *value);
      if (!sub.ok()) return sub.status();
      return sub->completion->Wait();
    }();
    stats_.Record(CollectiveKind::kSendReceive, MonotonicNow() - start);
    return Annotate(status, what);
  }

  absl::StatusOr<Matrix> Receive(uint32_t group, size_t peer, size_t rows,
                                 size_t cols) override {
    if (session_ == nullptr) return NoSession();
    const std::string what =
        absl::StrCat("receive from member ", peer, " of group ", group);
    const absl::Time start = MonotonicNow();
    absl::StatusOr<Matrix> out = [&]() -> absl::StatusOr<Matrix> {
      auto descriptor = MatrixDescriptor(rows, cols);
      if (!descriptor.ok()) return descriptor.status();
      auto sub = session_->Receive(dataplane::CollectiveScope::Group(group),
                                   peer, *descriptor);
      if (!sub.ok()) return sub.status();
      if (absl::Status s = sub->completion->Wait(); !s.ok()) return s;
      return Codec::Download(sub->output, cols);
    }();
    stats_.Record(CollectiveKind::kSendReceive, MonotonicNow() - start);
    if (!out.ok()) return Annotate(out.status(), what);
    return out;
  }

  absl::StatusOr<Matrix> AllGather(const Matrix& input) override {
    return Run(CollectiveKind::kAllGather, "all_gather on the world", input,
               [&](const Value& v) {
                 return session_->AllGather(dataplane::CollectiveScope::World(),
                                            v);
               });
  }

 private:
  // Upload, submit, wait, download; timed under `kind`.
  template <typename Submit>
  absl::StatusOr<Matrix> Run(CollectiveKind kind, const std::string& what,
                             const Matrix& input, Submit submit) {
    const absl::Time start = MonotonicNow();
    absl::StatusOr<Matrix> out = [&]() -> absl::StatusOr<Matrix> {
      auto value = Codec::Upload(*session_, input);
      if (!value.ok()) return value.status();
      auto sub = submit(*value);
      if (!sub.ok()) return sub.status();
      if (absl::Status s = sub->completion->Wait(); !s.ok()) return s;
      return Codec::Download(sub->output, input.cols);
    }();
    stats_.Record(kind, MonotonicNow() - start);
    if (!out.ok()) return Annotate(out.status(), what);
    return out;
  }

  static absl::Status NoSession() {
    return absl::FailedPreconditionError(
        "no data-plane session: re-forming it after a loss failed");
  }

  const char* const backend_;
  // Null only after a failed Reform.
  std::unique_ptr<Session> session_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_SESSION_COLLECTIVES_H_
