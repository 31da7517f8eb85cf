#include "dataplane/nccl/nccl_group.h"

#include <utility>

#include "dataplane/nccl/internal/session_impl.h"

namespace rankd::dataplane::nccl {

NcclGroup::NcclGroup(std::shared_ptr<internal::SessionImpl> impl,
                     std::shared_ptr<internal::CommEntry> comm,
                     CollectiveGroupId id, bool world)
    : impl_(std::move(impl)), comm_(std::move(comm)), id_(id), world_(world) {}
const std::vector<uint32_t>& NcclGroup::members() const {
  return comm_->members;
}
uint32_t NcclGroup::local_rank() const { return comm_->local_rank; }
uint32_t NcclGroup::size() const {
  return static_cast<uint32_t>(comm_->members.size());
}
const std::string& NcclGroup::communicator_name() const { return comm_->name; }

}  // namespace rankd::dataplane::nccl
