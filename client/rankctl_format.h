// client/rankctl_format.h: how rankctl prints daemon answers.
//
// Human-readable output is aligned plain-text tables (columns separated by
// two spaces, no trailing blanks, "-" for empty cells, so `awk` and
// `column` work on it); --json output is the proto's canonical JSON with
// every field printed. Separate from rankctl.cc so that it can be tested.
//
// Depends only on the generated rankd.v1 messages, protobuf and abseil.
// Pure functions; thread-safe.

#ifndef RANKD_CLIENT_RANKCTL_FORMAT_H_
#define RANKD_CLIENT_RANKCTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

// `text` with every control character replaced by spaces: the C0 ones
// (below 0x20), DEL and the C1 ones as UTF-8 encodes them (U+0080-U+009F),
// so what a daemon or a peer sent, printed to an operator's (ASCII or
// UTF-8) terminal, carries no escape sequence. Other bytes are kept.
std::string TerminalSafe(absl::string_view text);

// Left-aligned table: `header` then `rows`, each line ending in '\n'.
// Columns are as wide as their widest cell and separated by two spaces; the
// last column is not padded. Empty cells print as "-"; tabs, newlines and
// other control characters in cells print as spaces. Rows shorter than the
// header are padded with "-"; longer rows are truncated to the header.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// "name  value" lines with the names padded to one width; empty values
// print as "-".
std::string FormatFields(
    const std::vector<std::pair<std::string, std::string>>& fields);

// Ascending rank list with runs collapsed: {0,1,2,3,5,7,8} -> "0-3,5,7-8".
// Input order is kept when it is not ascending (group member order
// matters): {3,1,2} -> "3,1-2". Empty -> "-".
std::string FormatRankList(
    const google::protobuf::RepeatedField<uint32_t>& ranks);

// Milliseconds as a short duration ("350ms", "1.5s", "2h3m"); "-" when
// negative (unknown).
std::string FormatMillis(int64_t ms);

// "cuda:0", "cpu", "cuda:1 (GPU-1234...)"; "-" when no kind is set.
std::string FormatDevice(const v1::DeviceInfo& device);

// Enum value name without its type prefix, e.g. "READY" for
// JOB_STATE_READY; "<PREFIX>(<n>)" for values this build does not know.
std::string JobStateName(v1::JobState state);
std::string MemberStateName(v1::MemberState state);
std::string NodeStateName(v1::NodeState state);
std::string GroupKindName(v1::GroupKind kind);
std::string EventKindName(v1::EventKind kind);

// `rankctl status`: one field per line (job, state, counts, coordinator).
std::string FormatJobStatus(const v1::JobStatus& job);

// `rankctl topology`: job summary, then a NODE table and a GROUP table.
std::string FormatTopology(const v1::Topology& topology);

// `rankctl members`: the member table (RANK NODE LOCAL STATE ROUND PID
// DEVICE DETAIL, by rank), a blank line, then the node table (NODE STATE
// HOST ADDRESS HEARTBEAT_AGE DETAIL, by node).
std::string FormatMembers(const v1::MemberList& members);

// `rankctl watch`: one line per event, without the trailing newline:
// "#<seq> <UTC time> <KIND> [node <n>] [ranks <list>] [<message>]".
std::string FormatEvent(const v1::JobEvent& event);

// A key-value broker value: as is when it is printable ASCII (space to
// '~', tab), otherwise "0x" followed by lowercase hex of every byte.
std::string FormatKvValue(absl::string_view value);

// Canonical proto3 JSON with every field printed (defaults included),
// indented when `multiline`, else on one line. Errors come from protobuf.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   bool multiline);

}  // namespace rankd

#endif  // RANKD_CLIENT_RANKCTL_FORMAT_H_
