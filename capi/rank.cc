// The C ABI's rank functions (capi/include/rankd/rankd.h, "Joining a job"
// through "Job failure"): join from options or the launcher's environment,
// the descriptor and groups, all_gather_words, the key-value broker and job
// failure. Depends on the client library, dataplane/control_plane.h,
// common/credentials.h (token files) and absl.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "capi/internal/handles.h"
#include "client/client.h"
#include "common/credentials.h"
#include "dataplane/control_plane.h"
#include "dataplane/nccl/cuda_device.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {
namespace {

constexpr char kJoin[] = "rankd_join";

// $name, or nullopt when unset or empty.
std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// A non-negative integer from $name (nullopt when unset).
absl::StatusOr<std::optional<uint32_t>> EnvIndex(const char* name) {
  std::optional<std::string> text = Env(name);
  if (!text.has_value()) return std::optional<uint32_t>();
  uint32_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kJoin, ": $", name, " is '", *text,
                     "'; it must be a non-negative integer"));
  }
  return std::optional<uint32_t>(value);
}

// An explicit field (>= 0), else $env_name, else nullopt; -1 is "not given".
absl::StatusOr<std::optional<uint32_t>> IndexField(int64_t field,
                                                   const char* field_name,
                                                   const char* env_name) {
  if (field >= 0) {
    if (field > UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          kJoin, ": options.", field_name, " is ", field, "; too large"));
    }
    return std::optional<uint32_t>(static_cast<uint32_t>(field));
  }
  if (field != -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kJoin, ": options.", field_name, " is ", field,
                     "; it must be -1 (not given) or a rank index"));
  }
  return EnvIndex(env_name);
}

// The token in the file at `path`: a regular file of one line, bounded
// (common/credentials.h), so a device or a pipe named by mistake is refused
// instead of read without end or waited on.
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> token = ReadCredentialPath(path);
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kJoin, ": the token file: ", token.status().message()));
  }
  return token;
}

// What rankd_join connects and joins with.
struct JoinPlan {
  ClientOptions client;
  JoinOptions join;
};

absl::StatusOr<JoinPlan> PlanJoin(const rankd_join_options& o) {
  JoinPlan plan;
  if (o.target != nullptr) {
    plan.client.target = o.target;
  } else if (auto target = Env("RANKD_TARGET")) {
    plan.client.target = *target;
  }  // else: the client's default socket
  if (o.job_id != nullptr) {
    plan.join.job_id = o.job_id;
  } else if (auto job = Env("RANKD_JOB_ID")) {
    plan.join.job_id = *job;
  }
  if (plan.join.job_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kJoin, ": no job id: set options.job_id or $RANKD_JOB_ID"));
  }
  auto local_rank = IndexField(o.local_rank, "local_rank", "RANKD_LOCAL_RANK");
  if (!local_rank.ok()) return local_rank.status();
  plan.join.local_rank = *local_rank;
  auto rank = IndexField(o.rank, "rank", "RANKD_RANK");
  if (!rank.ok()) return rank.status();
  if (rank->has_value()) plan.join.rank = **rank;
  if (o.world_size != 0) {
    plan.join.world_size = o.world_size;
  } else {
    auto world = EnvIndex("RANKD_WORLD_SIZE");
    if (!world.ok()) return world.status();
    plan.join.world_size = world->value_or(0);
  }
  const std::string kind = o.device_kind == nullptr ? "cpu" : o.device_kind;
  if (kind != "cpu" && kind != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat(kJoin, ": options.device_kind is '", kind,
                     "'; use \"cpu\" or \"cuda\""));
  }
  plan.join.device.set_kind(kind);
  if (o.device_index < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kJoin, ": options.device_index is ", o.device_index,
                     "; it must be -1 (the local rank) or a device index"));
  }
  plan.join.device.set_index(o.device_index);
  if (o.device_index == -1) {
    // The device an NCCL session will choose (DefaultDevice,
    // dataplane/nccl/default_device.h), for the daemon's record: the process's
    // one GPU when it sees one, else its local rank's; -1 (the daemon
    // records the slot it gives) when the join names no local rank. The
    // node's rank count is known only once joined; the session applies the
    // whole rule.
    int32_t index = -1;
    if (plan.join.local_rank.has_value()) {
      index = static_cast<int32_t>(*plan.join.local_rank);
    }
    if (kind == "cuda" &&
        rankd::dataplane::nccl::ProbeDevices().device_count == 1) {
      index = 0;
    } else if (kind == "cpu") {
      index = std::max(index, 0);  // a CPU rank records no GPU to choose
    }
    plan.join.device.set_index(index);
  }
  auto wait =
      ToDuration(o.wait_for_world_seconds, kJoin,
                 "options.wait_for_world_seconds", {.allow_zero = true});
  if (!wait.ok()) return wait.status();
  plan.join.wait_for_world = *wait;
  auto connect = ToDuration(o.connect_timeout_seconds, kJoin,
                            "options.connect_timeout_seconds");
  if (!connect.ok()) return connect.status();
  plan.client.connect_timeout = *connect;
  std::optional<std::string> token_file;
  if (o.token_file != nullptr) {
    token_file = o.token_file;
  } else {
    token_file = Env("RANKD_TOKEN_FILE");
  }
  if (token_file.has_value()) {
    auto token = ReadToken(*token_file);
    if (!token.ok()) return token.status();
    plan.client.bearer_token = *std::move(token);
  }
  return plan;
}

