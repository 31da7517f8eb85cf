// LinePrefixer: puts a label ("[rank 3] ") before every line of one output
// stream, for rankrun's --prefix_output (the default). Bytes are fed as they
// arrive from a pipe, in pieces of any size; a line is released once its
// newline has arrived, so lines of different processes never mix. A line longer
// than kMaxLineBytes is released in pieces of that size, each labelled. Flush()
// releases a last line that has no newline (adding one).
//
// Pure and not thread-safe. Depends on absl.
#ifndef RANKD_LAUNCHER_LINE_PREFIXER_H_
#define RANKD_LAUNCHER_LINE_PREFIXER_H_

#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace rankd::launcher {

class LinePrefixer {
 public:
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  explicit LinePrefixer(std::string label) : label_(std::move(label)) {}

  // Takes `data` and returns the complete lines it finishes, labelled.
  std::string Feed(absl::string_view data);
  // Returns the unfinished line, labelled and with a newline; "" if none.
  std::string Flush();

 private:
  std::string label_;
  std::string pending_;
};

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_LINE_PREFIXER_H_
