// Formats lists of ranks for error messages: "3", "0-3, 6", "none"; with
// the noun: "rank 3", "ranks 0-3, 6". The one wording of rank lists for the
// daemon, the client and the data plane. Depends only on the standard
// library and absl.
#ifndef RANKD_COMMON_RANK_LIST_H_
#define RANKD_COMMON_RANK_LIST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rankd {

// Sorts and compresses runs: {7, 0, 1, 2, 3, 9} -> "0-3, 7, 9".
// Lists longer than `max_items` items are cut with ", ... (N in all)".
std::string FormatRankList(std::vector<uint32_t> ranks, size_t max_items = 32);

// FormatRankList with its noun: "rank 3" for one rank, "ranks 0-3, 7" for
// several, "no rank" for none.
std::string NameRanks(std::vector<uint32_t> ranks);

}  // namespace rankd

#endif  // RANKD_COMMON_RANK_LIST_H_