const char* GroupKindName(v1::GroupKind kind) {
  switch (kind) {
    case v1::GROUP_KIND_WORLD:
      return "world";
    case v1::GROUP_KIND_TENSOR:
      return "tensor";
    case v1::GROUP_KIND_PIPELINE:
      return "pipeline";
    case v1::GROUP_KIND_EXPERT:
      return "expert";
    case v1::GROUP_KIND_DATA:
      return "data";
    default:
      return "unspecified";
  }
}

// A round's own frame: `count` words at `words`.
absl::Status CheckWords(const char* function, const uint32_t* words,
                        size_t count) {
  if (words == nullptr && count > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": words is NULL with count ", count));
  }
  return absl::OkStatus();
}

// `out` can take a round's result of `needed` words (world size x count).
absl::Status CheckResultBuffer(const char* function, const uint32_t* out,
                               size_t out_capacity, size_t needed) {
  if (out == nullptr && needed > 0) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": out is NULL"));
  }
  if (out_capacity < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        function, ": out holds ", out_capacity, " words; the result needs ",
        needed, " (world size x words per rank)"));
  }
  return absl::OkStatus();
}

size_t ResultWords(const RankState& rank, size_t count) {
  const size_t world = rank.proto.world_size();
  // Saturating: a count no buffer can take asks for more than any holds.
  if (world != 0 && count > SIZE_MAX / world) return SIZE_MAX;
  return world * count;
}

// A blocking round's buffers, as both blocking forms check them: its frame
// (`count` words at `words`), then `out`, which must take the result.
absl::Status CheckRoundBuffers(const char* function, const RankState& rank,
                               const uint32_t* words, size_t count,
                               const uint32_t* out, size_t out_capacity) {
  if (absl::Status s = CheckWords(function, words, count); !s.ok()) return s;
  return CheckResultBuffer(function, out, out_capacity,
                           ResultWords(rank, count));
}

