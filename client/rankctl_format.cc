// client/rankctl_format.cc: see rankctl_format.h.

#include "client/rankctl_format.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/time_format.h"
#include "google/protobuf/util/json_util.h"

namespace rankd {

std::string TerminalSafe(absl::string_view text) {
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto c = static_cast<unsigned char>(out[i]);
    if (c < ' ' || c == 0x7f) {
      out[i] = ' ';
    } else if (c == 0xc2 && i + 1 < out.size() &&
               static_cast<unsigned char>(out[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(out[i + 1]) <= 0x9f) {
      // A C1 control character in UTF-8 (U+0080-U+009F: U+009B is CSI).
      out[i] = out[i + 1] = ' ';
      ++i;
    }
  }
  return out;
}

namespace {

std::string Cell(absl::string_view text) {
  if (text.empty()) return "-";
  return TerminalSafe(text);
}

std::string StripPrefix(std::string name, absl::string_view prefix, int value) {
  if (name.empty()) {
    // Value unknown to this build (newer daemon).
    std::string type(prefix);
    if (!type.empty() && type.back() == '_') type.pop_back();
    return absl::StrCat(type, "(", value, ")");
  }
  if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
  return name;
}

std::string Uint(uint64_t v) { return absl::StrCat(v); }

}  // namespace

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  const size_t columns = header.size();
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size() + 1);
  cells.push_back({});
  for (const std::string& h : header) cells.back().push_back(Cell(h));
  for (const auto& row : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < columns; ++i) {
      line.push_back(i < row.size() ? Cell(row[i]) : "-");
    }
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(columns, 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < columns; ++i) {
      width[i] = std::max(width[i], line[i].size());
    }
  }
  std::string out;
  for (const auto& line : cells) {
    for (size_t i = 0; i < columns; ++i) {
      out += line[i];
      if (i + 1 < columns) out.append(width[i] - line[i].size() + 2, ' ');
    }
    out += '\n';
  }
  return out;
}

std::string FormatFields(
    const std::vector<std::pair<std::string, std::string>>& fields) {
  size_t width = 0;
  for (const auto& [name, value] : fields) width = std::max(width, name.size());
  std::string out;
  for (const auto& [name, value] : fields) {
    absl::StrAppend(&out, name, std::string(width - name.size() + 2, ' '),
                    Cell(value), "\n");
  }
  return out;
}

