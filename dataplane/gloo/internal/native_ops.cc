#include "dataplane/gloo/internal/native_ops.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// Stands in for the data pointer of an empty piece.
char empty_piece;

void* NonNull(void* p) { return p != nullptr ? p : &empty_piece; }
void* NonNull(const void* p) { return NonNull(const_cast<void*>(p)); }

// An opaque element of N bytes: Gloo's allreduce only needs the size.
template <size_t N>
struct Element {
  uint8_t bytes[N];
};

template <size_t N>
void AllReduceElements(const std::shared_ptr<::gloo::Context>& context,
                       const void* in, void* out, size_t elements,
                       const SumKernel& kernel, uint32_t tag,
                       Milliseconds timeout, const AllReducePlan& plan) {
  ::gloo::AllreduceOptions options(context);
  if (in != nullptr && in != out) {
    options.setInput(static_cast<Element<N>*>(NonNull(in)), elements);
  }
  options.setOutput(static_cast<Element<N>*>(NonNull(out)), elements);
  options.setReduceFunction(kernel.reduce);
  options.setTag(tag);
  options.setTimeout(timeout);
  options.setAlgorithm(plan.algorithm == AllReduceAlgorithm::kBcube
                           ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                           : ::gloo::AllreduceOptions::Algorithm::RING);
  options.setMaxSegmentSize(std::max<size_t>(1, plan.ring_segment_bytes));
  ::gloo::allreduce(options);
}

}  // namespace

uint64_t AllReducePlan::salt() const {
  // Zero for Gloo's own defaults (the ring, 1 MiB segments).
  const uint64_t algorithm_bits = algorithm == AllReduceAlgorithm::kBcube
                                      ? 0x6263756265000000ull  // "bcube"
                                      : 0;
  return algorithm_bits ^
         ((ring_segment_bytes ^ (size_t{1} << 20)) * 0x9E3779B97F4A7C15ull);
}

AllReducePlan AllReducePlanFor(size_t bytes, size_t bcube_max_bytes,
                               size_t ring_segment_bytes) {
  AllReducePlan plan;
  plan.algorithm = bytes <= bcube_max_bytes ? AllReduceAlgorithm::kBcube
                                            : AllReduceAlgorithm::kRing;
  plan.ring_segment_bytes = ring_segment_bytes;
  return plan;
}

absl::Status CatchNative(absl::string_view what, absl::FunctionRef<void()> fn) {
  return CatchNative(what, "", fn);
}