// Copies `result` into `out` (room for `out_capacity` words, checked
// against what the round was asked for); never past it, whatever the round
// answered.
absl::Status CopyWords(const char* function,
                       const std::vector<uint32_t>& result, uint32_t* out,
                       size_t out_capacity) {
  if (result.size() > out_capacity) {
    return absl::InternalError(absl::StrCat(function, ": the round answered ",
                                            result.size(), " words; out holds ",
                                            out_capacity));
  }
  if (!result.empty()) {
    std::memcpy(out, result.data(), result.size() * sizeof(uint32_t));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace rankd::capi::internal

using rankd::capi::internal::Error;
using rankd::capi::internal::Guarded;
using rankd::capi::internal::NullArgument;
using rankd::capi::internal::ToC;
using rankd::capi::internal::ToDuration;

extern "C" {

void rankd_join_options_init(rankd_join_options* options) {
  if (options == nullptr) return;
  *options = rankd_join_options{};
  options->struct_size = sizeof(rankd_join_options);
  options->local_rank = -1;
  options->rank = -1;
  options->device_index = -1;
  options->wait_for_world_seconds = 60;
  options->connect_timeout_seconds = 10;
}

rankd_status* rankd_join(const rankd_join_options* options, rankd_rank** rank) {
  return Guarded("rankd_join", [&]() -> rankd_status* {
    using rankd::capi::internal::kJoin;
    if (rank == nullptr) return NullArgument(kJoin, "rank");
    rankd_join_options o;
    rankd_join_options_init(&o);
    if (options != nullptr) {
      if (options->struct_size < sizeof(rankd_join_options)) {
        // ABI version 1 defines every field; an older layout does not exist.
        return Error(
            absl::StatusCode::kInvalidArgument, kJoin,
            absl::StrCat("options->struct_size is ", options->struct_size,
                         "; expected at least ", sizeof(rankd_join_options),
                         " (call rankd_join_options_init)"));
      }
      o = *options;
    }
    auto plan = rankd::capi::internal::PlanJoin(o);
    if (!plan.ok()) return ToC(plan.status());
    auto state = std::make_shared<rankd::capi::internal::RankState>();
    auto client = rankd::Client::Connect(plan->client);
    if (!client.ok()) return ToC(client.status());
    state->client = *std::move(client);
    auto descriptor = state->client->Join(plan->join);
    if (!descriptor.ok()) return ToC(descriptor.status());
    state->proto = *std::move(descriptor);
    for (const auto& group : state->proto.groups()) {
      state->group_members.emplace_back(group.members().begin(),
                                        group.members().end());
    }
    state->control_plane =
        rankd::dataplane::MakeClientControlPlane(state->client.get());
    if (plan->join.device.kind() == "cuda") {
      // -1 stays -1: the NCCL session applies the default-device rule.
      state->cuda_device = o.device_index;
    }
    auto handle = std::make_unique<rankd_rank>();
    handle->state = std::move(state);
    *rank = handle.release();  // the caller owns it: rankd_rank_free
    return nullptr;
  });
}

rankd_status* rankd_leave(rankd_rank* rank) {
  return Guarded("rankd_leave", [&]() -> rankd_status* {
    if (rank == nullptr) return NullArgument("rankd_leave", "rank");
    return ToC(rank->state->client->Leave());
  });
}

void rankd_rank_free(rankd_rank* rank) {
  std::unique_ptr<rankd_rank> owned(rank);
}

rankd_status* rankd_rank_descriptor(const rankd_rank* rank,
                                    rankd_descriptor* descriptor) {
  return Guarded("rankd_rank_descriptor", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_rank_descriptor";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (descriptor == nullptr) return NullArgument(kFn, "descriptor");
    if (descriptor->struct_size < sizeof(rankd_descriptor)) {
      return Error(
          absl::StatusCode::kInvalidArgument, kFn,
          absl::StrCat("descriptor->struct_size is ", descriptor->struct_size,
                       "; set it to sizeof "
                       "(rankd_descriptor), at least ",
                       sizeof(rankd_descriptor)));
    }
    const rankd::v1::SessionDescriptor& p = rank->state->proto;
    rankd_descriptor d{};
    d.struct_size = sizeof(rankd_descriptor);
    d.rank = p.rank();
    d.world_size = p.world_size();
    d.local_rank = p.local_rank();
    d.node_index = p.node_index();
    d.nnodes = p.nnodes();
    d.nproc_per_node = p.nproc_per_node();
    d.job_incarnation = p.job_incarnation();
    d.tensor_parallel = p.topology().tensor();
    d.pipeline_parallel = p.topology().pipeline();
    d.expert_parallel = p.topology().expert();
    d.data_parallel = p.topology().data();
    d.group_count = static_cast<size_t>(p.groups_size());
    *descriptor = d;
    return nullptr;
  });
}

const char* rankd_rank_job_id(const rankd_rank* rank) {
  return rank == nullptr ? nullptr : rank->state->proto.job_id().c_str();
}

rankd_status* rankd_rank_group(const rankd_rank* rank, size_t index,
                               rankd_group* group) {
  return Guarded("rankd_rank_group", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_rank_group";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (group == nullptr) return NullArgument(kFn, "group");
    const auto& groups = rank->state->proto.groups();
    if (index >= static_cast<size_t>(groups.size())) {
      return Error(
          absl::StatusCode::kOutOfRange, kFn,
          absl::StrCat("group index ", index, " is out of range; rank ",
                       rank->state->proto.rank(), " belongs to ", groups.size(),
                       " groups"));
    }
    const auto& g = groups[static_cast<int>(index)];
    const std::vector<uint32_t>& members = rank->state->group_members[index];
    group->id = g.id();
    group->kind = rankd::capi::internal::GroupKindName(g.kind());
    group->size = static_cast<uint32_t>(members.size());
    group->local_rank = g.local_rank();
    group->members = members.data();
    return nullptr;
  });
}

rankd_status* rankd_all_gather_words(rankd_rank* rank, const uint32_t* words,
                                     size_t count, double timeout_seconds,
                                     uint32_t* out, size_t out_capacity) {
  return Guarded("rankd_all_gather_words", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_all_gather_words";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (absl::Status s = rankd::capi::internal::CheckRoundBuffers(
            kFn, *rank->state, words, count, out, out_capacity);
        !s.ok()) {
      return ToC(s);
    }
    auto timeout = ToDuration(timeout_seconds, kFn, "timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    auto result = rank->state->client->AllGatherWords(
        absl::MakeConstSpan(words, count), *timeout);
    if (!result.ok()) return ToC(result.status());
    return ToC(
        rankd::capi::internal::CopyWords(kFn, *result, out, out_capacity));
  });
}

