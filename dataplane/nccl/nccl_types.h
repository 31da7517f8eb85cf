// Pure helpers of the NCCL backend (no CUDA or NCCL call), unit-tested on
// machines without a GPU:
//   - how a TensorDtype is summed by NCCL (the ncclDataType_t and how many
//     NCCL elements one value element is);
//   - the unique-id plan of a communicator (how many ncclUniqueIds, which
//     communicator rank creates each one) and the key-value broker key
//     names and value encoding used to hand them out;
//   - session tag validation;
//   - the default device of a rank (DefaultDevice);
//   - which status code each NCCL result becomes (NcclResultCodes).
// Depends on dataplane/types.h and absl only.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_TYPES_H_
#define RANKD_DATAPLANE_NCCL_NCCL_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dataplane/dtype.h"

namespace rankd::dataplane::nccl {

// NCCL_VERSION(X, Y, Z) of nccl.h.
constexpr int NcclVersionCode(int major, int minor, int patch) {
  return (major <= 2 && minor <= 8) ? major * 1000 + minor * 100 + patch
                                    : major * 10000 + minor * 100 + patch;
}
// ncclBfloat16 exists from NCCL 2.10.
inline constexpr int kNcclBf16Version = NcclVersionCode(2, 10, 0);
// ncclCommInitRankScalable exists from NCCL 2.23.4.
inline constexpr int kNcclScalableInitVersion = NcclVersionCode(2, 23, 4);

// The values of ncclDataType_t used by rankd (nccl.h's; passed to the
// NCCL that internal/native_library.h loads).
enum class NcclDataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
// "ncclFloat32", ...
const char* NcclDataTypeName(NcclDataType type);

// How NCCL sums values of one TensorDtype: `lanes` NCCL elements of `type`
// per value element (complex64 is summed as 2 x f32: real and imaginary
// parts add independently).
struct NcclSumType {
  NcclDataType type;
  size_t lanes;
};
// The errors of the shared table (dataplane/sum_dtypes.h): InvalidArgument
// for bool (no sum is defined); Unimplemented naming the nccl backend and
// the dtype for i16/u16 (NCCL has no 16-bit integer type) and for bf16
// before NCCL 2.10.
// `nccl_version` is the NCCL version code in use.
absl::StatusOr<NcclSumType> SumTypeFor(TensorDtype dtype, int nccl_version);

// Ranks served by one ncclUniqueId when a communicator is initialized with
// ncclCommInitRankScalable.
inline constexpr uint32_t kDefaultRanksPerUniqueId = 128;

// Which ncclUniqueIds a communicator of `nranks` needs and which
// communicator rank creates (and publishes) each one. With scalable init,
// one id per `ranks_per_id` ranks (rounded up); the roots are spread the way
// NCCL assigns ranks to roots (root i serves nranks/count ranks, one more
// for the first nranks%count), and root i is the first rank it serves.
// Without scalable init (or nranks <= ranks_per_id): one id, created by
// rank 0.
struct UniqueIdPlan {
  uint32_t nranks = 0;
  std::vector<uint32_t> roots;  // roots[i] creates id i
  uint32_t count() const { return static_cast<uint32_t>(roots.size()); }
  bool scalable() const { return roots.size() > 1; }
};
UniqueIdPlan PlanUniqueIds(uint32_t nranks, uint32_t ranks_per_id,
                           bool scalable_available);

// A stable name for the communicator of `members` (world ranks, in
// communicator order): "world" when members are 0..world_size-1 in order,
// otherwise "m<size>-<16 hex digits of a FNV-1a hash of the members>".
std::string CommName(absl::Span<const uint32_t> members, uint32_t world_size);

// Key of unique id `index` of `count` for communicator `comm_name` of the
// session tagged `tag`, in the job namespace `ns`:
//   "<ns>/nccl/<tag>/<comm_name>/uid/<index>of<count>"
// (no leading "<ns>/" when ns is empty).
std::string UniqueIdKey(absl::string_view ns, absl::string_view tag,
                        absl::string_view comm_name, uint32_t index,
                        uint32_t count);

// Bytes in an ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kNcclUniqueIdBytes = 128;
// Returns kNcclUniqueIdBytes raw bytes (NewNcclUniqueId in production;
// NcclSessionOptions::unique_id_generator replaces it in tests).
using UniqueIdGenerator = std::function<absl::StatusOr<std::string>()>;
// "nccl-uid-v1:" + lowercase hex of the 128 bytes.
std::string EncodeUniqueId(absl::string_view id_bytes);
// InvalidArgument naming the key for anything else.
absl::StatusOr<std::string> DecodeUniqueId(absl::string_view value,
                                           absl::string_view key);

// The CUDA device a rank uses when its session names none
// (NcclSessionOptions::device = -1), from what torchrun users expect: the
// visible device count decides (docs/nccl.md, "The default device").
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

// How each ncclResult_t becomes an absl::StatusCode. An NCCL error comes
// after rankd's own validation, so it poisons the session: none becomes
// InvalidArgument, which the contract keeps for a refusal that leaves the
// session usable (docs/contract.md).
struct NcclResultCode {
  int result;        // the ncclResult_t value
  const char* name;  // its name in nccl.h
  absl::StatusCode code;
  const char* meaning;  // what the code says about it, for docs and errors
};
// Every ncclResult_t but ncclSuccess, in value order: ncclUnhandledCudaError
// Internal, ncclSystemError Unavailable, ncclInternalError Internal,
// ncclInvalidArgument Internal, ncclInvalidUsage FailedPrecondition,
// ncclRemoteError Aborted, ncclInProgress (as a final result) Internal.
absl::Span<const NcclResultCode> NcclResultCodes();
// The entry of `result`; for a value the table does not know, one named
// "unknown ncclResult_t" with code Unknown.
const NcclResultCode& NcclResultCodeOf(int result);

// Session tags name one NcclSession inside a job incarnation (keys of two
// sessions must not collide): 1..64 characters of [A-Za-z0-9_.-].
absl::Status ValidateSessionTag(absl::string_view tag);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_TYPES_H_
