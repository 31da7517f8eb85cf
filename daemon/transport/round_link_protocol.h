// The round link's wire format, shared by its two ends (round_link_server.h
// on the coordinator, round_link.h on a node). The round link is a plain
// TCP connection from a node's daemon to the coordinator that carries the
// node's all_gather_words rounds with less work per message than a gRPC
// stream (docs/architecture.md, "Rounds between nodes").
//
// Every frame is a 4-byte little-endian length followed by that many bytes.
//   1. coordinator -> node: the greeting, kRoundLinkMagic then the
//      coordinator's nonce (kRoundLinkNonceBytes).
//   2. node -> coordinator: a v1::RoundLinkHello naming the node, with its
//      own nonce and a proof: TokenProof(node token, NodeTranscript(...)).
//      The token itself never crosses the wire.
//   3. coordinator -> node: a v1::RoundLinkWelcome. Code 0 opens the link
//      and carries TokenProof(node token, CoordinatorTranscript(...)), so
//      the node knows it talks to a holder of the node key; any other code
//      says why the node was refused, and the coordinator closes.
//   4. Then the node sends v1::ContributeWordsRequests and the coordinator
//      v1::RoundOutcomes, as on Peer.Rounds except that an outcome's words
//      come as RoundOutcome.words_le (4 bytes each; WordRounds::Outcome::
//      LinkEncoded, read by TakeOutcomeWords). An outcome with tag 0 and a
//      non-zero code is the coordinator's last word: why it closes.
// Without authentication (--allow_unauthenticated) proofs are empty.
//
// What a link protects: like the gRPC listener without TLS, the link has
// no confidentiality; a coordinator with TLS configured offers no link, so
// its rounds stay on the TLS-protected Rounds stream.
//
// Depends on absl, common/credentials and the protos.
#ifndef RANKD_DAEMON_ROUND_LINK_PROTOCOL_H_
#define RANKD_DAEMON_ROUND_LINK_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

inline constexpr char kRoundLinkMagic[] = "RANKDRL1";  // 8 bytes on the wire
inline constexpr size_t kRoundLinkMagicBytes = 8;
inline constexpr size_t kRoundLinkNonceBytes = 32;
inline constexpr size_t kRoundLinkHeaderBytes = 4;
// Largest handshake frame either side accepts.
inline constexpr size_t kMaxRoundLinkHandshakeBytes = 4096;
// How long a node has to complete the handshake once connected.
inline constexpr absl::Duration kRoundLinkHandshakeTimeout = absl::Seconds(5);

// The 4-byte frame header for a payload of `length` bytes.
std::string RoundLinkFrameHeader(uint32_t length);
// A whole frame: the header, then `payload`.
std::string RoundLinkFrame(absl::string_view payload);
// The length a frame header (kRoundLinkHeaderBytes at `header`) announces.
uint32_t RoundLinkFrameLength(const char* header);

// The greeting's payload: the magic followed by `nonce`.
std::string RoundLinkGreeting(absl::string_view nonce);
// The coordinator's nonce from a greeting payload; InvalidArgument when it
// is not one (another protocol on that port).
absl::Status ParseRoundLinkGreeting(absl::string_view payload,
                                    std::string* nonce);

// What the node proves it holds its token over, and what the coordinator
// proves it can derive that token over. Domain-separated and
// length-delimited, so neither can stand for the other or for any other
// MAC this project computes.
std::string NodeTranscript(absl::string_view coordinator_nonce,
                           absl::string_view node_nonce,
                           const v1::NodeRef& node);
std::string CoordinatorTranscript(absl::string_view coordinator_nonce,
                                  absl::string_view node_nonce,
                                  const v1::NodeRef& node);

// kRoundLinkNonceBytes from the operating system's random generator;
// Internal when the generator fails.
absl::Status NewRoundLinkNonce(std::string* nonce);

}  // namespace rankd

#endif  // RANKD_DAEMON_ROUND_LINK_PROTOCOL_H_