rankd_status* rankd_all_gather_words_with_view(
    rankd_rank* rank, const uint32_t* words, size_t count,
    double timeout_seconds, uint32_t* out, size_t out_capacity,
    size_t* out_words, int* partial, rankd_domain_epoch* domains,
    size_t domains_capacity, size_t* domain_count) {
  return Guarded("rankd_all_gather_words_with_view", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_all_gather_words_with_view";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (out_words == nullptr) return NullArgument(kFn, "out_words");
    if (partial == nullptr) return NullArgument(kFn, "partial");
    if (domains == nullptr) return NullArgument(kFn, "domains");
    if (domain_count == nullptr) return NullArgument(kFn, "domain_count");
    if (absl::Status s = rankd::capi::internal::CheckRoundBuffers(
            kFn, *rank->state, words, count, out, out_capacity);
        !s.ok()) {
      return ToC(s);
    }
    const size_t replicas =
        std::max<size_t>(1, rank->state->proto.topology().data());
    if (domains_capacity < replicas) {
      return ToC(absl::InvalidArgumentError(absl::StrCat(
          kFn, ": domains holds ", domains_capacity, " entries; the job has ",
          replicas, " data-parallel replicas (data_parallel)")));
    }
    auto timeout = ToDuration(timeout_seconds, kFn, "timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    auto result = rank->state->client->AllGatherWordsWithView(
        absl::MakeConstSpan(words, count), *timeout);
    if (!result.ok()) return ToC(result.status());
    if (result->domains.size() > replicas) {
      return ToC(absl::InternalError(
          absl::StrCat(kFn, ": the round lists ", result->domains.size(),
                       " replicas; the job has ", replicas)));
    }
    if (absl::Status s = rankd::capi::internal::CopyWords(kFn, result->words,
                                                          out, out_capacity);
        !s.ok()) {
      return ToC(s);
    }
    *out_words = result->words.size();
    *partial = result->partial ? 1 : 0;
    for (size_t i = 0; i < result->domains.size(); ++i) {
      domains[i].domain = result->domains[i].domain;
      domains[i].epoch = result->domains[i].epoch;
    }
    *domain_count = result->domains.size();
    return nullptr;
  });
}

rankd_status* rankd_submit_all_gather_words(rankd_rank* rank,
                                            const uint32_t* words, size_t count,
                                            double round_timeout_seconds,
                                            rankd_pending_words** pending) {
  return Guarded("rankd_submit_all_gather_words", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_submit_all_gather_words";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (pending == nullptr) return NullArgument(kFn, "pending");
    if (absl::Status s = rankd::capi::internal::CheckWords(kFn, words, count);
        !s.ok()) {
      return ToC(s);
    }
    auto timeout =
        ToDuration(round_timeout_seconds, kFn, "round_timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    auto submitted = rank->state->client->SubmitAllGatherWords(
        absl::MakeConstSpan(words, count), *timeout);
    if (!submitted.ok()) return ToC(submitted.status());
    auto handle = std::make_unique<rankd_pending_words>();
    handle->rank = rank->state;
    handle->pending = *std::move(submitted);
    handle->result_words =
        rankd::capi::internal::ResultWords(*rank->state, count);
    *pending = handle.release();  // rankd_pending_words_free
    return nullptr;
  });
}

