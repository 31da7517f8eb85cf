// Limits on what a caller can make a daemon hold or wait for, shared by the
// node agent (the Rank service) and the coordinator (the Peer service), so
// a value refused on one path is refused on the other with the same words.
// The table in docs/operations.md ("Limits") lists them. Depends on absl.
#ifndef RANKD_COMMON_LIMITS_H_
#define RANKD_COMMON_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/kv_limits.h"
#include "common/round_limits.h"

namespace rankd {

// Longest wait a caller may ask for (timeout_ms, wait_for_world_ms).
inline constexpr uint32_t kMaxTimeoutMs = 3'600'000;
// Longest reason a node may give for releasing a rank or leaving.
inline constexpr size_t kMaxReasonBytes = 1024;
// Longest job id (--job_id: 1 to 128 of A-Z a-z 0-9 . _ -).
inline constexpr size_t kMaxJobIdBytes = 128;
// Longest device field (kind, uuid, pci_bus_id) a rank may report.
inline constexpr size_t kMaxDeviceFieldBytes = 256;

// Longest host name (a DNS name) and pod name a node may report.
inline constexpr size_t kMaxHostNameBytes = 253;
// A TLS certificate, key or CA bundle file (the daemon's --tls_* flags, a
// client's ClientOptions::tls_*_file): read whole, so bounded (a bundle of
// hundreds of certificates fits).
inline constexpr size_t kMaxTlsFileBytes = 1 << 20;
// Longest address a node may report: "[<host name>]:65535".
inline constexpr size_t kMaxAddressBytes = kMaxHostNameBytes + 8;
// Longest Unix socket path the daemon, rankrun and the client accept: the
// kernel's sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
inline constexpr size_t kMaxUnixSocketPathBytes = 107;
// Longest kernel boot id a node may report (a UUID is 36 bytes).
inline constexpr size_t kMaxBootIdBytes = 64;
// Most devices a node may report.
inline constexpr size_t kMaxDevicesPerNode = 1024;

// kMaxKvKeyBytes, kMaxKvValueBytes: common/kv_limits.h (included above).

// Largest gRPC message a daemon sends or receives.
inline constexpr int kMaxGrpcMessageBytes = 64 << 20;

// Key-value calls a node's daemon may have forwarded over its round link
// and not yet answered (daemon/transport/round_link_protocol.h): room for
// 64 local ranks with kMaxWaitingGetsPerRank gets waiting each. The node
// refuses the next with RESOURCE_EXHAUSTED naming this limit; a link that
// sends more anyway is closed by the coordinator.
inline constexpr uint32_t kMaxKvCallsPerRoundLink = 4096;
// Largest forwarded key-value request frame: a compare-and-set's value and
// expected value (kMaxKvValueBytes each), its key and the member it names,
// with room to spare for the encoding.
inline constexpr size_t kMaxRoundLinkKvRequestBytes =
    2 * kMaxKvValueBytes + (64 << 10);
// Bytes of key-value replies the coordinator queues for one node that does
// not read them; beyond this it closes that node's round link.
inline constexpr size_t kMaxRoundLinkQueuedKvReplyBytes = 64 << 20;
// Largest request metadata (headers) a daemon accepts.
inline constexpr int kMaxMetadataBytes = 16 << 10;

// Defaults of the listeners' bounds (daemon/config.h NetworkLimits;
// docs/operations.md, "Listeners").
// TCP connections one peer address may hold open on the public listener.
inline constexpr uint32_t kMaxTcpConnectionsPerPeer = 64;
// ... of which unauthenticated (none of their calls has presented a valid
// credential yet): each may hold as many calls in flight as a node's
// connection (MaxCallsPerConnection), about 12 KiB of memory each even
// when the call never sends its message.
inline constexpr uint32_t kMaxTcpUnauthenticatedPerPeer = 8;
// TCP connections whose calls are all grpc.health.v1 (probes and load
// balancers carry no credential) that may stay open past the
// unauthenticated time: in all (at most; a quarter of the listener's
// connections when that is fewer) and from one address group.
inline constexpr uint32_t kMaxTcpHealthConnections = 32;
inline constexpr uint32_t kMaxTcpHealthConnectionsPerPeer = 4;
// What a TCP connection may send, and for how long it may stay open, before
// one of its calls authenticates: room for the largest first request of an
// honest caller (a node's registration, under 1 MiB).
inline constexpr uint32_t kTcpUnauthenticatedBytes = 2u << 20;
inline constexpr uint32_t kTcpUnauthenticatedMs = 10'000;
// gRPC closes a TCP connection without calls for this long: 0, none by
// default. In gRPC 1.51 a pending idle (or age) timer keeps a closed
// connection's memory, all its calls', until it fires, so a flood's
// memory would stay that long; TcpGate bounds unauthenticated connections'
// time instead.
inline constexpr uint32_t kTcpMaxConnectionIdleMs = 0;
// The public TCP server's gRPC resource quota: memory and threads.
inline constexpr uint32_t kTcpMemoryBytes = 512u << 20;
inline constexpr uint32_t kTcpMaxThreads = 64;
// The Unix socket server's gRPC memory quota (its own).
inline constexpr uint32_t kLocalMemoryBytes = 1u << 30;
// The metrics endpoint: time to send a request (and again to read the
// answer); connections held at once, and from one address (an IPv6 /64).
inline constexpr uint32_t kMetricsRequestTimeoutMs = 5'000;
inline constexpr uint32_t kMetricsMaxConnections = 64;
inline constexpr uint32_t kMetricsMaxConnectionsPerAddress = 8;

// Defaults of the limits an operator may change (CallerLimits below).
// Blocking key-value gets one rank may have waiting at once.
inline constexpr uint32_t kMaxWaitingGetsPerRank = 64;
// Event streams one caller may hold open at once: Watch per rank,
// Subscribe per node.
inline constexpr uint32_t kMaxStreamsPerCaller = 8;
// Admin.WatchEvents streams one daemon serves at once (operators share one
// credential, so the limit is per daemon).
inline constexpr uint32_t kMaxOperatorStreams = 64;
// Keys and values together that one job's key-value broker holds.
inline constexpr uint32_t kMaxKvBytes = 256u << 20;
// Keys one job's key-value broker holds.
inline constexpr uint32_t kMaxKvKeys = 1u << 16;
// Keys one rank may have created that still exist (a key counts against
// the rank that created it until it is deleted), so one rank cannot take
// the whole broker.
inline constexpr uint32_t kMaxKvKeysPerRank = 4096;

// Server reflection streams one daemon serves at once
// (daemon/transport/reflection_service.h); more are refused with
// RESOURCE_EXHAUSTED.
inline constexpr uint32_t kMaxReflectionStreams = 32;
// Of those, streams one peer may hold (a TCP address, an IPv6 /64, or a
// process on the Unix socket).
inline constexpr uint32_t kMaxReflectionStreamsPerPeer = 8;
// Requests one reflection stream may carry; the next ends it.
inline constexpr uint32_t kMaxReflectionRequestsPerStream = 1024;

// Bytes of all_gather_words frames one rank's rounds in flight may hold on
// a daemon (its node's, and the coordinator), so that one rank's rounds
// cannot exhaust a daemon's memory: 16 frames of the largest size.
inline constexpr uint32_t kMaxRoundBytesPerRank = 4u << 20;

// What callers may make one daemon hold, as set by its flags
// (docs/operations.md, "Limits"; daemon/config.h resolves them, each at
// least 1). The defaults are the constants above.
struct CallerLimits {
  uint32_t kv_max_bytes = kMaxKvBytes;
  uint32_t kv_max_keys = kMaxKvKeys;
  uint32_t kv_max_keys_per_rank = kMaxKvKeysPerRank;
  uint32_t max_waiting_gets_per_rank = kMaxWaitingGetsPerRank;
  uint32_t max_streams_per_caller = kMaxStreamsPerCaller;
  uint32_t max_operator_streams = kMaxOperatorStreams;
  // Bytes of keys and values one rank may have written that still exist,
  // so one rank cannot fill the broker and deny the others. 0 until the
  // configuration resolves it: kv_max_bytes / world size by default, so
  // every rank's quota fits together.
  uint32_t kv_max_bytes_per_rank = 0;
  uint32_t max_round_bytes_per_rank = kMaxRoundBytesPerRank;
  uint32_t max_reflection_streams = kMaxReflectionStreams;
  uint32_t max_reflection_requests_per_stream = kMaxReflectionRequestsPerStream;
  uint32_t max_reflection_streams_per_peer = kMaxReflectionStreamsPerPeer;
};

// kMaxFrameWords (the largest frame one rank may send in one
// all_gather_words round) is in common/round_limits.h.
// Largest all_gather_words result, every rank's frame together: 8 Mi words
// (32 MiB of words; at most 5 bytes each encoded, so a reply of about
// 40 MiB always fits the 64 MiB gRPC message limit).
inline constexpr uint64_t kMaxRoundResultWords = uint64_t{8} << 20;

// Calls one connection may have in flight at once (HTTP/2 concurrent
// streams) on a daemon whose nodes run `ranks_per_node` ranks under
// `limits`: room for every rank's most (waiting gets, streams, rounds in
// flight and a few more), since a node forwards all its ranks' calls on one
// connection to the coordinator; at least 1024, at most 2^30. More wait
// in the client's transport.
int MaxCallsPerConnection(uint32_t ranks_per_node,
                          const CallerLimits& limits = {});

// Largest frame each rank of a world of `world_size` (>= 1) may send:
// min(kMaxFrameWords, kMaxRoundResultWords / world_size).
uint32_t MaxFrameWords(uint32_t world_size);

// OK when a frame of `words` words fits MaxFrameWords(world_size);
// InvalidArgument giving the limit and why otherwise.
absl::Status CheckFrameWords(size_t words, uint32_t world_size);

// True when `id` is a job id: 1 to kMaxJobIdBytes of A-Z a-z 0-9 . _ -.
bool IsJobId(absl::string_view id);

// OK for 1..kMaxTimeoutMs; InvalidArgument naming `field` otherwise (zero:
// every wait needs a deadline).
absl::Status CheckTimeoutMs(uint32_t timeout_ms, absl::string_view field);

// The same for a wait that is optional: 0 (do not wait) is OK too.
absl::Status CheckOptionalTimeoutMs(uint32_t timeout_ms,
                                    absl::string_view field);

// OK when `value` has at most `max_bytes` bytes; InvalidArgument naming
// `field`, its size and the limit otherwise (never echoing the value).
absl::Status CheckTextSize(absl::string_view field, absl::string_view value,
                           size_t max_bytes);

}  // namespace rankd

#endif  // RANKD_COMMON_LIMITS_H_
