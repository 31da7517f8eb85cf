// Fuzzes the key-value channel's frames (common/kv_frame.h) with whatever
// a rank or a daemon could send: the input is fed to a KvFrameReader in
// chunks whose sizes the input's first byte picks, and every frame's
// payload is also decoded as a reply. Checked promises: no crash, a frame
// never exceeds kMaxKvFramePayloadBytes, an error is InvalidArgument and
// ends the stream, a decoded reply's message fits its bound.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "common/kv_frame.h"

namespace {

void Require(bool promise, const char* what) {
  if (promise) return;
  std::fprintf(stderr, "kv_frame_fuzzer: broken promise: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  absl::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  rankd::KvFrameReader reader;
  for (size_t at = 0; at < input.size(); at += chunk) {
    absl::string_view piece = input.substr(at, chunk);
    reader.Append(piece.data(), piece.size());
    while (true) {
      auto frame = reader.Next();
      if (!frame.ok()) {
        Require(frame.status().code() == absl::StatusCode::kInvalidArgument,
                "a bad frame is InvalidArgument");
        return 0;
      }
      if (!frame->has_value()) break;
      Require((*frame)->payload.size() <= rankd::kMaxKvFramePayloadBytes,
              "a frame fits the payload bound");
      absl::Status status;
      absl::string_view response;
      if (rankd::DecodeKvReply((*frame)->payload, &status, &response).ok()) {
        Require(status.message().size() <= rankd::kMaxKvReplyMessageBytes,
                "a reply's message fits its bound");
        Require(status.ok() || response.empty(),
                "an error reply carries no response");
      }
    }
  }
  return 0;
}
