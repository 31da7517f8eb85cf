// The NCCL operations behind NcclSession and NcclBackend (declared in
// internal/session_impl.h). Every function validates its arguments before any
// native call; the data moves as bytes (ncclInt8) except for reductions,
// whose dtype comes from SumTypeFor.
#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/batch.h"
#include "dataplane/bundle.h"
#include "dataplane/nccl/cuda_copy.h"
#include "dataplane/nccl/internal/session_impl.h"
#include "dataplane/operation_description.h"
#include "dataplane/route.h"

namespace rankd::dataplane::nccl::internal {
namespace {

constexpr char kBackend[] = "nccl";

template <typename T>
std::shared_ptr<const void> Retain(std::shared_ptr<T> p) {
  return std::static_pointer_cast<const void>(std::move(p));
}

char* At(void* base, size_t offset) {
  return static_cast<char*>(base) + offset;
}
const char* At(const void* base, size_t offset) {
  return static_cast<const char*>(base) + offset;
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> Scratch(
    SessionImpl& core, size_t bytes, const std::shared_ptr<CudaStream>& stream,
    absl::string_view name) {
  auto buffer = DeviceBuffer::Allocate(bytes, stream);
  if (!buffer.ok()) {
    return core.Fail(absl::Status(
        buffer.status().code(),
        absl::StrCat("nccl backend: ", name, ": allocating ", bytes,
                     " bytes of scratch: ", buffer.status().message())));
  }
  return buffer;
}

// What an operation refused on this member's own arguments was, for
// SessionImpl::RefuseWithPeers: the peers that check agreement first wait
// for its record. Holds pointers only (nothing is copied unless a refusal
// happens); everything it points to must outlive it.
class Refusal {
 public:
  Refusal(SessionImpl& core, const ScopedComm& on,
          const std::shared_ptr<CudaStream>& stream, const std::string& name,
          bool agree_first = false)
      : core_(&core),
        on_(&on),
        stream_(&stream),
        name_(&name),
        agree_first_(agree_first) {}
  Refusal& Route(uint32_t source, uint32_t destination) {
    route_ = {{source, destination}};
    return *this;
  }
  Refusal& Batch(const std::vector<BatchTransfer>* batch) {
    batch_ = batch;
    return *this;
  }
  // `refusal`, once the peers that wait for this member were told.
  absl::Status Refuse(const absl::Status& refusal) const {
    OpPlan plan;
    plan.name = *name_;
    plan.comm = on_->comm;
    plan.scope = on_->scope;
    plan.stream = *stream_;
    plan.agree_first = agree_first_;
    plan.route = route_;
    if (batch_ != nullptr) plan.batch = *batch_;
    return core_->RefuseWithPeers(std::move(plan), refusal);
  }

 private:
  SessionImpl* core_;
  const ScopedComm* on_;
  const std::shared_ptr<CudaStream>* stream_;
  const std::string* name_;
  bool agree_first_;
  std::optional<std::pair<uint32_t, uint32_t>> route_;
  const std::vector<BatchTransfer>* batch_ = nullptr;
};

TensorResult Finish(absl::StatusOr<Submitted> submitted,
                    const DeviceTensor& output) {
  if (!submitted.ok()) return submitted.status();
  return Submission<DeviceTensor, std::shared_ptr<NcclCompletion>>{
      output.WithReady(submitted->event), submitted->completion};
}

}  // namespace

TensorResult SubmitAllReduceSum(SessionImpl& core, const ScopedComm& on,
                                const DeviceTensor& input,
                                const std::shared_ptr<CudaStream>& stream,
                                std::string name, const DeviceTensor* into) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const Refusal refuse(core, on, stream, name);
  absl::Status valid = core.CheckTensor(input, name);
  if (!valid.ok()) return refuse.Refuse(valid);
  auto sum = SumTypeFor(input.descriptor().dtype(), NcclRuntimeVersion());
  if (!sum.ok()) return refuse.Refuse(sum.status());
  auto out = core.OutputFor(input.descriptor(), into, &input, /*in_place=*/true,
                            stream, name);
  if (!out.ok()) return refuse.Refuse(out.status());
  OpPlan plan;
  plan.canonical =
      *DescribeOnValueRemembered("all_reduce_sum", input.descriptor());
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.inputs = {input};
  plan.outputs = {*out};
  const size_t count = input.descriptor().element_count() * sum->lanes;
  const void* send = input.data();
  void* recv = out->data();
  const NcclDataType type = sum->type;
  CudaStreamHandle s = stream->get();
  // A value with no rows needs no NCCL call; its agreement record
  // (SessionImpl::Submit) still pairs it with every member's, as a zero-row
  // transfer's does (docs/contract.md, "Empty values").
  if (count > 0) {
    plan.nccl = [=](NcclCommHandle c) {
      return NcclAllReduce(send, recv, count, type, NcclRedOp::kSum, c, s);
    };
  }
  return Finish(core.Submit(std::move(plan)), *out);
}

TensorResult SubmitAllGatherEven(SessionImpl& core, const ScopedComm& on,
                                 const DeviceTensor& input, size_t axis,
                                 const std::shared_ptr<CudaStream>& stream,
                                 std::string name, const DeviceTensor* into) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const Refusal refuse(core, on, stream, name);
  absl::Status valid = core.CheckTensor(input, name);
  if (!valid.ok()) return refuse.Refuse(valid);
  const size_t n = comm->members.size();
  auto layout = LayoutEvenGather(input.descriptor(), axis, n, kBackend, name);
  if (!layout.ok()) return refuse.Refuse(layout.status());
  auto out = core.OutputFor(layout->output, into, &input, /*in_place=*/false,
                            stream, name);
  if (!out.ok()) return refuse.Refuse(out.status());
  const size_t bytes = input.byte_size();
  OpPlan plan;
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.inputs = {input};
  plan.outputs = {*out};
  const void* send = input.data();
  CudaStreamHandle s = stream->get();
  if (bytes > 0) {
    if (layout->input.outer == 1) {
      // Along the leading (or a leading-equivalent) axis: members' parts
      // are contiguous in member order.
      void* recv = out->data();
      plan.nccl = [=](NcclCommHandle c) {
        return NcclAllGather(send, recv, bytes, NcclDataType::kInt8, c, s);
      };
    } else {
      auto staging = Scratch(core, bytes * n, stream, name);
      if (!staging.ok()) return staging.status();
      plan.retained.push_back(Retain(*staging));
      void* gathered = (*staging)->data();
      plan.nccl = [=](NcclCommHandle c) {
        return NcclAllGather(send, gathered, bytes, NcclDataType::kInt8, c, s);
      };
      // gathered is [member][outer][extent*unit]; the output is
      // [outer][member][extent*unit].
      const size_t part = layout->input.extent * layout->input.unit_bytes;
      const size_t outer = layout->input.outer;
      void* dst = out->data();
      plan.after = [=](const CudaStream& st) {
        for (size_t m = 0; m < n; ++m) {
          absl::Status copied = Copy2DDeviceToDevice(
              At(dst, m * part), n * part, At(gathered, m * bytes), part, part,
              outer, st);
          if (!copied.ok()) return copied;
        }
        return absl::OkStatus();
      };
    }
  }
  // Members agree on the axis, the rest of the shape and (each has the
  // same extent) the counts.
  plan.canonical =
      DescribeAlongAxis("all_gather_even", axis, input.descriptor(),
                        std::vector<size_t>(n, layout->input.extent));
  plan.name = std::move(name);
  return Finish(core.Submit(std::move(plan)), *out);
}

