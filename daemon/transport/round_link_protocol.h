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
//   4. Then every frame is typed: its payload's first byte is a
//      RoundLinkFrameType, the rest that type's message. The handshake's
//      frames (1-3) have no type byte: their order says what they are.
//        node -> coordinator
//          1 kContribution  v1::ContributeWordsRequest (a round), as on
//                           Peer.Rounds.
//          3 kKvRequest     v1::KvLinkRequest: a rank's key-value call the
//                           node forwards, named by the node's id.
//          4 kKvCancel      v1::KvLinkCancel: release that call's wait.
//        coordinator -> node
//          2 kOutcome       v1::RoundOutcome, as on Peer.Rounds except that
//                           its words come as RoundOutcome.words_le (4 bytes
//                           each; WordRounds::Outcome::LinkEncoded, read by
//                           TakeOutcomeWords). An outcome with tag 0 and a
//                           non-zero code is the coordinator's last word:
//                           why it closes.
//          5 kKvReply       v1::KvLinkReply: the answer to a kKvRequest,
//                           by id (code, message, reason, response),
//                           exactly what the Peer service's unary call
//                           would answer.
//      A frame of a type the receiver does not take in its direction, an
//      empty one, or one whose message does not parse closes the link with
//      an error naming it (ParseRoundLinkFrame). Each type has its own
//      largest size (MaxRoundLinkFrameBytes), so a key-value request is
//      refused as soon as its header arrives, before its body is buffered.
// Without authentication (--allow_unauthenticated) proofs are empty.
//
// What a link protects: like the gRPC listener without TLS, the link has
// no confidentiality; a coordinator with TLS configured offers no link, so
// its rounds stay on the TLS-protected Rounds stream.
//
// Depends on absl, common/credentials, common/error_reason, common/limits
// and the protos.
#ifndef RANKD_DAEMON_ROUND_LINK_PROTOCOL_H_
#define RANKD_DAEMON_ROUND_LINK_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
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

// A link whose peer's host went away (no FIN, no RST: powered off, cut
// off) is noticed within about this long, by TCP keepalive on an idle link
// and the user timeout on data not acknowledged, instead of never.
inline constexpr absl::Duration kRoundLinkDeadPeerTimeout = absl::Seconds(15);

// Sets a round link socket's options, on both ends: no Nagle delay (frames
// are small and latency is the point), keepalive probes after 5 s idle,
// every 2 s, 5 lost (15 s), and a user timeout of kRoundLinkDeadPeerTimeout.
// Best effort: an option the kernel refuses is skipped.
void SetRoundLinkSocketOptions(int fd);

// What a frame after the handshake carries: its payload's first byte.
enum class RoundLinkFrameType : uint8_t {
  kContribution = 1,  // node -> coordinator: v1::ContributeWordsRequest
  kOutcome = 2,       // coordinator -> node: v1::RoundOutcome
  kKvRequest = 3,     // node -> coordinator: v1::KvLinkRequest
  kKvCancel = 4,      // node -> coordinator: v1::KvLinkCancel
  kKvReply = 5,       // coordinator -> node: v1::KvLinkReply
};
// Header and type byte: what precedes a typed frame's message.
inline constexpr size_t kRoundLinkTypedHeaderBytes = kRoundLinkHeaderBytes + 1;

// The 4-byte frame header for a payload of `length` bytes.
std::string RoundLinkFrameHeader(uint32_t length);
// A whole untyped frame (the handshake's): the header, then `payload`.
std::string RoundLinkFrame(absl::string_view payload);
// The length a frame header (kRoundLinkHeaderBytes at `header`) announces.
uint32_t RoundLinkFrameLength(const char* header);

// The header and type byte of a typed frame whose message is
// `message_length` bytes (the message follows them).
std::string RoundLinkTypedFrameHeader(RoundLinkFrameType type,
                                      size_t message_length);
// A whole typed frame: header, type byte, then `message`.
std::string RoundLinkTypedFrame(RoundLinkFrameType type,
                                absl::string_view message);

// The type's name in messages ("kv request"); "type <n>" for a byte that
// names no type.
std::string RoundLinkFrameTypeName(uint8_t type);

// The largest payload (type byte and message) a receiver accepts in a frame
// of `type`: kMaxRoundLinkKvRequestBytes for a key-value request, 64 bytes
// for a cancel, kMaxGrpcMessageBytes otherwise (common/limits.h).
size_t MaxRoundLinkFrameBytes(RoundLinkFrameType type);

// Splits a typed frame's `payload` into its type and message. `from`
// ("node", "coordinator") names the sender for messages; `allowed` lists the
// types that sender may send. InvalidArgument naming what is wrong: an empty
// payload, a type byte that names no type or one `from` does not send, or
// a payload over MaxRoundLinkFrameBytes of its type.
absl::Status ParseRoundLinkFrame(absl::string_view payload,
                                 absl::string_view from,
                                 absl::Span<const RoundLinkFrameType> allowed,
                                 RoundLinkFrameType* type,
                                 absl::string_view* message);
// The same check on a frame's header and type byte alone (the first
// kRoundLinkTypedHeaderBytes of a frame), before its message has arrived:
// ResourceExhausted when the header announces more than the type allows.
absl::Status CheckRoundLinkFrameStart(
    const char* start, absl::string_view from,
    absl::Span<const RoundLinkFrameType> allowed);

// What a node sends and what a coordinator sends after the handshake.
inline constexpr RoundLinkFrameType kNodeFrameTypes[] = {
    RoundLinkFrameType::kContribution, RoundLinkFrameType::kKvRequest,
    RoundLinkFrameType::kKvCancel};
inline constexpr RoundLinkFrameType kCoordinatorFrameTypes[] = {
    RoundLinkFrameType::kOutcome, RoundLinkFrameType::kKvReply};

// A kKvReply's error, both ends' way: `status` (not OK) sets the reply's
// code, message and reason (common/error_reason.h, KvLinkReply.reason);
// KvLinkReplyStatus reads them back (OK when the code is 0; a reason this
// build does not know reads as none).
void SetKvLinkError(const absl::Status& status, v1::KvLinkReply* reply);
absl::Status KvLinkReplyStatus(const v1::KvLinkReply& reply);

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