int rankd_pending_words_is_ready(const rankd_pending_words* pending) {
  return pending != nullptr && pending->pending->IsReady() ? 1 : 0;
}

rankd_status* rankd_pending_words_wait(rankd_pending_words* pending,
                                       double timeout_seconds, uint32_t* out,
                                       size_t out_capacity) {
  return Guarded("rankd_pending_words_wait", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_pending_words_wait";
    if (pending == nullptr) return NullArgument(kFn, "pending");
    absl::Status checked = rankd::capi::internal::CheckResultBuffer(
        kFn, out, out_capacity, pending->result_words);
    if (!checked.ok()) return ToC(checked);
    auto timeout = ToDuration(timeout_seconds, kFn, "timeout_seconds",
                              {.allow_infinite = true});
    if (!timeout.ok()) return ToC(timeout.status());
    auto result = pending->pending->Wait(*timeout);
    if (!result.ok()) {
      // The wait's own timeout leaves the round in flight; a round that
      // failed (perhaps with DEADLINE_EXCEEDED naming missing ranks) is ready.
      if (absl::IsDeadlineExceeded(result.status()) &&
          !pending->pending->IsReady()) {
        return rankd::capi::internal::AsWaitTimeout(ToC(result.status()));
      }
      return ToC(result.status());
    }
    return ToC(
        rankd::capi::internal::CopyWords(kFn, *result, out, out_capacity));
  });
}

void rankd_pending_words_free(rankd_pending_words* pending) {
  std::unique_ptr<rankd_pending_words> owned(pending);
}

const uint8_t* rankd_bytes_data(const rankd_bytes* bytes) {
  return bytes == nullptr
             ? nullptr
             : reinterpret_cast<const uint8_t*>(bytes->value.data());
}

size_t rankd_bytes_size(const rankd_bytes* bytes) {
  return bytes == nullptr ? 0 : bytes->value.size();
}

void rankd_bytes_free(rankd_bytes* bytes) {
  std::unique_ptr<rankd_bytes> owned(bytes);
}

rankd_status* rankd_kv_set(rankd_rank* rank, const char* key, const void* value,
                           size_t size) {
  return Guarded("rankd_kv_set", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_set";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (key == nullptr) return NullArgument(kFn, "key");
    if (value == nullptr && size > 0) return NullArgument(kFn, "value");
    return ToC(rank->state->client->KvSet(
        key, absl::string_view(static_cast<const char*>(value), size)));
  });
}

rankd_status* rankd_kv_get(rankd_rank* rank, const char* key,
                           double timeout_seconds, rankd_bytes** value) {
  return Guarded("rankd_kv_get", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_get";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (key == nullptr) return NullArgument(kFn, "key");
    if (value == nullptr) return NullArgument(kFn, "value");
    // 0 reads without waiting (NOT_FOUND when absent).
    auto timeout = timeout_seconds == 0
                       ? absl::StatusOr<absl::Duration>(absl::ZeroDuration())
                       : ToDuration(timeout_seconds, kFn, "timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    auto got = rank->state->client->KvGet(key, *timeout);
    if (!got.ok()) return ToC(got.status());
    auto bytes = std::make_unique<rankd_bytes>();
    bytes->value = *std::move(got);
    *value = bytes.release();  // rankd_bytes_free
    return nullptr;
  });
}

rankd_status* rankd_kv_add(rankd_rank* rank, const char* key, int64_t delta,
                           int64_t* result) {
  return Guarded("rankd_kv_add", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_add";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (key == nullptr) return NullArgument(kFn, "key");
    if (result == nullptr) return NullArgument(kFn, "result");
    auto added = rank->state->client->KvAdd(key, delta);
    if (!added.ok()) return ToC(added.status());
    *result = *added;
    return nullptr;
  });
}

rankd_status* rankd_kv_delete(rankd_rank* rank, const char* key, int* existed) {
  return Guarded("rankd_kv_delete", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_delete";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (key == nullptr) return NullArgument(kFn, "key");
    auto deleted = rank->state->client->KvDelete(key);
    if (!deleted.ok()) return ToC(deleted.status());
    if (existed != nullptr) *existed = *deleted ? 1 : 0;
    return nullptr;
  });
}

