// client/rankctl_args.cc: see rankctl_args.h.

#include "client/rankctl_args.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rankd {
namespace {

absl::Status Usage(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(why, " (rankctl --help for usage)"));
}

// Flags that take a value, and where the value goes.
std::string* StringFlag(RankctlArgs& a, absl::string_view name) {
  if (name == "target") return &a.target;
  if (name == "token_file") return &a.token_file;
  if (name == "tls_ca") return &a.tls_ca;
  if (name == "tls_cert") return &a.tls_cert;
  if (name == "tls_key") return &a.tls_key;
  if (name == "tls_server_name") return &a.tls_server_name;
  if (name == "service") return &a.service;
  return nullptr;
}

// Which flags the command line gave, for the checks that depend on the
// command (--service for health only, ...).
struct FlagsSeen {
  bool timeout = false;
  bool service = false;
  bool after = false;
};

// --json, --nojson, --json=BOOL.
absl::Status ParseJsonFlag(absl::string_view name,
                           const std::optional<std::string>& value,
                           RankctlArgs& out) {
  bool on = name == "json";
  if (value.has_value()) {
    if (name == "nojson" || !absl::SimpleAtob(*value, &on)) {
      return Usage(
          absl::StrCat("bad value for --", name, ": \"", *value, "\""));
    }
  }
  out.json = on;
  return absl::OkStatus();
}

// Stores `value` of the value-taking flag `name` (StringFlag, --timeout_ms
// or --after).
absl::Status SetFlagValue(absl::string_view name, std::string value,
                          RankctlArgs& out, FlagsSeen& seen) {
  if (name == "timeout_ms") {
    if (!absl::SimpleAtoi(value, &out.timeout_ms) || out.timeout_ms < 0) {
      return Usage(absl::StrCat(
          "--timeout_ms must be a non-negative integer, got \"", value, "\""));
    }
    seen.timeout = true;
    return absl::OkStatus();
  }
  if (name == "after") {
    if (!absl::SimpleAtoi(value, &out.after)) {
      return Usage(absl::StrCat(
          "--after must be a non-negative integer, got \"", value, "\""));
    }
    seen.after = true;
    return absl::OkStatus();
  }
  if (value.empty()) {
    return Usage(absl::StrCat("--", name, " needs a non-empty value"));
  }
  *StringFlag(out, name) = std::move(value);
  if (name == "service") seen.service = true;
  return absl::OkStatus();
}

// One flag, args[i] ("-x", "--x", "--x=v"), taking its value from
// args[i + 1] when it has no '=' (then advancing i).
absl::Status ParseFlag(const std::vector<std::string>& args, size_t& i,
                       RankctlArgs& out, FlagsSeen& seen) {
  absl::string_view body = args[i];
  body.remove_prefix(absl::StartsWith(body, "--") ? 2 : 1);
  absl::string_view name = body;
  std::optional<std::string> value;
  if (size_t eq = body.find('='); eq != absl::string_view::npos) {
    name = body.substr(0, eq);
    value = std::string(body.substr(eq + 1));
  }
  if (name == "json" || name == "nojson") {
    return ParseJsonFlag(name, value, out);
  }
  if (StringFlag(out, name) == nullptr && name != "timeout_ms" &&
      name != "after") {
    return Usage(absl::StrCat("unknown flag --", name));
  }
  if (!value.has_value()) {
    if (i + 1 >= args.size()) {
      return Usage(absl::StrCat("--", name, " needs a value"));
    }
    value = args[++i];
  }
  return SetFlagValue(name, *std::move(value), out, seen);
}

// credentials create DIR | node-token DIR JOB NODE | rank-token DIR JOB
// NODE RANK. Returns how many positional arguments the command takes.
absl::StatusOr<size_t> ParseCredentialsCommand(
    const std::vector<std::string>& positional, RankctlArgs& out) {
  const std::string sub = positional.size() > 1 ? positional[1] : "";
  size_t expected_args = 0;
  if (sub == "create") {
    out.command = RankctlArgs::Command::kCredentialsCreate;
    expected_args = 3;
  } else if (sub == "node-token") {
    out.command = RankctlArgs::Command::kCredentialsNodeToken;
    expected_args = 5;
  } else if (sub == "rank-token") {
    out.command = RankctlArgs::Command::kCredentialsRankToken;
    expected_args = 6;
  } else {
    return Usage(
        "the credentials commands are: credentials create DIR, "
        "credentials node-token DIR JOB NODE, credentials rank-token DIR "
        "JOB NODE RANK");
  }
  if (positional.size() < expected_args) {
    return Usage(absl::StrCat("credentials ", sub, " needs ",
                              sub == "create"       ? "DIR"
                              : sub == "node-token" ? "DIR JOB NODE"
                                                    : "DIR JOB NODE RANK"));
  }
  out.credentials_dir = positional[2];
  if (sub != "create") {
    out.job_id = positional[3];
    if (!absl::SimpleAtoi(positional[4], &out.node_index)) {
      return Usage(absl::StrCat("NODE must be a node index, got \"",
                                positional[4], "\""));
    }
  }
  if (sub == "rank-token" && !absl::SimpleAtoi(positional[5], &out.rank)) {
    return Usage(
        absl::StrCat("RANK must be a rank, got \"", positional[5], "\""));
  }
  return expected_args;
}

