// A point-to-point route: the rules a caller's route obeys whatever the
// backend (GlooBackend::Route, NcclBackend::Route and the session's
// send_receive), checked here so that both backends refuse the same route
// with the same words. A route joins two different members of one scope,
// and this member is one of its ends. Pure functions; thread-safe.
// Depends on common/rank_list.h and absl.
#ifndef RANKD_DATAPLANE_ROUTE_H_
#define RANKD_DATAPLANE_ROUTE_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rankd::dataplane {

// OK when member indices `source` and `destination` of `scope` ("world",
// "group 3"), whose members have the world ranks `member_ranks` in member
// order, are two different members and this member (index `me`) is one of
// them. Otherwise InvalidArgument "<backend> backend: <operation>: route
// S -> D on <scope>: " followed by the first rule broken:
//   "member X is outside the scope's N members"
//   "the source and the destination are the same member (rank R)"
//   "this member (M, rank R) is neither end".
absl::Status CheckRoute(absl::string_view backend, absl::string_view operation,
                        absl::string_view scope,
                        absl::Span<const uint32_t> member_ranks, size_t source,
                        size_t destination, size_t me);

// A route named by its ends' world ranks (Gloo's Route): the ends' member
// indices {source, destination} when both ranks are members of `scope` and
// CheckRoute accepts them. Otherwise InvalidArgument, "<backend> backend:
// <operation>: route rank S -> rank D on <scope>: rank X is not a member
// (its members: ranks ...)" for a rank outside the scope, else
// CheckRoute's refusal, naming the route as the caller did: "route rank S
// -> rank D on <scope>: ...".
absl::StatusOr<std::pair<size_t, size_t>> RouteBetweenRanks(
    absl::string_view backend, absl::string_view operation,
    absl::string_view scope, absl::Span<const uint32_t> member_ranks,
    uint32_t source_rank, uint32_t destination_rank, size_t me);

// OK when this member (index `me`) is the destination of route `source` ->
// `destination` of `scope` (receive_bundle, receive_bundle_into);
// otherwise InvalidArgument "<backend> backend: <operation>: route S -> D on
// <scope>: this member (M, rank R) is not its destination". The route
// itself passed CheckRoute.
absl::Status CheckRouteDestination(absl::string_view backend,
                                   absl::string_view operation,
                                   absl::string_view scope,
                                   absl::Span<const uint32_t> member_ranks,
                                   size_t source, size_t destination,
                                   size_t me);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_ROUTE_H_
