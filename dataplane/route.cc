#include "dataplane/route.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rank_list.h"

namespace rankd::dataplane {

namespace {

// CheckRoute's rules, its refusals naming the route as `route` ("route
// S -> D" by member indices, "route rank S -> rank D" by world ranks).
absl::Status CheckRouteNamed(absl::string_view backend,
                             absl::string_view operation,
                             absl::string_view scope, absl::string_view route,
                             absl::Span<const uint32_t> member_ranks,
                             size_t source, size_t destination, size_t me) {
  auto refuse = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " backend: ", operation, ": ", route, " on ",
                     scope, ": ", parts...));
  };
  const size_t members = member_ranks.size();
  for (size_t end : {source, destination}) {
    if (end >= members) {
      return refuse("member ", end, " is outside the scope's ", members,
                    " members");
    }
  }
  if (source == destination) {
    return refuse("the source and the destination are the same member (rank ",
                  member_ranks[source], ")");
  }
  if (me != source && me != destination) {
    return refuse("this member (", me, ", rank ",
                  me < members ? absl::StrCat(member_ranks[me]) : "?",
                  ") is neither end");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRoute(absl::string_view backend, absl::string_view operation,
                        absl::string_view scope,
                        absl::Span<const uint32_t> member_ranks, size_t source,
                        size_t destination, size_t me) {
  return CheckRouteNamed(backend, operation, scope,
                         absl::StrCat("route ", source, " -> ", destination),
                         member_ranks, source, destination, me);
}

absl::StatusOr<std::pair<size_t, size_t>> RouteBetweenRanks(
    absl::string_view backend, absl::string_view operation,
    absl::string_view scope, absl::Span<const uint32_t> member_ranks,
    uint32_t source_rank, uint32_t destination_rank, size_t me) {
  size_t ends[2];
  const uint32_t ranks[2] = {source_rank, destination_rank};
  for (int e = 0; e < 2; ++e) {
    ends[e] = member_ranks.size();
    for (size_t i = 0; i < member_ranks.size(); ++i) {
      if (member_ranks[i] == ranks[e]) ends[e] = i;
    }
    if (ends[e] == member_ranks.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          backend, " backend: ", operation, ": route rank ", source_rank,
          " -> rank ", destination_rank, " on ", scope, ": rank ", ranks[e],
          " is not a member (its members: ",
          NameRanks(
              std::vector<uint32_t>(member_ranks.begin(), member_ranks.end())),
          ")"));
    }
  }
  if (absl::Status s =
          CheckRouteNamed(backend, operation, scope,
                          absl::StrCat("route rank ", source_rank, " -> rank ",
                                       destination_rank),
                          member_ranks, ends[0], ends[1], me);
      !s.ok()) {
    return s;
  }
  return std::make_pair(ends[0], ends[1]);
}

absl::Status CheckRouteDestination(absl::string_view backend,
                                   absl::string_view operation,
                                   absl::string_view scope,
                                   absl::Span<const uint32_t> member_ranks,
                                   size_t source, size_t destination,
                                   size_t me) {
  if (me == destination) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      backend, " backend: ", operation, ": route ", source, " -> ", destination,
      " on ", scope, ": this member (", me, ", rank ",
      me < member_ranks.size() ? absl::StrCat(member_ranks[me]) : "?",
      ") is not its destination"));
}

}  // namespace rankd::dataplane