std::string FormatRankList(
    const google::protobuf::RepeatedField<uint32_t>& ranks) {
  if (ranks.empty()) return "-";
  std::vector<std::string> parts;
  int i = 0;
  while (i < ranks.size()) {
    int j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j == i) {
      parts.push_back(absl::StrCat(ranks[i]));
    } else {
      parts.push_back(absl::StrCat(ranks[i], "-", ranks[j]));
    }
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

std::string FormatMillis(int64_t ms) {
  if (ms < 0) return "-";
  return absl::FormatDuration(absl::Milliseconds(ms));
}

std::string FormatDevice(const v1::DeviceInfo& device) {
  if (device.kind().empty()) return "-";
  std::string out = device.kind();
  if (device.kind() != "cpu" || device.index() != 0) {
    absl::StrAppend(&out, ":", device.index());
  }
  if (!device.uuid().empty()) absl::StrAppend(&out, " (", device.uuid(), ")");
  return out;
}

std::string JobStateName(v1::JobState state) {
  return StripPrefix(v1::JobState_Name(state), "JOB_STATE_", state);
}
std::string MemberStateName(v1::MemberState state) {
  return StripPrefix(v1::MemberState_Name(state), "MEMBER_STATE_", state);
}
std::string NodeStateName(v1::NodeState state) {
  return StripPrefix(v1::NodeState_Name(state), "NODE_STATE_", state);
}
std::string GroupKindName(v1::GroupKind kind) {
  return StripPrefix(v1::GroupKind_Name(kind), "GROUP_KIND_", kind);
}
std::string EventKindName(v1::EventKind kind) {
  return StripPrefix(v1::EventKind_Name(kind), "EVENT_KIND_", kind);
}

std::string FormatJobStatus(const v1::JobStatus& job) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"JOB", job.job_id()},
      {"INCARNATION", Uint(job.job_incarnation())},
      {"STATE", JobStateName(job.state())},
  };
  // Epochs (issue 38): shown from the first recovery on, so that a job
  // without --recovery=on (always epoch 1) reads as before.
  if (job.epoch() > 1 || job.state() == v1::JOB_STATE_RECOVERING) {
    fields.push_back({"EPOCH", Uint(job.epoch())});
  }
  if (job.state() == v1::JOB_STATE_RECOVERING &&
      job.recovery_deadline_left_ms() > 0) {
    fields.push_back(
        {"RECOVERY", absl::StrCat("fails in ",
                                  FormatMillis(job.recovery_deadline_left_ms()),
                                  " unless every lost slot is taken")});
  }
  // Recovery by domain (docs/contract.md, "Data-parallel domains"): each
  // data-parallel replica's state.
  if (job.domains_size() > 0) {
    std::vector<std::string> parts = {absl::StrCat(
        job.serving_domains(), "/", job.domains_size(), " serving")};
    for (const v1::DomainStatus& d : job.domains()) {
      if (d.state() == v1::DOMAIN_STATE_RECOVERING) {
        std::string part = absl::StrCat("domain ", d.domain(),
                                        " recovering at epoch ", d.epoch());
        if (d.lost_ranks_size() > 0) {
          absl::StrAppend(&part, ", lost rank",
                          d.lost_ranks_size() > 1 ? "s " : " ",
                          FormatRankList(d.lost_ranks()));
        }
        if (d.recovery_deadline_left_ms() > 0) {
          absl::StrAppend(&part, ", fails the job in ",
                          FormatMillis(d.recovery_deadline_left_ms()));
        }
        parts.push_back(std::move(part));
      } else {
        parts.push_back(absl::StrCat("domain ", d.domain(),
                                     " serving at epoch ", d.epoch(),
                                     " from round ", d.first_world_round()));
      }
    }
    fields.push_back({"DOMAINS", absl::StrJoin(parts, "; ")});
  }
  if (job.state() == v1::JOB_STATE_FAILED || !job.failure().empty()) {
    fields.push_back({"FAILURE", job.failure()});
  }
  fields.push_back({"RANKS", absl::StrCat(job.joined_ranks(), "/",
                                          job.world_size(), " joined")});
  fields.push_back({"NODES", absl::StrCat(job.registered_nodes(), "/",
                                          job.nnodes(), " registered")});
  fields.push_back(
      {"ROUNDS", absl::StrCat(job.completed_rounds(), " completed")});
  fields.push_back(
      {"SERVED_BY",
       absl::StrCat("node ", job.served_by_node(),
                    job.served_by_coordinator() ? " (coordinator)" : "")});
  fields.push_back({"COORDINATOR", job.coordinator_address()});
  fields.push_back({"UPTIME", FormatMillis(job.uptime_ms())});
  return FormatFields(fields);
}

std::string FormatTopology(const v1::Topology& topology) {
  const v1::ParallelTopology& p = topology.topology();
  std::string out = FormatFields({
      {"JOB", topology.job_id()},
      {"WORLD_SIZE", Uint(topology.world_size())},
      {"NODES", absl::StrCat(topology.nnodes(), " x ",
                             topology.nproc_per_node(), " ranks per node")},
      {"PARALLELISM",
       absl::StrCat("tensor=", p.tensor(), " pipeline=", p.pipeline(),
                    " expert=", p.expert(), " data=", p.data())},
  });
  std::vector<v1::NodeInfo> nodes(topology.nodes().begin(),
                                  topology.nodes().end());
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const v1::NodeInfo& a, const v1::NodeInfo& b) {
                     return a.node_index() < b.node_index();
                   });
  std::vector<std::vector<std::string>> node_rows;
  for (const v1::NodeInfo& n : nodes) {
    std::vector<std::string> devices;
    for (const v1::DeviceInfo& d : n.devices()) {
      devices.push_back(FormatDevice(d));
    }
    node_rows.push_back({Uint(n.node_index()), n.hostname(), n.address(),
                         n.pod_name(), Uint(n.local_ranks()),
                         absl::StrJoin(devices, ",")});
  }
  absl::StrAppend(
      &out, "\n",
      FormatTable({"NODE", "HOST", "ADDRESS", "POD", "LOCAL_RANKS", "DEVICES"},
                  node_rows));
  std::vector<std::vector<std::string>> group_rows;
  for (const v1::CollectiveGroup& g : topology.groups()) {
    group_rows.push_back({Uint(g.id()), GroupKindName(g.kind()),
                          Uint(g.members_size()), FormatRankList(g.members())});
  }
  absl::StrAppend(
      &out, "\n",
      FormatTable({"GROUP", "KIND", "SIZE", "MEMBERS"}, group_rows));
  return out;
}

