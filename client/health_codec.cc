// client/health_codec.cc: see health_codec.h.

#include "client/health_codec.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace rankd {

using ::google::protobuf::internal::WireFormatLite;

std::string EncodeHealthCheckRequest(absl::string_view service) {
  std::string out;
  if (service.empty()) return out;  // proto3: default values are not sent.
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag(
        WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint32(static_cast<uint32_t>(service.size()));
    coded.WriteRaw(service.data(), static_cast<int>(service.size()));
  }
  return out;
}

absl::StatusOr<std::string> DecodeHealthCheckResponse(absl::string_view bytes) {
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  uint64_t status = 0;
  while (true) {
    uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&status)) {
        return absl::InvalidArgumentError(
            "malformed HealthCheckResponse: truncated status");
      }
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed HealthCheckResponse: bad field with tag ", tag));
    }
  }
  if (!in.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        "malformed HealthCheckResponse: trailing bytes");
  }
  switch (static_cast<int32_t>(status)) {
    case 0:
      return std::string("UNKNOWN");
    case 1:
      return std::string("SERVING");
    case 2:
      return std::string("NOT_SERVING");
    case 3:
      return std::string("SERVICE_UNKNOWN");
    default:
      return absl::StrCat("STATUS_", static_cast<int32_t>(status));
  }
}

}  // namespace rankd
