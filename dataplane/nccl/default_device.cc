#include "dataplane/nccl/default_device.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane::nccl {

absl::StatusOr<int> DefaultDevice(uint32_t local_rank, uint32_t ranks_on_node,
                                  uint32_t world_size, int visible_devices) {
  if (visible_devices >= 1 &&
      static_cast<uint32_t>(visible_devices) >= ranks_on_node) {
    return static_cast<int>(local_rank);
  }
  if (visible_devices == 1) return 0;
  return absl::FailedPreconditionError(absl::StrCat(
      "nccl backend: ", ranks_on_node, " ranks run on this node (world size ",
      world_size, ") but this process sees ", visible_devices, " GPU",
      visible_devices == 1 ? "" : "s",
      "; NCCL needs one GPU per rank, and the default device (local rank ",
      local_rank,
      ") is chosen only when each process sees every GPU of its node or "
      "exactly one: run at most ",
      visible_devices, " ranks per node, give each rank process one GPU ",
      "(CUDA_VISIBLE_DEVICES), make all of the node's GPUs visible, or name ",
      "the device (NcclSessionOptions::device)"));
}

}  // namespace rankd::dataplane::nccl