std::string FormatMembers(const v1::MemberList& list) {
  std::vector<v1::MemberStatus> members(list.members().begin(),
                                        list.members().end());
  std::stable_sort(members.begin(), members.end(),
                   [](const v1::MemberStatus& a, const v1::MemberStatus& b) {
                     return a.rank() < b.rank();
                   });
  std::vector<std::vector<std::string>> member_rows;
  for (const v1::MemberStatus& m : members) {
    member_rows.push_back({Uint(m.rank()), Uint(m.node_index()),
                           Uint(m.local_rank()), MemberStateName(m.state()),
                           Uint(m.round()), m.pid() == 0 ? "-" : Uint(m.pid()),
                           FormatDevice(m.device()), m.detail()});
  }
  std::vector<v1::NodeStatus> nodes(list.nodes().begin(), list.nodes().end());
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const v1::NodeStatus& a, const v1::NodeStatus& b) {
                     return a.node_index() < b.node_index();
                   });
  std::vector<std::vector<std::string>> node_rows;
  for (const v1::NodeStatus& n : nodes) {
    node_rows.push_back({Uint(n.node_index()), NodeStateName(n.state()),
                         n.hostname(), n.address(),
                         FormatMillis(n.heartbeat_age_ms()), n.detail()});
  }
  return absl::StrCat(FormatTable({"RANK", "NODE", "LOCAL", "STATE", "ROUND",
                                   "PID", "DEVICE", "DETAIL"},
                                  member_rows),
                      "\n",
                      FormatTable({"NODE", "STATE", "HOST", "ADDRESS",
                                   "HEARTBEAT_AGE", "DETAIL"},
                                  node_rows));
}

std::string FormatEvent(const v1::JobEvent& event) {
  std::string out =
      absl::StrCat("#", event.sequence(), " ",
                   absl::FormatTime(kTimestampFormat,
                                    absl::FromUnixMillis(event.time_unix_ms()),
                                    absl::UTCTimeZone()),
                   " ", EventKindName(event.kind()));
  if (event.has_node_index())
    absl::StrAppend(&out, " node ", event.node_index());
  if (event.ranks_size() > 0) {
    absl::StrAppend(&out, event.ranks_size() == 1 ? " rank " : " ranks ",
                    FormatRankList(event.ranks()));
  }
  if (!event.message().empty()) {
    absl::StrAppend(&out, " ", TerminalSafe(event.message()));
  }
  // As the daemon's log: named from the first recovery on.
  if (event.epoch() > 1) absl::StrAppend(&out, " (epoch ", event.epoch(), ")");
  return out;
}

std::string FormatKvValue(absl::string_view value) {
  bool printable = std::all_of(value.begin(), value.end(), [](char c) {
    return (c >= ' ' && c <= '~') || c == '\t';
  });
  if (printable) return std::string(value);
  return absl::StrCat("0x", absl::BytesToHexString(value));
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   bool multiline) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.add_whitespace = multiline;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ", message.GetTypeName(),
                     " as JSON: ", std::string(status.message())));
  }
  return out;
}

}  // namespace rankd