TensorResult SubmitAllGatherUneven(SessionImpl& core, const ScopedComm& on,
                                   const DeviceTensor& input,
                                   absl::Span<const size_t> counts, size_t axis,
                                   const std::shared_ptr<CudaStream>& stream,
                                   std::string name, const DeviceTensor* into) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const Refusal refuse(core, on, stream, name, /*agree_first=*/true);
  absl::Status valid = core.CheckTensor(input, name);
  if (!valid.ok()) return refuse.Refuse(valid);
  const size_t n = comm->members.size();
  const size_t me = comm->local_rank;
  auto layout = LayoutUnevenGather(input.descriptor(), axis, counts, n, me,
                                   kBackend, name);
  if (!layout.ok()) return refuse.Refuse(layout.status());
  const std::vector<size_t> offsets = layout->offsets;
  const size_t total = offsets[n];
  auto out = core.OutputFor(layout->output, into, &input, /*in_place=*/false,
                            stream, name);
  if (!out.ok()) return refuse.Refuse(out.status());

  const size_t unit = layout->input.unit_bytes;
  const size_t outer = layout->input.outer;
  std::vector<size_t> block(n);
  std::vector<size_t> block_offset(n + 1, 0);
  for (size_t m = 0; m < n; ++m) {
    block[m] = outer * counts[m] * unit;
    block_offset[m + 1] = block_offset[m] + block[m];
  }
  OpPlan plan;
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.inputs = {input};
  plan.outputs = {*out};
  // Members' inputs differ along the axis by design; what they must agree
  // on is the counts, the axis and the rest of the shape.
  plan.canonical =
      DescribeAlongAxis("all_gather_uneven", axis, input.descriptor(), counts);
  plan.agree_first = true;  // counts that disagree would truncate or hang
  const void* send = input.data();
  const size_t my_bytes = input.byte_size();
  void* landing = out->data();
  std::vector<size_t> landing_offset(n);
  if (outer == 1) {
    for (size_t m = 0; m < n; ++m) landing_offset[m] = offsets[m] * unit;
  } else {
    auto staging = Scratch(core, block_offset[n], stream, name);
    if (!staging.ok()) return staging.status();
    plan.retained.push_back(Retain(*staging));
    landing = (*staging)->data();
    for (size_t m = 0; m < n; ++m) landing_offset[m] = block_offset[m];
    void* dst = out->data();
    std::vector<size_t> widths(n);
    for (size_t m = 0; m < n; ++m) widths[m] = counts[m] * unit;
    plan.after = [=](const CudaStream& st) {
      for (size_t m = 0; m < n; ++m) {
        absl::Status copied = Copy2DDeviceToDevice(
            At(dst, offsets[m] * unit), total * unit,
            At(landing, block_offset[m]), widths[m], widths[m], outer, st);
        if (!copied.ok()) return copied;
      }
      return absl::OkStatus();
    };
  }
  plan.before = [=](const CudaStream& st) {
    return CopyDeviceToDevice(At(landing, landing_offset[me]), send, my_bytes,
                              st);
  };
  bool any = false;
  for (size_t m = 0; m < n; ++m) {
    if (m != me && (my_bytes > 0 || block[m] > 0)) any = true;
  }
  if (any) {
    CudaStreamHandle s = stream->get();
    plan.nccl = [=](NcclCommHandle c) {
      return NcclGrouped([&]() -> int {
        for (size_t m = 0; m < n; ++m) {
          if (m == me) continue;
          if (my_bytes > 0) {
            int r = NcclSend(send, my_bytes, NcclDataType::kInt8,
                             static_cast<int>(m), c, s);
            if (r != kNcclSuccess && r != kNcclInProgress) return r;
          }
          if (block[m] > 0) {
            int r = NcclRecv(At(landing, landing_offset[m]), block[m],
                             NcclDataType::kInt8, static_cast<int>(m), c, s);
            if (r != kNcclSuccess && r != kNcclInProgress) return r;
          }
        }
        return kNcclSuccess;
      });
    };
  }
  plan.name = std::move(name);
  return Finish(core.Submit(std::move(plan)), *out);
}

