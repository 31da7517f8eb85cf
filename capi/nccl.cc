// The C ABI's data plane with NCCL (capi/internal/nccl.h): the caller's
// device memory wrapped without copies, ordered against the caller's CUDA
// stream with events. The rankd_* entry points in gloo.cc hand an NCCL
// session's calls here.
#include "capi/internal/nccl.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/nccl/cuda_event.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_buffer.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/value_descriptor.h"

namespace rankd::capi::internal {
namespace {

namespace nc = dataplane::nccl;
using dataplane::PeerValue;
using dataplane::ValueDescriptor;

// Refuses memory that is not on `device` when the runtime can say so. Where
// it cannot (the CPU stand-in), a host pointer is only caught by the CUDA or
// NCCL call that uses it.
absl::Status CheckDeviceMemory(const void* data, size_t bytes, int device,
                               const char* function, const std::string& what) {
  if (bytes == 0) return absl::OkStatus();
  using Memory = nc::PointerAttributes::Memory;
  absl::StatusOr<nc::PointerAttributes> a =
      nc::GetPointerAttributes(data, device);
  if (absl::IsUnimplemented(a.status())) return absl::OkStatus();
  if (absl::IsInvalidArgument(a.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", what, ".data is not CUDA device memory (",
                     a.status().message(),
                     "); an NCCL session needs memory on cuda:", device));
  }
  if (!a.ok()) return a.status();
  if (a->memory == Memory::kUnregistered || a->memory == Memory::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": ", what, ".data is host memory (",
        a->memory == Memory::kUnregistered ? "not registered with CUDA"
                                           : "pinned",
        "); an NCCL session needs device memory on cuda:", device));
  }
  if (a->memory == Memory::kDevice && a->device != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": ", what, ".data is memory of cuda:", a->device,
        "; this session's device is cuda:", device));
  }
  return absl::OkStatus();
}

// A caller's tensor, checked: its descriptor and memory.
struct Operand {
  ValueDescriptor descriptor;
  void* data = nullptr;
};
absl::StatusOr<Operand> Check(const rankd_tensor* t, int device,
                              const char* function, const std::string& what) {
  auto d = DescriptorOf(t, function, what);
  if (!d.ok()) return d.status();
  absl::Status memory =
      CheckDeviceMemory(t->data, d->byte_size(), device, function, what);
  if (!memory.ok()) return memory;
  return Operand{*std::move(d), t->data};
}

// The caller's memory as a tensor of the session's device, ready after
// `ready` (null: at once). Nothing is allocated on the device, and rankd
// never frees it.
absl::StatusOr<nc::DeviceTensor> Wrap(const Operand& operand, int device,
                                      std::shared_ptr<nc::CudaEvent> ready) {
  return nc::DeviceTensor::Wrap(
      nc::DeviceBuffer::External(operand.data, operand.descriptor.byte_size(),
                                 device),
      operand.descriptor, std::move(ready));
}

// The ordering of one operation against the caller's stream.
class CallerStream {
 public:
  // Records an event on `stream` (nothing for NULL): the operation's
  // operands are ready after it. A stream that takes part in a CUDA graph
  // capture (NULL: the legacy stream while a blocking stream captures) is
  // refused first, FailedPrecondition, before anything is recorded on it
  // or queued: rankd's operations cannot be captured, and the session
  // stays usable.
  static absl::StatusOr<CallerStream> Begin(int device, void* stream,
                                            const char* function) {
    CallerStream c;
    c.stream_ = static_cast<nc::CudaStreamHandle>(stream);
    if (absl::Status capture = nc::CheckNotCapturing(
            c.stream_, device, absl::StrCat(function, ": the caller's stream"));
        !capture.ok()) {
      return capture;
    }
    if (stream == nullptr) return c;
    auto event = nc::CudaEvent::Create(device);
    if (!event.ok()) return event.status();
    absl::Status cause = nc::RecordEvent(**event, c.stream_);
    if (!cause.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          function,
          ": stream must be a CUDA stream of this session's device "
          "cuda:",
          device, " (or NULL): ", cause.message()));
    }
    c.ready_ = *std::move(event);
    return c;
  }

  const std::shared_ptr<nc::CudaEvent>& ready() const { return ready_; }
  bool has_stream() const { return stream_ != nullptr; }

  // Makes the caller's stream wait for `done` (the operation's completion
  // event); nothing for a NULL stream.
  absl::Status Then(const nc::CudaEvent& done) const {
    if (stream_ == nullptr) return absl::OkStatus();
    absl::Status s = nc::StreamWaitEvent(stream_, done);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("the caller's stream: ", s.message()));
    }
    return absl::OkStatus();
  }

 private:
  nc::CudaStreamHandle stream_ = nullptr;
  std::shared_ptr<nc::CudaEvent> ready_;
};