absl::Status CatchNative(absl::string_view prefix, absl::string_view subject,
                         absl::FunctionRef<void()> fn) {
  auto what = [&] {
    return subject.empty() ? std::string(prefix)
                           : absl::StrCat(prefix, " ", subject);
  };
  try {
    fn();
    return absl::OkStatus();
  } catch (const ::gloo::IoException& e) {
    const std::string text = e.what();
    if (absl::StrContains(text, "Timed out")) {
      return absl::DeadlineExceededError(absl::StrCat(what(), ": ", text));
    }
    return absl::UnavailableError(absl::StrCat(what(), ": ", text));
  } catch (const ::gloo::Exception& e) {
    return absl::InternalError(absl::StrCat(what(), ": ", e.what()));
  } catch (const ::gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat(what(), ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what(), ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(
        absl::StrCat(what(), ": an unknown exception was thrown"));
  }
}

void NativeAllReduce(const std::shared_ptr<::gloo::Context>& context,
                     const void* in, void* out, size_t elements,
                     const SumKernel& kernel, uint32_t tag,
                     Milliseconds timeout, const AllReducePlan& plan) {
  switch (kernel.element_size) {
    case 1:
      return AllReduceElements<1>(context, in, out, elements, kernel, tag,
                                  timeout, plan);
    case 2:
      return AllReduceElements<2>(context, in, out, elements, kernel, tag,
                                  timeout, plan);
    case 4:
      return AllReduceElements<4>(context, in, out, elements, kernel, tag,
                                  timeout, plan);
    case 8:
      return AllReduceElements<8>(context, in, out, elements, kernel, tag,
                                  timeout, plan);
  }
  throw ::gloo::Exception(
      absl::StrCat("unsupported element size ", kernel.element_size));
}

void NativeAllGatherV(const std::shared_ptr<::gloo::Context>& context,
                      const void* in, void* out,
                      const std::vector<size_t>& bytes_per_member, uint32_t tag,
                      Milliseconds timeout) {
  ::gloo::AllgathervOptions options(context);
  options.setInput(static_cast<char*>(NonNull(in)),
                   bytes_per_member[context->rank]);
  options.setOutput(static_cast<char*>(NonNull(out)), bytes_per_member);
  options.setTag(tag);
  options.setTimeout(timeout);
  ::gloo::allgatherv(options);
}

void NativeAllToAllV(const std::shared_ptr<::gloo::Context>& context,
                     const void* in, const std::vector<int64_t>& send_bytes,
                     void* out, const std::vector<int64_t>& recv_bytes,
                     uint32_t tag, Milliseconds timeout) {
  ::gloo::AlltoallvOptions options(context);
  options.setInput(static_cast<char*>(NonNull(in)), send_bytes);
  options.setOutput(static_cast<char*>(NonNull(out)), recv_bytes);
  options.setTag(tag);
  options.setTimeout(timeout);
  ::gloo::alltoallv(options);
}

void NativeBroadcast(const std::shared_ptr<::gloo::Context>& context,
                     void* data, size_t bytes, int root, uint32_t tag,
                     Milliseconds timeout) {
  ::gloo::BroadcastOptions options(context);
  char* p = static_cast<char*>(NonNull(data));
  if (context->rank == root) options.setInput(p, bytes);
  options.setOutput(p, bytes);
  options.setRoot(root);
  options.setTag(tag);
  options.setTimeout(timeout);
  ::gloo::broadcast(options);
}

void NativeBarrier(const std::shared_ptr<::gloo::Context>& context,
                   uint32_t tag, Milliseconds timeout) {
  ::gloo::BarrierOptions options(context);
  options.setTag(tag);
  options.setTimeout(timeout);
  ::gloo::barrier(options);
}

uint64_t RouteSlot(bool ascending, uint32_t transfer_tag, uint16_t piece) {
  // Gloo's collectives use slot prefixes 0x01..0x08 in the top byte.
  const uint64_t prefix = ascending ? 0x50 : 0x51;
  return (prefix << 56) | (static_cast<uint64_t>(transfer_tag) << 16) | piece;
}

void NativeSend(const std::shared_ptr<::gloo::Context>& context, int peer,
                uint64_t slot, const void* data, size_t bytes,
                Milliseconds timeout) {
  auto buffer = context->createUnboundBuffer(NonNull(data), bytes);
  buffer->send(peer, slot);
  if (!buffer->waitSend(timeout)) throw ::gloo::IoException("send aborted");
}

void NativeRecv(const std::shared_ptr<::gloo::Context>& context, int peer,
                uint64_t slot, void* data, size_t bytes, Milliseconds timeout) {
  auto buffer = context->createUnboundBuffer(NonNull(data), bytes);
  buffer->recv(peer, slot);
  if (!buffer->waitRecv(timeout)) throw ::gloo::IoException("receive aborted");
}

void NativeExchange(const std::shared_ptr<::gloo::Context>& context, int peer,
                    uint64_t send_slot, const void* send, size_t send_bytes,
                    uint64_t recv_slot, void* recv, size_t recv_bytes,
                    Milliseconds timeout) {
  auto out = context->createUnboundBuffer(NonNull(send), send_bytes);
  auto in = context->createUnboundBuffer(NonNull(recv), recv_bytes);
  in->recv(peer, recv_slot);
  out->send(peer, send_slot);
  if (!in->waitRecv(timeout)) throw ::gloo::IoException("receive aborted");
  if (!out->waitSend(timeout)) throw ::gloo::IoException("send aborted");
}

void NativeTransfers(const std::shared_ptr<::gloo::Context>& context,
                     const std::vector<PostedTransfer>& transfers,
                     Milliseconds timeout) {
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> buffers;
  buffers.reserve(transfers.size());
  for (const PostedTransfer& t : transfers) {
    buffers.push_back(context->createUnboundBuffer(NonNull(t.data), t.bytes));
  }
  for (size_t i = 0; i < transfers.size(); ++i) {
    if (!transfers[i].send)
      buffers[i]->recv(transfers[i].peer, transfers[i].slot);
  }
  for (size_t i = 0; i < transfers.size(); ++i) {
    if (transfers[i].send)
      buffers[i]->send(transfers[i].peer, transfers[i].slot);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const auto left = std::max(
        Milliseconds(1), std::chrono::duration_cast<Milliseconds>(
                             deadline - std::chrono::steady_clock::now()));
    const bool finished = transfers[i].send ? buffers[i]->waitSend(left)
                                            : buffers[i]->waitRecv(left);
    if (!finished) {
      throw ::gloo::IoException(transfers[i].send ? "send aborted"
                                                  : "receive aborted");
    }
  }
}

}  // namespace rankd::dataplane::gloo::internal