TensorResult SubmitAllToAll(SessionImpl& core, const ScopedComm& on,
                            const DeviceTensor& input,
                            absl::Span<const size_t> send_counts,
                            absl::Span<const size_t> receive_counts,
                            size_t axis,
                            const std::shared_ptr<CudaStream>& stream,
                            std::string name, const DeviceTensor* into) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const Refusal refuse(core, on, stream, name, /*agree_first=*/true);
  absl::Status valid = core.CheckTensor(input, name);
  if (!valid.ok()) return refuse.Refuse(valid);
  const size_t n = comm->members.size();
  const size_t me = comm->local_rank;
  auto planned = LayoutAllToAll(input.descriptor(), axis, send_counts,
                                receive_counts, n, me, kBackend, name);
  if (!planned.ok()) return refuse.Refuse(planned.status());
  const AxisLayout* layout = &planned->input;
  const std::vector<size_t>& send_off = planned->send_offsets;
  const std::vector<size_t>& recv_off = planned->receive_offsets;
  auto out = core.OutputFor(planned->output, into, &input, /*in_place=*/false,
                            stream, name);
  if (!out.ok()) return refuse.Refuse(out.status());

  const size_t unit = layout->unit_bytes;
  const size_t outer = layout->outer;
  const size_t in_extent = send_off[n];
  const size_t out_extent = recv_off[n];
  OpPlan plan;
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.inputs = {input};
  plan.outputs = {*out};
  plan.canonical =
      DescribeAlongAxis("variable_all_to_all", axis, input.descriptor());
  for (size_t c : send_counts) plan.agreement_counts.push_back(c);
  for (size_t c : receive_counts) plan.agreement_counts.push_back(c);
  plan.agree_first = true;  // counts that disagree would truncate or hang
  // Where block d leaves from and block s lands, and their sizes.
  const void* send_base = input.data();
  void* recv_base = out->data();
  std::vector<size_t> send_at(n), recv_at(n), send_bytes(n), recv_bytes(n);
  for (size_t p = 0; p < n; ++p) {
    send_bytes[p] = outer * send_counts[p] * unit;
    recv_bytes[p] = outer * receive_counts[p] * unit;
  }
  if (outer == 1) {
    for (size_t p = 0; p < n; ++p) {
      send_at[p] = send_off[p] * unit;
      recv_at[p] = recv_off[p] * unit;
    }
    plan.before = [=](const CudaStream& st) {
      return CopyDeviceToDevice(At(recv_base, recv_at[me]),
                                At(send_base, send_at[me]), send_bytes[me], st);
    };
  } else {
    // Pack the strided blocks, exchange packed blocks, unpack.
    auto packed = Scratch(core, input.byte_size(), stream, name);
    if (!packed.ok()) return packed.status();
    auto landed = Scratch(core, out->byte_size(), stream, name);
    if (!landed.ok()) return landed.status();
    plan.retained.push_back(Retain(*packed));
    plan.retained.push_back(Retain(*landed));
    size_t p_off = 0, l_off = 0;
    for (size_t p = 0; p < n; ++p) {
      send_at[p] = p_off;
      recv_at[p] = l_off;
      p_off += send_bytes[p];
      l_off += recv_bytes[p];
    }
    void* pack = (*packed)->data();
    void* land = (*landed)->data();
    const void* src = input.data();
    void* dst = out->data();
    std::vector<size_t> send_w(n), recv_w(n);
    for (size_t p = 0; p < n; ++p) {
      send_w[p] = send_counts[p] * unit;
      recv_w[p] = receive_counts[p] * unit;
    }
    plan.before = [=](const CudaStream& st) {
      for (size_t d = 0; d < n; ++d) {
        absl::Status copied = Copy2DDeviceToDevice(
            At(pack, send_at[d]), send_w[d], At(src, send_off[d] * unit),
            in_extent * unit, send_w[d], outer, st);
        if (!copied.ok()) return copied;
      }
      return CopyDeviceToDevice(At(land, recv_at[me]), At(pack, send_at[me]),
                                send_bytes[me], st);
    };
    plan.after = [=](const CudaStream& st) {
      for (size_t s = 0; s < n; ++s) {
        absl::Status copied = Copy2DDeviceToDevice(
            At(dst, recv_off[s] * unit), out_extent * unit,
            At(land, recv_at[s]), recv_w[s], recv_w[s], outer, st);
        if (!copied.ok()) return copied;
      }
      return absl::OkStatus();
    };
    send_base = pack;
    recv_base = land;
  }
  bool any = false;
  for (size_t p = 0; p < n; ++p) {
    if (p != me && (send_bytes[p] > 0 || recv_bytes[p] > 0)) any = true;
  }
  if (any) {
    CudaStreamHandle s = stream->get();
    plan.nccl = [=](NcclCommHandle c) {
      return NcclGrouped([&]() -> int {
        for (size_t p = 0; p < n; ++p) {
          if (p == me) continue;
          if (send_bytes[p] > 0) {
            int r = NcclSend(At(send_base, send_at[p]), send_bytes[p],
                             NcclDataType::kInt8, static_cast<int>(p), c, s);
            if (r != kNcclSuccess && r != kNcclInProgress) return r;
          }
          if (recv_bytes[p] > 0) {
            int r = NcclRecv(At(recv_base, recv_at[p]), recv_bytes[p],
                             NcclDataType::kInt8, static_cast<int>(p), c, s);
            if (r != kNcclSuccess && r != kNcclInProgress) return r;
          }
        }
        return kNcclSuccess;
      });
    };
  }
  plan.name = std::move(name);
  return Finish(core.Submit(std::move(plan)), *out);
}