absl::Status CheckCall(const rankd_session* session, rankd_work** work,
                       const char* function) {
  if (session == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": session is NULL"));
  }
  if (work == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": work is NULL"));
  }
  return absl::OkStatus();
}

// After a successful submission: the caller's stream waits for the
// operation (through `done`, its completion event; when null, an event
// recorded on the session's stream after it), and the work goes to the
// caller. A failure to order the caller's stream fails the session: the
// peers already run the operation.
rankd_status* HandOut(rankd_session* session, const CallerStream& caller,
                      std::shared_ptr<nc::CudaEvent> done,
                      std::shared_ptr<dataplane::BoundedCompletion> completion,
                      const char* function, rankd_work** work) {
  nc::NcclSession& nccl = *session->state->nccl;
  absl::Status ordered = absl::OkStatus();
  if (done == nullptr && caller.has_stream()) {
    auto event = nc::CudaEvent::Create(nccl.device());
    if (event.ok()) ordered = (*event)->Record(*nccl.stream());
    if (!event.ok()) ordered = event.status();
    if (ordered.ok()) done = *std::move(event);
  }
  if (ordered.ok() && done != nullptr) ordered = caller.Then(*done);
  if (!ordered.ok()) {
    absl::Status cause(ordered.code(),
                       absl::StrCat(function,
                                    ": the caller's stream could not be "
                                    "ordered after the operation: ",
                                    ordered.message()));
    nccl.Abort(cause);
    return ToC(cause);
  }
  auto w = std::make_unique<rankd_work>();
  w->session = session->state;
  w->completion = std::move(completion);
  *work = w.release();  // rankd_work_free
  return nullptr;
}

rankd_status* Finish(
    rankd_session* session, const CallerStream& caller,
    absl::StatusOr<
        dataplane::DistributedSession<nc::DeviceTensor>::ValueSubmission>
        submitted,
    const char* function, rankd_work** work) {
  if (!submitted.ok()) return ToC(submitted.status());
  return HandOut(session, caller, submitted->output.ready(),
                 std::move(submitted->completion), function, work);
}

// A collective's checked input and output, wrapped after the caller's
// stream event.
struct Wrapped {
  CallerStream caller;
  nc::DeviceTensor input;
  nc::DeviceTensor output;
};
absl::StatusOr<Wrapped> WrapPair(rankd_session* session, void* stream,
                                 const rankd_tensor* input,
                                 const rankd_tensor* output,
                                 const char* function) {
  const int device = session->state->nccl->device();
  auto in = Check(input, device, function, "input");
  if (!in.ok()) return in.status();
  auto out = Check(output, device, function, "output");
  if (!out.ok()) return out.status();
  auto caller = CallerStream::Begin(device, stream, function);
  if (!caller.ok()) return caller.status();
  auto in_tensor = Wrap(*in, device, caller->ready());
  if (!in_tensor.ok()) return in_tensor.status();
  auto out_tensor = Wrap(*out, device, caller->ready());
  if (!out_tensor.ok()) return out_tensor.status();
  return Wrapped{*std::move(caller), *std::move(in_tensor),
                 *std::move(out_tensor)};
}

using Refused = nc::NcclSession::RefusedOperation;

// `refusal` (this member's own arguments), once the peers that wait for
// its agreement record were told (NcclSession::Refuse).
rankd_status* Refuse(rankd_session* session, uint32_t group,
                     const Refused& what, const absl::Status& refusal) {
  return ToC(session->state->nccl->Refuse(ScopeOf(group), what, refusal));
}

}  // namespace

