// Fuzzes rankctl's formatting (client/rankctl_format.h) with whatever a
// daemon could send back: byte 0 picks the formatter, the rest is parsed
// as its message (or used as raw text), and the formatter's promises are
// checked: a key-value value prints as printable ASCII, an event as one
// line, a table as one line per row plus the header.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/rankctl_format.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/common.pb.h"

namespace {

void Require(bool promise, const char* what) {
  if (promise) return;
  std::fprintf(stderr, "rankctl_format_fuzzer: broken promise: %s\n", what);
  std::abort();
}

template <typename Message, typename Format>
int FormatMessage(absl::string_view bytes, Format format) {
  Message message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return -1;
  }
  std::string text = format(message);
  (void)rankd::ToJson(message, /*multiline=*/true);
  (void)text;
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return -1;
  absl::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      return FormatMessage<rankd::v1::JobStatus>(bytes, rankd::FormatJobStatus);
    case 1:
      return FormatMessage<rankd::v1::Topology>(bytes, rankd::FormatTopology);
    case 2:
      return FormatMessage<rankd::v1::MemberList>(bytes, rankd::FormatMembers);
    case 3:
      return FormatMessage<rankd::v1::JobEvent>(
          bytes, [](const rankd::v1::JobEvent& event) {
            std::string line = rankd::FormatEvent(event);
            Require(line.find('\n') == std::string::npos,
                    "FormatEvent printed more than one line");
            return line;
          });
    case 4: {
      std::string value = rankd::FormatKvValue(bytes);
      for (char c : value) {
        Require((c >= ' ' && c <= '~') || c == '\t',
                "FormatKvValue printed a non-printable byte");
      }
      return 0;
    }
    default: {
      // Lines are rows, tabs separate cells; the first line is the header.
      std::vector<std::vector<std::string>> rows;
      for (absl::string_view line : absl::StrSplit(bytes, '\n')) {
        rows.push_back(absl::StrSplit(line, '\t'));
      }
      std::vector<std::string> header = rows.front();
      rows.erase(rows.begin());
      std::string table = rankd::FormatTable(header, rows);
      size_t lines = 0;
      for (char c : table) lines += c == '\n';
      Require(lines == rows.size() + 1,
              "FormatTable did not print one line per row plus the header");
      return 0;
    }
  }
}