TensorResult SubmitSend(SessionImpl& core, const ScopedComm& on, uint32_t peer,
                        const DeviceTensor& input,
                        const std::shared_ptr<CudaStream>& stream,
                        std::string name) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  absl::Status valid = core.CheckTensor(input, name);
  if (!valid.ok()) {
    return Refusal(core, on, stream, name)
        .Route(comm->local_rank, peer)
        .Refuse(valid);
  }
  OpPlan plan;
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.inputs = {input};
  plan.route = {{comm->local_rank, peer}};
  plan.canonical = DescribeBundle({input.descriptor()});
  const size_t bytes = input.byte_size();
  if (bytes > 0) {
    const void* send = input.data();
    CudaStreamHandle s = stream->get();
    plan.nccl = [=](NcclCommHandle c) {
      return NcclSend(send, bytes, NcclDataType::kInt8, static_cast<int>(peer),
                      c, s);
    };
  }
  return Finish(core.Submit(std::move(plan)), input);
}

TensorResult SubmitReceive(SessionImpl& core, const ScopedComm& on,
                           uint32_t peer, const ValueDescriptor& descriptor,
                           const std::shared_ptr<CudaStream>& stream,
                           std::string name, const DeviceTensor* into) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  auto out = core.OutputFor(descriptor, into, nullptr, false, stream, name);
  if (!out.ok()) {
    return Refusal(core, on, stream, name)
        .Route(peer, comm->local_rank)
        .Refuse(out.status());
  }
  OpPlan plan;
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.outputs = {*out};
  plan.route = {{peer, comm->local_rank}};
  plan.canonical = DescribeBundle({descriptor});
  const size_t bytes = descriptor.byte_size();
  if (bytes > 0) {
    void* recv = out->data();
    CudaStreamHandle s = stream->get();
    plan.nccl = [=](NcclCommHandle c) {
      return NcclRecv(recv, bytes, NcclDataType::kInt8, static_cast<int>(peer),
                      c, s);
    };
  }
  return Finish(core.Submit(std::move(plan)), *out);
}