absl::StatusOr<std::unique_ptr<nc::NcclSession>> OpenNccl(
    RankState& rank, const rankd_session_options& options,
    absl::Duration op_timeout,
    std::optional<dataplane::DistributedCapabilities> restriction) {
  // The epoch the rank is in now (after rankd_rejoin, a later one).
  auto descriptor = dataplane::DescriptorFromProto(rank.client->descriptor());
  if (!descriptor.ok()) return descriptor.status();
  nc::NcclSessionOptions nccl;
  // -1: the visible device count decides (DefaultDevice,
  // dataplane/nccl/default_device.h).
  nccl.device = rank.cuda_device;
  nccl.op_timeout = op_timeout;
  nccl.verify_agreement = options.verify_agreement != 0;
  nccl.restrict_capabilities = std::move(restriction);
  // The session numbers itself (NcclSessionOptions::tag unset).
  return nc::NcclSession::Open(*descriptor, rank.control_plane.get(), nccl);
}

rankd_status* NcclAllReduceSum(rankd_session* session, uint32_t group,
                               const rankd_tensor* input,
                               const rankd_tensor* output, void* stream,
                               rankd_work** work) {
  constexpr char kFn[] = "rankd_all_reduce_sum";
  if (absl::Status s = CheckCall(session, work, kFn); !s.ok()) return ToC(s);
  auto w = WrapPair(session, stream, input, output, kFn);
  if (!w.ok()) return Refuse(session, group, {}, w.status());
  return Finish(session, w->caller,
                session->state->nccl->AllReduceSumInto(ScopeOf(group), w->input,
                                                       w->output),
                kFn, work);
}

rankd_status* NcclAllGather(rankd_session* session, uint32_t group,
                            const rankd_tensor* input,
                            const rankd_tensor* output, void* stream,
                            rankd_work** work) {
  constexpr char kFn[] = "rankd_all_gather";
  if (absl::Status s = CheckCall(session, work, kFn); !s.ok()) return ToC(s);
  auto w = WrapPair(session, stream, input, output, kFn);
  if (!w.ok()) return Refuse(session, group, {}, w.status());
  return Finish(
      session, w->caller,
      session->state->nccl->AllGatherInto(ScopeOf(group), w->input, w->output),
      kFn, work);
}

rankd_status* NcclAllToAllV(rankd_session* session, uint32_t group,
                            const rankd_tensor* input,
                            const size_t* send_counts,
                            const size_t* receive_counts, size_t members,
                            const rankd_tensor* output, void* stream,
                            rankd_work** work) {
  constexpr char kFn[] = "rankd_all_to_all_v";
  if (absl::Status s = CheckCall(session, work, kFn); !s.ok()) return ToC(s);
  auto w = WrapPair(session, stream, input, output, kFn);
  if (!w.ok()) {
    return Refuse(session, group, {Refused::Kind::kAllToAllV}, w.status());
  }
  return Finish(
      session, w->caller,
      session->state->nccl->AllToAllVInto(
          ScopeOf(group), w->input, absl::MakeConstSpan(send_counts, members),
          absl::MakeConstSpan(receive_counts, members), w->output),
      kFn, work);
}

rankd_status* NcclSend(rankd_session* session, uint32_t group, size_t peer,
                       const rankd_tensor* input, void* stream,
                       rankd_work** work) {
  constexpr char kFn[] = "rankd_send";
  if (absl::Status s = CheckCall(session, work, kFn); !s.ok()) return ToC(s);
  const int device = session->state->nccl->device();
  const Refused send{Refused::Kind::kSend, peer};
  auto in = Check(input, device, kFn, "input");
  if (!in.ok()) return Refuse(session, group, send, in.status());
  auto caller = CallerStream::Begin(device, stream, kFn);
  if (!caller.ok()) return Refuse(session, group, send, caller.status());
  auto tensor = Wrap(*in, device, caller->ready());
  if (!tensor.ok()) return ToC(tensor.status());
  return Finish(session, *caller,
                session->state->nccl->Send(ScopeOf(group), peer, *tensor), kFn,
                work);
}

