#include "daemon/transport/round_link_protocol.h"

#include <openssl/rand.h>

#include "absl/strings/str_cat.h"

namespace rankd {
namespace {

std::string Transcript(absl::string_view side,
                       absl::string_view coordinator_nonce,
                       absl::string_view node_nonce, const v1::NodeRef& node) {
  return absl::StrCat("rankd round link v1 ", side, "\n",
                      coordinator_nonce.size(), ":", coordinator_nonce, "\n",
                      node_nonce.size(), ":", node_nonce, "\n",
                      node.job_id().size(), ":", node.job_id(), "\n",
                      node.node_index(), "\n", node.daemon_incarnation());
}

}  // namespace

std::string RoundLinkFrameHeader(uint32_t length) {
  char bytes[kRoundLinkHeaderBytes];
  for (size_t i = 0; i < kRoundLinkHeaderBytes; ++i) {
    bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  }
  return std::string(bytes, kRoundLinkHeaderBytes);
}

std::string RoundLinkFrame(absl::string_view payload) {
  return absl::StrCat(
      RoundLinkFrameHeader(static_cast<uint32_t>(payload.size())), payload);
}

uint32_t RoundLinkFrameLength(const char* header) {
  uint32_t length = 0;
  for (size_t i = 0; i < kRoundLinkHeaderBytes; ++i) {
    length |= static_cast<uint32_t>(static_cast<unsigned char>(header[i]))
              << (8 * i);
  }
  return length;
}

std::string RoundLinkGreeting(absl::string_view nonce) {
  return absl::StrCat(absl::string_view(kRoundLinkMagic, kRoundLinkMagicBytes),
                      nonce);
}

absl::Status ParseRoundLinkGreeting(absl::string_view payload,
                                    std::string* nonce) {
  if (payload.size() != kRoundLinkMagicBytes + kRoundLinkNonceBytes ||
      payload.substr(0, kRoundLinkMagicBytes) !=
          absl::string_view(kRoundLinkMagic, kRoundLinkMagicBytes)) {
    return absl::InvalidArgumentError(
        "the peer did not greet as a rankd round link (another service on "
        "that port?)");
  }
  *nonce = std::string(payload.substr(kRoundLinkMagicBytes));
  return absl::OkStatus();
}

std::string NodeTranscript(absl::string_view coordinator_nonce,
                           absl::string_view node_nonce,
                           const v1::NodeRef& node) {
  return Transcript("node", coordinator_nonce, node_nonce, node);
}

std::string CoordinatorTranscript(absl::string_view coordinator_nonce,
                                  absl::string_view node_nonce,
                                  const v1::NodeRef& node) {
  return Transcript("coordinator", coordinator_nonce, node_nonce, node);
}

absl::Status NewRoundLinkNonce(std::string* nonce) {
  unsigned char bytes[kRoundLinkNonceBytes];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("the random generator failed (RAND_bytes)");
  }
  nonce->assign(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  return absl::OkStatus();
}

}  // namespace rankd