TensorResult SubmitBroadcast(SessionImpl& core, const ScopedComm& on,
                             const DeviceTensor& input, size_t root,
                             const std::shared_ptr<CudaStream>& stream,
                             std::string name, const DeviceTensor* into) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const Refusal refuse(core, on, stream, name);
  absl::Status valid = core.CheckTensor(input, name);
  if (!valid.ok()) return refuse.Refuse(valid);
  if (root >= comm->members.size()) {
    return refuse.Refuse(absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", name, ": root member index ", root,
        " is outside the group's ", comm->members.size(), " members")));
  }
  auto out = core.OutputFor(input.descriptor(), into, &input, /*in_place=*/true,
                            stream, name);
  if (!out.ok()) return refuse.Refuse(out.status());
  OpPlan plan;
  plan.canonical = DescribeRooted("broadcast", static_cast<uint32_t>(root),
                                  input.descriptor());
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.inputs = {input};
  plan.outputs = {*out};
  const size_t bytes = input.byte_size();
  if (bytes > 0) {
    const bool is_root = comm->local_rank == root;
    const void* send = is_root ? input.data() : out->data();
    void* recv = out->data();
    CudaStreamHandle s = stream->get();
    plan.nccl = [=](NcclCommHandle c) {
      return NcclBroadcast(send, recv, bytes, NcclDataType::kInt8,
                           static_cast<int>(root), c, s);
    };
  }
  return Finish(core.Submit(std::move(plan)), *out);
}

