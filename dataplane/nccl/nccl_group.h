// NcclGroup and NcclRoute: the NCCL backend's CommunicationGroup and
// CommunicationRoute (as gloo_group.h holds Gloo's). An NcclGroup is one
// collective group this rank belongs to (the world, or a group of the
// session descriptor) realized as an NCCL communicator; an NcclRoute is a
// directed source -> destination pair of member indices within one group,
// the unit of ordered send/receive bundles. Both are created by the backend
// (NcclBackend::Group / Route) and are only valid with the session that
// made them: they hold its state (internal::SessionImpl, only forward
// declared here), and after the session is destroyed they refuse new work.
// Depends on dataplane/collective_group.h; the session state is private to
// dataplane/nccl.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_GROUP_H_
#define RANKD_DATAPLANE_NCCL_NCCL_GROUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/collective_group.h"

namespace rankd::dataplane::nccl {

class NcclBackend;

namespace internal {
class SessionImpl;  // internal/session_impl.h: private to this package
struct CommEntry;
}  // namespace internal

// One collective group (or the world) of a session, realized as an NCCL
// communicator.
class NcclGroup {
 public:
  // kWorldGroupId for the world.
  CollectiveGroupId id() const { return id_; }
  bool is_world() const { return world_; }
  // World ranks, in communicator order.
  const std::vector<uint32_t>& members() const;
  // This rank's index in members().
  uint32_t local_rank() const;
  uint32_t size() const;
  // The communicator's own name, as NCCL's init, split and abort messages
  // give it ("world", "g3-m2-<hash>", ...); messages about an operation name
  // its scope instead ("group 3").
  const std::string& communicator_name() const;

 private:
  friend class NcclBackend;
  NcclGroup(std::shared_ptr<internal::SessionImpl> impl,
            std::shared_ptr<internal::CommEntry> comm, CollectiveGroupId id,
            bool world);
  std::shared_ptr<internal::SessionImpl> impl_;
  std::shared_ptr<internal::CommEntry> comm_;
  CollectiveGroupId id_;
  bool world_;
};

// A directed route between two members of a group (member indices).
class NcclRoute {
 public:
  const NcclGroup& group() const { return group_; }
  uint32_t source() const { return source_; }
  uint32_t destination() const { return destination_; }

 private:
  friend class NcclBackend;
  NcclRoute(NcclGroup group, uint32_t source, uint32_t destination)
      : group_(std::move(group)), source_(source), destination_(destination) {}
  NcclGroup group_;
  uint32_t source_;
  uint32_t destination_;
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_GROUP_H_