rankd_status* rankd_kv_count(rankd_rank* rank, const char* prefix,
                             uint64_t* count) {
  return Guarded("rankd_kv_count", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_count";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (prefix == nullptr) return NullArgument(kFn, "prefix");
    if (count == nullptr) return NullArgument(kFn, "count");
    auto counted = rank->state->client->KvCount(prefix);
    if (!counted.ok()) return ToC(counted.status());
    *count = *counted;
    return nullptr;
  });
}

rankd_status* rankd_kv_compare_set(rankd_rank* rank, const char* key,
                                   int if_absent, const void* expected,
                                   size_t expected_size, const void* value,
                                   size_t size, int* stored) {
  return Guarded("rankd_kv_compare_set", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_compare_set";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (key == nullptr) return NullArgument(kFn, "key");
    if (value == nullptr && size > 0) return NullArgument(kFn, "value");
    if (!if_absent && expected == nullptr && expected_size > 0) {
      return NullArgument(kFn, "expected");
    }
    if (stored == nullptr) return NullArgument(kFn, "stored");
    std::optional<absl::string_view> want;
    if (!if_absent) {
      want =
          absl::string_view(static_cast<const char*>(expected), expected_size);
    }
    auto set = rank->state->client->KvCompareAndSet(
        key, want, absl::string_view(static_cast<const char*>(value), size));
    if (!set.ok()) return ToC(set.status());
    *stored = *set ? 1 : 0;
    return nullptr;
  });
}

rankd_status* rankd_kv_compare_delete(rankd_rank* rank, const char* key,
                                      const void* expected,
                                      size_t expected_size, int* deleted) {
  return Guarded("rankd_kv_compare_delete", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_kv_compare_delete";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (key == nullptr) return NullArgument(kFn, "key");
    if (expected == nullptr && expected_size > 0) {
      return NullArgument(kFn, "expected");
    }
    auto removed = rank->state->client->KvCompareAndDelete(
        key,
        absl::string_view(static_cast<const char*>(expected), expected_size));
    if (!removed.ok()) return ToC(removed.status());
    if (deleted != nullptr) *deleted = *removed ? 1 : 0;
    return nullptr;
  });
}

rankd_status* rankd_job_health(const rankd_rank* rank) {
  return Guarded("rankd_job_health", [&]() -> rankd_status* {
    if (rank == nullptr) return NullArgument("rankd_job_health", "rank");
    return ToC(rank->state->client->JobHealth());
  });
}

rankd_status* rankd_on_job_failure(rankd_rank* rank, rankd_failure_fn callback,
                                   void* user_data) {
  return Guarded("rankd_on_job_failure", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_on_job_failure";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    if (callback == nullptr) return NullArgument(kFn, "callback");
    rank->state->control_plane->OnJobFailure(
        [callback, user_data](const absl::Status& failure) {
          const std::string message(failure.message());
          callback(user_data, static_cast<rankd_code>(failure.code()),
                   message.c_str());
        });
    return nullptr;
  });
}

uint64_t rankd_rank_epoch(const rankd_rank* rank) {
  return rank == nullptr ? 0 : rank->state->client->epoch();
}

rankd_recovery rankd_rank_recovery(const rankd_rank* rank) {
  if (rank == nullptr || !rank->state->proto.recovers_in_place()) {
    return RANKD_RECOVERY_OFF;
  }
  return rank->state->proto.recovery_by_domain() ? RANKD_RECOVERY_DOMAIN
                                                 : RANKD_RECOVERY_JOB;
}

rankd_status* rankd_rejoin(rankd_rank* rank, uint64_t ended_epoch,
                           double timeout_seconds) {
  return Guarded("rankd_rejoin", [&]() -> rankd_status* {
    constexpr char kFn[] = "rankd_rejoin";
    if (rank == nullptr) return NullArgument(kFn, "rank");
    auto timeout = ToDuration(timeout_seconds, kFn, "timeout_seconds");
    if (!timeout.ok()) return ToC(timeout.status());
    // Through the rank's control plane, so that the failure callbacks
    // (rankd_on_job_failure) start afresh for the new epoch.
    return ToC(
        rank->state->control_plane->Rejoin(ended_epoch, *timeout).status());
  });
}

}  // extern "C"