UnitResult SubmitBarrier(SessionImpl& core, const ScopedComm& on,
                         const std::shared_ptr<CudaStream>& stream,
                         std::string name) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  auto flag = Scratch(core, 1, stream, name);
  if (!flag.ok()) return flag.status();
  OpPlan plan;
  plan.canonical = "barrier";
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.retained = {Retain(*flag)};
  void* data = (*flag)->data();
  CudaStreamHandle s = stream->get();
  plan.before = [=](const CudaStream& st) { return FillBytes(data, 0, 1, st); };
  plan.nccl = [=](NcclCommHandle c) {
    return NcclAllReduce(data, data, 1, NcclDataType::kUint8, NcclRedOp::kSum,
                         c, s);
  };
  auto submitted = core.Submit(std::move(plan));
  if (!submitted.ok()) return submitted.status();
  return Submission<Unit, std::shared_ptr<NcclCompletion>>{
      Unit{}, submitted->completion};
}

absl::StatusOr<bool> NcclAgreement::Resolve() const {
  absl::MutexLock lock(&mu_);
  if (resolved_) return value_;
  if (!completion_->IsComplete()) {
    return absl::FailedPreconditionError(
        "nccl backend: agree_success is not complete yet; wait for its "
        "completion before resolving it");
  }
  absl::Status status = completion_->op()->status();
  if (!status.ok()) {
    resolved_ = true;
    value_ = status;
    return value_;
  }
  auto stream = CudaStream::ForTransfers(flag_->device());
  if (!stream.ok()) return stream.status();
  uint8_t flag = 0;
  absl::Status copied = CopyDeviceToHost(&flag, flag_->data(), 1, **stream);
  if (!copied.ok()) return copied;
  resolved_ = true;
  value_ = flag != 0;
  return value_;
}

absl::StatusOr<Submission<std::shared_ptr<const Agreement>,
                          std::shared_ptr<NcclCompletion>>>
SubmitAgreeSuccess(SessionImpl& core, const ScopedComm& on, bool success,
                   const std::shared_ptr<CudaStream>& stream,
                   std::string name) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  auto flag = Scratch(core, 1, stream, name);
  if (!flag.ok()) return flag.status();
  OpPlan plan;
  plan.canonical = "agree_success";
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.retained = {Retain(*flag)};
  void* data = (*flag)->data();
  CudaStreamHandle s = stream->get();
  const int value = success ? 1 : 0;
  plan.before = [=](const CudaStream& st) {
    return FillBytes(data, value, 1, st);
  };
  // Logical AND over members: the minimum of 0/1 flags.
  plan.nccl = [=](NcclCommHandle c) {
    return NcclAllReduce(data, data, 1, NcclDataType::kUint8, NcclRedOp::kMin,
                         c, s);
  };
  auto submitted = core.Submit(std::move(plan));
  if (!submitted.ok()) return submitted.status();
  std::shared_ptr<const Agreement> agreement =
      std::make_shared<NcclAgreement>(*flag, submitted->completion);
  return Submission<std::shared_ptr<const Agreement>,
                    std::shared_ptr<NcclCompletion>>{std::move(agreement),
                                                     submitted->completion};
}

absl::StatusOr<
    Submission<std::vector<DeviceTensor>, std::shared_ptr<NcclCompletion>>>
