// CommunicationBackend: the low-level, static contract (docs/contract.md,
// CommunicationBackend), as C++20 concepts.
//
// A backend type B provides the associated types
//   B::Tensor, B::Executor (stream/queue), B::CommunicationGroup,
//   B::CommunicationRoute, B::CommunicationCompletion (a BoundedCompletion)
// and the one required function
//   static absl::StatusOr<Submission<Unit,
//   std::shared_ptr<CommunicationCompletion>>>
//   B::SubmitLocalDependencies(absl::Span<const Tensor* const>, Executor&);
// which submits evaluation of rank-local tensors before a readiness
// agreement and returns a completion retaining them; it selects no group.
// Errors are absl::Status (the CommunicationError).
//
// The base contract declares no collective. A backend opts into each
// fine-grained operation by specializing its Declares* trait to true; the
// matching concept then also checks the member function's exact signature,
// and the generic entry points below accept only backends that declared the
// operation, so using an undeclared one does not compile. Depends on
// completion.h and absl.
#ifndef RANKD_DATAPLANE_COMMUNICATION_BACKEND_H_
#define RANKD_DATAPLANE_COMMUNICATION_BACKEND_H_

#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataplane/completion.h"

namespace rankd::dataplane {

template <typename B>
concept CommunicationBackend = requires {
  typename B::Tensor;
  typename B::Executor;
  typename B::CommunicationGroup;
  typename B::CommunicationRoute;
  typename B::CommunicationCompletion;
}
&&std::derived_from<
    typename B::CommunicationCompletion,
    BoundedCompletion>&& requires(absl::Span<const typename B::Tensor* const>
                                      values,
                                  typename B::Executor& executor) {
  {
    B::SubmitLocalDependencies(values, executor)
    } -> std::same_as<absl::StatusOr<Submission<
        Unit, std::shared_ptr<typename B::CommunicationCompletion>>>>;
};

// A submission producing a tensor.
template <typename B>
using TensorSubmission = absl::StatusOr<Submission<
    typename B::Tensor, std::shared_ptr<typename B::CommunicationCompletion>>>;
// A submission producing nothing.
template <typename B>
using UnitSubmission = absl::StatusOr<
    Submission<Unit, std::shared_ptr<typename B::CommunicationCompletion>>>;

// The result of agree_success: true only if every member submitted true.
// Readable once the submission's completion completed.
class Agreement {
 public:
  virtual ~Agreement() = default;
  // FailedPrecondition before completion; the operation's error if it
  // failed.
  virtual absl::StatusOr<bool> Resolve() const = 0;
};
template <typename B>
using AgreementSubmission = absl::StatusOr<
    Submission<std::shared_ptr<const Agreement>,
               std::shared_ptr<typename B::CommunicationCompletion>>>;
// An ordered bundle of tensors over one route.
template <typename B>
using BundleSubmission = absl::StatusOr<
    Submission<std::vector<typename B::Tensor>,
               std::shared_ptr<typename B::CommunicationCompletion>>>;

// Exact per-peer partitions along an axis.
struct PeerCounts {
  std::vector<size_t> send;
  std::vector<size_t> receive;
};

// Opt-in declarations; a backend specializes the ones it implements.
template <typename B>
struct DeclaresAllReduceSum : std::false_type {};
template <typename B>
struct DeclaresAllGatherEven : std::false_type {};
template <typename B>
struct DeclaresAllGatherUneven : std::false_type {};
template <typename B>
struct DeclaresVariableAllToAll : std::false_type {};
template <typename B>
struct DeclaresBroadcast : std::false_type {};
template <typename B>
struct DeclaresBarrier : std::false_type {};
template <typename B>
struct DeclaresAgreeSuccess : std::false_type {};
template <typename B>
struct DeclaresSendReceive : std::false_type {};

template <typename B>
concept AllReduceSumBackend = CommunicationBackend<B> &&
    DeclaresAllReduceSum<B>::value &&
    requires(B& b, const typename B::Tensor& value,
             typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  {
    b.AllReduceSum(value, group, executor)
    } -> std::same_as<TensorSubmission<B>>;
};

template <typename B>
concept AllGatherEvenBackend = CommunicationBackend<B> &&
    DeclaresAllGatherEven<B>::value &&
    requires(B& b, const typename B::Tensor& value, size_t axis,
             typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  {
    b.AllGatherEven(value, axis, group, executor)
    } -> std::same_as<TensorSubmission<B>>;
};

template <typename B>
concept AllGatherUnevenBackend = CommunicationBackend<B> &&
    DeclaresAllGatherUneven<B>::value &&
    requires(B& b, const typename B::Tensor& value,
             absl::Span<const size_t> counts, size_t axis,
             typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  {
    b.AllGatherUneven(value, counts, axis, group, executor)
    } -> std::same_as<TensorSubmission<B>>;
};

template <typename B>
concept VariableAllToAllBackend = CommunicationBackend<B> &&
    DeclaresVariableAllToAll<B>::value &&
    requires(B& b, const typename B::Tensor& value, const PeerCounts& counts,
             size_t axis, typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  {
    b.VariableAllToAll(value, counts, axis, group, executor)
    } -> std::same_as<TensorSubmission<B>>;
};

template <typename B>
concept BroadcastBackend = CommunicationBackend<B> &&
    DeclaresBroadcast<B>::value &&
    requires(B& b, const typename B::Tensor& value, size_t root_member_index,
             typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  {
    b.Broadcast(value, root_member_index, group, executor)
    } -> std::same_as<TensorSubmission<B>>;
};

template <typename B>
concept BarrierBackend = CommunicationBackend<B> && DeclaresBarrier<B>::value &&
    requires(B& b, typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  { b.Barrier(group, executor) } -> std::same_as<UnitSubmission<B>>;
};

template <typename B>
concept AgreeSuccessBackend = CommunicationBackend<B> &&
    DeclaresAgreeSuccess<B>::value &&
    requires(B& b, bool success, typename B::CommunicationGroup& group,
             typename B::Executor& executor) {
  {
    b.AgreeSuccess(success, group, executor)
    } -> std::same_as<AgreementSubmission<B>>;
};

template <typename B>
concept SendReceiveBackend = CommunicationBackend<B> &&
    DeclaresSendReceive<B>::value &&
    requires(B& b, absl::Span<const typename B::Tensor> tensors,
             const typename B::CommunicationRoute& route,
             typename B::Executor& executor) {
  {
    b.SendReceive(tensors, route, executor)
    } -> std::same_as<BundleSubmission<B>>;
};

// Generic entry points: architecture code calls these; each compiles only
// for a backend that declared the operation.
template <AllReduceSumBackend B>
TensorSubmission<B> AllReduceSum(B& backend, const typename B::Tensor& value,
                                 typename B::CommunicationGroup& group,
                                 typename B::Executor& executor) {
  return backend.AllReduceSum(value, group, executor);
}
template <AllGatherEvenBackend B>
TensorSubmission<B> AllGatherEven(B& backend, const typename B::Tensor& value,
                                  size_t axis,
                                  typename B::CommunicationGroup& group,
                                  typename B::Executor& executor) {
  return backend.AllGatherEven(value, axis, group, executor);
}
template <AllGatherUnevenBackend B>
TensorSubmission<B> AllGatherUneven(B& backend, const typename B::Tensor& value,
                                    absl::Span<const size_t> counts,
                                    size_t axis,
                                    typename B::CommunicationGroup& group,
                                    typename B::Executor& executor) {
  return backend.AllGatherUneven(value, counts, axis, group, executor);
}
template <VariableAllToAllBackend B>
TensorSubmission<B> VariableAllToAll(B& backend,
                                     const typename B::Tensor& value,
                                     const PeerCounts& counts, size_t axis,
                                     typename B::CommunicationGroup& group,
                                     typename B::Executor& executor) {
  return backend.VariableAllToAll(value, counts, axis, group, executor);
}
template <BroadcastBackend B>
TensorSubmission<B> Broadcast(B& backend, const typename B::Tensor& value,
                              size_t root_member_index,
                              typename B::CommunicationGroup& group,
                              typename B::Executor& executor) {
  return backend.Broadcast(value, root_member_index, group, executor);
}
template <BarrierBackend B>
UnitSubmission<B> Barrier(B& backend, typename B::CommunicationGroup& group,
                          typename B::Executor& executor) {
  return backend.Barrier(group, executor);
}
template <AgreeSuccessBackend B>
AgreementSubmission<B> AgreeSuccess(B& backend, bool success,
                                    typename B::CommunicationGroup& group,
                                    typename B::Executor& executor) {
  return backend.AgreeSuccess(success, group, executor);
}
template <SendReceiveBackend B>
BundleSubmission<B> SendReceive(B& backend,
                                absl::Span<const typename B::Tensor> tensors,
                                const typename B::CommunicationRoute& route,
                                typename B::Executor& executor) {
  return backend.SendReceive(tensors, route, executor);
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_COMMUNICATION_BACKEND_H_
