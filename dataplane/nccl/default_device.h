// DefaultDevice: the CUDA device a rank uses when its NCCL session names
// none (NcclSessionOptions::device = -1), from what torchrun users expect
// (docs/nccl.md, "The default device"). Pure: no CUDA call, the caller
// passes the visible device count. Depends on absl only.
#ifndef RANKD_DATAPLANE_NCCL_DEFAULT_DEVICE_H_
#define RANKD_DATAPLANE_NCCL_DEFAULT_DEVICE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace rankd::dataplane::nccl {

// The visible device count decides:
//   - The process sees at least as many devices as its node runs ranks
//     (`ranks_on_node`): device `local_rank`, as
//     torch.cuda.set_device(LOCAL_RANK) picks it.
//   - It sees exactly one: device 0. The launcher gave each rank process a
//     GPU of its own (CUDA_VISIBLE_DEVICES per process, one GPU per
//     container), so every rank's device 0 is another GPU. (Where several
//     ranks see the same single GPU instead, NCCL refuses to initialize:
//     "Duplicate GPU detected".)
//   - Otherwise (none, or more than one but fewer than the node's ranks)
//     FailedPrecondition naming the counts and the ways out: the ranks
//     would share GPUs, and local_rank % visible, a guess, would put two
//     ranks on one GPU whenever their processes see the same devices.
absl::StatusOr<int> DefaultDevice(uint32_t local_rank, uint32_t ranks_on_node,
                                  uint32_t world_size, int visible_devices);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_DEFAULT_DEVICE_H_