SubmitBundle(SessionImpl& core, const ScopedComm& on, const BundleEnd& end,
             uint32_t source, uint32_t destination,
             const std::shared_ptr<CudaStream>& stream, std::string name) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const uint32_t me = comm->local_rank;
  if (absl::Status s = CheckRoute(kBackend, name, on.scope, comm->members,
                                  source, destination, me);
      !s.ok()) {
    return s;
  }
  const bool sending = me == source;
  const bool into = !sending && !end.receive_into.empty();
  Refusal refuse(core, on, stream, name);
  refuse.Route(source, destination);
  if (absl::Status s = CheckBundleSize(
          kBackend, name, sending ? end.send.size() : end.receive.size());
      !s.ok()) {
    return refuse.Refuse(s);
  }
  if (into) {
    if (absl::Status s = CheckBundleOutputs(kBackend, name, end.receive_into,
                                            end.receive.size());
        !s.ok()) {
      return refuse.Refuse(s);
    }
  }
  // The tensors this member hands to NCCL: sent, or received into.
  const absl::Span<const DeviceTensor> given =
      sending ? end.send : end.receive_into;
  for (const DeviceTensor& t : given) {
    absl::Status valid = core.CheckTensor(t, name);
    if (!valid.ok()) return refuse.Refuse(valid);
  }
  OpPlan plan;
  plan.name = name;  // `refuse` still points at `name`
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  plan.route = {{source, destination}};
  std::vector<ValueDescriptor> described;
  if (sending) {
    for (const DeviceTensor& t : end.send) described.push_back(t.descriptor());
  } else {
    described.assign(end.receive.begin(), end.receive.end());
  }
  plan.canonical = DescribeBundle(described);
  std::vector<DeviceTensor> outputs;
  std::vector<std::pair<void*, size_t>> buffers;
  if (sending) {
    plan.inputs.assign(end.send.begin(), end.send.end());
    outputs.assign(end.send.begin(), end.send.end());
    for (const DeviceTensor& t : end.send)
      buffers.emplace_back(t.data(), t.byte_size());
  } else if (into) {
    // The caller's tensors are the outputs (CheckBundleOutputs above).
    plan.outputs.assign(end.receive_into.begin(), end.receive_into.end());
    outputs.assign(end.receive_into.begin(), end.receive_into.end());
    for (const DeviceTensor& t : end.receive_into)
      buffers.emplace_back(t.data(), t.byte_size());
  } else {
    for (const ValueDescriptor& d : end.receive) {
      auto out = core.AllocateOutput(d, stream, plan.name);
      if (!out.ok()) return refuse.Refuse(out.status());
      plan.outputs.push_back(*out);
      buffers.emplace_back(out->data(), out->byte_size());
      outputs.push_back(*std::move(out));
    }
  }
  // Empty values move no bytes, but the route's agreement record still
  // travels (SessionImpl::Submit): the transfer pairs with its peer's and
  // takes its number on the route like any other.
  bool any = false;
  for (const auto& b : buffers) any = any || b.second > 0;
  if (any) {
    const int peer = static_cast<int>(sending ? destination : source);
    CudaStreamHandle s = stream->get();
    plan.nccl = [=](NcclCommHandle c) {
      return NcclGrouped([&]() -> int {
        for (const auto& [data, bytes] : buffers) {
          if (bytes == 0) continue;
          int r = sending
                      ? NcclSend(data, bytes, NcclDataType::kInt8, peer, c, s)
                      : NcclRecv(data, bytes, NcclDataType::kInt8, peer, c, s);
          if (r != kNcclSuccess && r != kNcclInProgress) return r;
        }
        return kNcclSuccess;
      });
    };
  }
  auto submitted = core.Submit(std::move(plan));
  if (!submitted.ok()) return submitted.status();
  for (auto& t : outputs) t = t.WithReady(submitted->event);
  return Submission<std::vector<DeviceTensor>, std::shared_ptr<NcclCompletion>>{
      std::move(outputs), submitted->completion};
}

absl::StatusOr<
    Submission<std::vector<DeviceTensor>, std::shared_ptr<NcclCompletion>>>