// The command and its arguments (positional, not empty). Returns how many
// positional arguments the command takes.
absl::StatusOr<size_t> ParseCommand(const std::vector<std::string>& positional,
                                    RankctlArgs& out) {
  const std::string& command = positional[0];
  if (command == "status") {
    out.command = RankctlArgs::Command::kStatus;
  } else if (command == "topology") {
    out.command = RankctlArgs::Command::kTopology;
  } else if (command == "members") {
    out.command = RankctlArgs::Command::kMembers;
  } else if (command == "health") {
    out.command = RankctlArgs::Command::kHealth;
  } else if (command == "watch") {
    out.command = RankctlArgs::Command::kWatch;
  } else if (command == "kv") {
    if (positional.size() < 2 || positional[1] != "get") {
      return Usage("the kv command is: kv get KEY");
    }
    if (positional.size() < 3 || positional[2].empty()) {
      return Usage("kv get needs a KEY");
    }
    out.command = RankctlArgs::Command::kKvGet;
    out.key = positional[2];
    return 3;
  } else if (command == "credentials") {
    return ParseCredentialsCommand(positional, out);
  } else {
    return Usage(absl::StrCat("unknown command \"", command, "\""));
  }
  return 1;
}

// The rules that tie flags to the command or to each other.
absl::Status CheckFlagsFitCommand(const RankctlArgs& out,
                                  const FlagsSeen& seen) {
  if (seen.service && out.command != RankctlArgs::Command::kHealth) {
    return Usage("--service applies to the health command only");
  }
  if (seen.after && out.command != RankctlArgs::Command::kWatch) {
    return Usage("--after applies to the watch command only");
  }
  if (seen.timeout && out.timeout_ms == 0 &&
      out.command != RankctlArgs::Command::kWatch) {
    return Usage("--timeout_ms=0 (no deadline) is allowed for watch only");
  }
  if (!out.tls_cert.empty() != !out.tls_key.empty()) {
    return Usage("--tls_cert and --tls_key must be given together");
  }
  if ((!out.tls_cert.empty() || !out.tls_server_name.empty()) &&
      out.tls_ca.empty()) {
    return Usage("--tls_cert, --tls_key and --tls_server_name need --tls_ca");
  }
  return absl::OkStatus();
}

}  // namespace

std::string RankctlUsage() {
  return R"(rankctl: inspect a rankd job through one of its daemons.

usage: rankctl [flags] COMMAND
commands:
  status            the job's state, ranks and nodes joined, rounds, coordinator
  topology          layout, nodes and collective groups
  members           every rank's and node's state
  health            grpc.health.v1 status (SERVING / NOT_SERVING / ...)
  kv get KEY        one key of the job's key-value broker (binary as 0x<hex>)
  watch             job events, one per line, until interrupted or --timeout_ms
  credentials create DIR
                    write a new job's credentials into DIR (node.key,
                    operator.token; mode 0600); never overwrites
  credentials node-token DIR JOB NODE
                    print node NODE's token of job JOB under DIR/node.key, for
                    a daemon that should hold only its own identity
  credentials rank-token DIR JOB NODE RANK
                    print rank RANK's token of job JOB for joining through
                    node NODE (from DIR/node.key, or DIR/node.token of that
                    node), for that rank's process alone ($RANKD_RANK_TOKEN)
flags:
  --target=ADDR        daemon address: host:port, unix:///path.sock, /path.sock
                       (default $RANKD_TARGET, else unix:///run/rankd/rankd.sock)
  --json               print the answer as JSON (proto3 mapping, all fields;
                       watch prints one JSON object per line)
  --timeout_ms=N       connect and call deadline (default 5000); for watch,
                       how long to watch (0 = until interrupted)
  --token_file=PATH    send the credential in PATH (the operator.token of the
                       job's credentials; needed over TCP)
  --tls_ca=PATH        use TLS, trusting the PEM roots in PATH
  --tls_cert=PATH --tls_key=PATH   client certificate for mutual TLS
  --tls_server_name=NAME   name expected in the daemon's certificate
  --service=NAME       health: the service to ask about (default: server)
  --after=SEQ          watch: replay events after sequence number SEQ (default 0)
exit status: 0 ok, 1 RPC or connection error, 2 usage error,
             3 health answered but not SERVING
)";
}

absl::StatusOr<RankctlArgs> ParseRankctlArgs(
    const std::vector<std::string>& args) {
  RankctlArgs out;
  FlagsSeen seen;
  std::vector<std::string> positional;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || !absl::StartsWith(arg, "-") || arg == "-") {
      positional.push_back(arg);
    } else if (arg == "--") {
      flags_done = true;
    } else if (arg == "-h" || arg == "--help" || arg == "-help") {
      out.help = true;
      return out;
    } else if (absl::Status s = ParseFlag(args, i, out, seen); !s.ok()) {
      return s;
    }
  }
  if (positional.empty()) {
    return Usage(
        "missing command (status, topology, members, health, "
        "kv get KEY, watch, credentials)");
  }
  absl::StatusOr<size_t> expected_args = ParseCommand(positional, out);
  if (!expected_args.ok()) return expected_args.status();
  if (positional.size() > *expected_args) {
    return Usage(absl::StrCat("unexpected argument \"",
                              positional[*expected_args], "\" after ",
                              positional[0]));
  }
  if (absl::Status s = CheckFlagsFitCommand(out, seen); !s.ok()) return s;
  return out;
}

}  // namespace rankd