rankd_status* NcclReceive(rankd_session* session, uint32_t group, size_t peer,
                          const rankd_tensor* output, void* stream,
                          rankd_work** work) {
  constexpr char kFn[] = "rankd_receive";
  if (absl::Status s = CheckCall(session, work, kFn); !s.ok()) return ToC(s);
  const int device = session->state->nccl->device();
  const Refused receive{Refused::Kind::kReceive, peer};
  auto out = Check(output, device, kFn, "output");
  if (!out.ok()) return Refuse(session, group, receive, out.status());
  auto caller = CallerStream::Begin(device, stream, kFn);
  if (!caller.ok()) return Refuse(session, group, receive, caller.status());
  auto tensor = Wrap(*out, device, caller->ready());
  if (!tensor.ok()) return ToC(tensor.status());
  return Finish(
      session, *caller,
      session->state->nccl->ReceiveInto(ScopeOf(group), peer, *tensor), kFn,
      work);
}

rankd_status* NcclBatchSendReceive(rankd_session* session, uint32_t group,
                                   const rankd_peer_tensor* sends,
                                   size_t send_count,
                                   const rankd_peer_tensor* receives,
                                   size_t receive_count, void* stream,
                                   rankd_work** work) {
  constexpr char kFn[] = "rankd_batch_send_receive";
  if (absl::Status s = CheckCall(session, work, kFn); !s.ok()) return ToC(s);
  if (send_count > 0 && sends == nullptr) return NullArgument(kFn, "sends");
  if (receive_count > 0 && receives == nullptr) {
    return NullArgument(kFn, "receives");
  }
  if (send_count > dataplane::kMaxBatchTransfers ||
      receive_count > dataplane::kMaxBatchTransfers) {
    return Error(
        absl::StatusCode::kInvalidArgument, kFn,
        absl::StrCat("a batch holds at most ", dataplane::kMaxBatchTransfers,
                     " transfers; got ", send_count, " sends and ",
                     receive_count, " receives"));
  }
  const int device = session->state->nccl->device();
  Refused batch{Refused::Kind::kBatch};
  for (size_t i = 0; i < send_count; ++i) {
    batch.send_peers.push_back(sends[i].peer);
  }
  for (size_t i = 0; i < receive_count; ++i) {
    batch.receive_peers.push_back(receives[i].peer);
  }
  std::vector<std::pair<size_t, Operand>> send_operands, receive_operands;
  for (size_t i = 0; i < send_count; ++i) {
    auto in =
        Check(&sends[i].tensor, device, kFn, absl::StrCat("sends[", i, "]"));
    if (!in.ok()) return Refuse(session, group, batch, in.status());
    send_operands.emplace_back(sends[i].peer, *std::move(in));
  }
  for (size_t i = 0; i < receive_count; ++i) {
    auto out = Check(&receives[i].tensor, device, kFn,
                     absl::StrCat("receives[", i, "]"));
    if (!out.ok()) return Refuse(session, group, batch, out.status());
    receive_operands.emplace_back(receives[i].peer, *std::move(out));
  }
  auto caller = CallerStream::Begin(device, stream, kFn);
  if (!caller.ok()) return Refuse(session, group, batch, caller.status());
  std::vector<PeerValue<nc::DeviceTensor>> send_values, receive_values;
  for (const auto& [peer, operand] : send_operands) {
    auto t = Wrap(operand, device, caller->ready());
    if (!t.ok()) return ToC(t.status());
    send_values.push_back({peer, *std::move(t)});
  }
  for (const auto& [peer, operand] : receive_operands) {
    auto t = Wrap(operand, device, caller->ready());
    if (!t.ok()) return ToC(t.status());
    receive_values.push_back({peer, *std::move(t)});
  }
  auto submitted = session->state->nccl->BatchSendReceive(
      ScopeOf(group), send_values, receive_values);
  if (!submitted.ok()) return ToC(submitted.status());
  // Every output carries the batch's completion event; a batch of sends
  // alone has none, and HandOut records one after it.
  std::shared_ptr<nc::CudaEvent> done;
  if (!submitted->output.empty()) done = submitted->output.front().ready();
  return HandOut(session, *caller, std::move(done),
                 std::move(submitted->completion), kFn, work);
}

}  // namespace rankd::capi::internal