SubmitBatch(SessionImpl& core, const ScopedComm& on,
            absl::Span<const PeerValue<DeviceTensor>> sends,
            absl::Span<const PeerValue<DeviceTensor>> receives,
            const std::shared_ptr<CudaStream>& stream, std::string name) {
  const std::shared_ptr<CommEntry>& comm = on.comm;
  const uint32_t n = static_cast<uint32_t>(comm->members.size());
  const uint32_t me = comm->local_rank;
  // Its peers first: a batch whose peers are wrong names no one to tell.
  if (absl::Status s =
          CheckBatchPeers(sends, receives, n, me, on.scope, kBackend, name);
      !s.ok()) {
    return s;
  }
  OpPlan plan;
  for (const auto* list : {&receives, &sends}) {
    const bool sending = list == &sends;
    for (size_t i = 0; i < list->size(); ++i) {
      const PeerValue<DeviceTensor>& t = (*list)[i];
      const std::string canonical = DescribeBundle({t.value.descriptor()});
      plan.batch.push_back({static_cast<uint32_t>(t.peer), sending,
                            OperationFingerprint(canonical), canonical});
      (sending ? plan.inputs : plan.outputs).push_back(t.value);
    }
  }
  Refusal refuse(core, on, stream, name);
  refuse.Batch(&plan.batch);
  for (const auto* list : {&receives, &sends}) {
    for (const PeerValue<DeviceTensor>& t : *list) {
      absl::Status valid = core.CheckTensor(t.value, name);
      if (!valid.ok()) return refuse.Refuse(valid);
    }
  }
  // Only once every tensor has a buffer.
  if (absl::Status s = CheckBatchBuffers(sends, receives, kBackend, name);
      !s.ok()) {
    return refuse.Refuse(s);
  }
  plan.name = std::move(name);
  plan.comm = comm;
  plan.scope = on.scope;
  plan.stream = stream;
  const auto& first = plan.batch.front();
  plan.route = first.send ? std::make_pair(me, first.peer)
                          : std::make_pair(first.peer, me);
  plan.canonical = first.canonical;
  struct Posted {
    void* data;
    size_t bytes;
    int peer;
    bool send;
    size_t entry;  // in plan.batch
  };
  std::vector<Posted> posted;
  size_t entry = 0;
  for (const auto* list : {&receives, &sends}) {
    for (const PeerValue<DeviceTensor>& t : *list) {
      if (t.value.byte_size() != 0) {
        posted.push_back({t.value.data(), t.value.byte_size(),
                          static_cast<int>(t.peer), list == &sends, entry});
      }
      ++entry;
    }
  }
  plan.refused_transfers = std::make_shared<std::vector<bool>>();
  if (!posted.empty()) {
    CudaStreamHandle s = stream->get();
    plan.nccl = [posted, s,
                 refused = plan.refused_transfers](NcclCommHandle c) {
      return NcclGrouped([&]() -> int {
        for (const Posted& p : posted) {
          // Left out on both ends when they disagree (verify_agreement).
          if (p.entry < refused->size() && (*refused)[p.entry]) continue;
          int r = p.send ? NcclSend(p.data, p.bytes, NcclDataType::kInt8,
                                    p.peer, c, s)
                         : NcclRecv(p.data, p.bytes, NcclDataType::kInt8,
                                    p.peer, c, s);
          if (r != kNcclSuccess && r != kNcclInProgress) return r;
        }
        return kNcclSuccess;
      });
    };
  }
  std::vector<DeviceTensor> outputs(plan.outputs.begin(), plan.outputs.end());
  auto submitted = core.Submit(std::move(plan));
  if (!submitted.ok()) return submitted.status();
  for (auto& t : outputs) t = t.WithReady(submitted->event);
  return Submission<std::vector<DeviceTensor>, std::shared_ptr<NcclCompletion>>{
      std::move(outputs), submitted->completion};
}

UnitResult SubmitLocal(absl::Span<const DeviceTensor* const> values,
                       const std::shared_ptr<CudaStream>& stream) {
  if (stream == nullptr) {
    return absl::InvalidArgumentError(
        "nccl backend: submit_local_dependencies needs an executor stream");
  }
  std::vector<std::shared_ptr<const void>> retained = {Retain(stream)};
  for (const DeviceTensor* value : values) {
    if (value == nullptr || value->buffer() == nullptr) {
      return absl::InvalidArgumentError(
          "nccl backend: submit_local_dependencies got a null tensor");
    }
    if (value->device() != stream->device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl backend: submit_local_dependencies: tensor ", value->ToString(),
          " is not on the executor's device cuda:", stream->device()));
    }
  }
  if (absl::Status s =
          CheckNotCapturing(stream->get(), stream->device(),
                            "nccl backend: submit_local_dependencies: the "
                            "executor's stream");
      !s.ok()) {
    return s;
  }
  auto event = CudaEvent::Create(stream->device());
  if (!event.ok()) return event.status();
  for (const DeviceTensor* value : values) {
    retained.push_back(value->buffer());
    if (value->ready() != nullptr) {
      retained.push_back(value->ready());
      absl::Status s = StreamWaitEvent(*stream, *value->ready());
      if (!s.ok()) return s;
    }
  }
  absl::Status recorded = (*event)->Record(*stream);
  if (!recorded.ok()) return recorded;
  auto op =
      EventOperation("submit_local_dependencies", *event, std::move(retained));
  return Submission<Unit, std::shared_ptr<NcclCompletion>>{
      Unit{}, MakeNcclCompletion(std::move(op), LocalOpOwner())};
}

}  // namespace rankd::dataplane::nccl::internal
