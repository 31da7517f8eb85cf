// Formats lists of ranks for error messages: "3", "0-3, 6", "none".
// Depends only on the standard library and absl.
#ifndef RANKD_DAEMON_RANK_LIST_H_
#define RANKD_DAEMON_RANK_LIST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rankd {

// Sorts and compresses runs: {7, 0, 1, 2, 3, 9} -> "0-3, 7, 9".
// Lists longer than `max_items` items are cut with ", ... (N in all)".
std::string FormatRankList(std::vector<uint32_t> ranks, size_t max_items = 32);

}  // namespace rankd

#endif  // RANKD_DAEMON_RANK_LIST_H_
