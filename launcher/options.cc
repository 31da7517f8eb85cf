#include "launcher/options.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/host_port.h"
#include "common/limits.h"
#include "common/topology.h"

namespace rankd::launcher {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// "--name=value", with the value quoted when it is empty or has spaces.
std::string Assignment(absl::string_view name, absl::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) plain = false;
  }
  return plain ? absl::StrCat(name, "=", value)
               : absl::StrCat(name, "=\"", value, "\"");
}

// Strict decimal in [min, max].
absl::StatusOr<int64_t> ParseInteger(absl::string_view name,
                                     absl::string_view value, int64_t min,
                                     int64_t max) {
  bool digits = !value.empty() && value.size() <= 12;
  int64_t n = 0;
  for (char c : value) {
    digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (digits) n = n * 10 + (c - '0');
  }
  if (!digits || n < min || n > max) {
    return Invalid(absl::StrCat(Assignment(name, value),
                                " is not a whole number in ", min, "..", max));
  }
  return n;
}

absl::StatusOr<bool> ParseBool(absl::string_view name,
                               absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return Invalid(
      absl::StrCat(Assignment(name, value), " is not true or false"));
}

absl::Status CheckAddress(absl::string_view name, absl::string_view value,
                          bool port_zero_ok) {
  absl::StatusOr<HostPort> hp = ParseHostPort(std::string(value));
  if (!hp.ok()) {
    return Invalid(absl::StrCat(Assignment(name, value),
                                " is not HOST:PORT: ", hp.status().message()));
  }
  if (hp->port == 0 && !port_zero_ok) {
    return Invalid(
        absl::StrCat(Assignment(name, value), " needs a port in 1..65535"));
  }
  return absl::OkStatus();
}

// Every option: its canonical name, whether it takes a value, the value's
// name in --help (for a boolean, its optional "[=true|false]"), and its
// help.
struct OptionSpec {
  const char* name;
  bool takes_value;
  const char* value_name;
  const char* help;
};

constexpr OptionSpec kOptions[] = {
    {"nproc_per_node", true, "N",
     "Processes (ranks) to start on this node. Default: the reused "
     "daemon's, else 1."},
    {"nnodes", true, "N",
     "Nodes in the job, each running one rankrun. Default: the reused "
     "daemon's, else 1."},
    {"node_rank", true, "K",
     "This node's index, 0..nnodes-1; node 0's daemon coordinates. Default: "
     "RANKD_NODE_INDEX, LWS_WORKER_INDEX or JOB_COMPLETION_INDEX (as rankd "
     "reads them), else the reused daemon's, else 0."},
    {"coordinator", true, "HOST:PORT",
     "Node 0's daemon. Required to start a daemon when nnodes > 1: node 0's "
     "daemon listens on its port and advertises it; the others register "
     "with it."},
    {"tensor_parallel", true, "N",
     "Tensor-parallel degree (alias --tp). "
     "Default 1."},
    {"pipeline_parallel", true, "N",
     "Pipeline-parallel degree (alias --pp). Default 1."},
    {"expert_parallel", true, "N",
     "Expert-parallel degree (alias --ep). Default 1. Data parallel is the "
     "rest of the world size."},
    {"job_id", true, "ID",
     "Job id, [A-Za-z0-9._-]{1,128}, the same on every node. Default: the "
     "reused daemon's, else \"local\"."},
    {"daemon", true, "auto|start|reuse",
     "auto: reuse the daemon that answers on the socket, else start one; "
     "start: always start one (and stop it at the end); reuse: never start "
     "one. Default auto."},
    {"rankd_socket", true, "PATH",
     "The node daemon's Unix socket. Default: /run/rankd/rankd.sock to "
     "reuse; a socket in a private temporary folder for a daemon rankrun "
     "starts."},
    {"target", true, "ADDRESS",
     "A running daemon the ranks reach at ADDRESS (unix:///path, "
     "host:port); implies reusing it. Excludes --rankd_socket."},
    {"credentials_dir", true, "DIR",
     "The job's credentials (rankctl credentials create DIR), shared by "
     "every node: required to start a daemon when nnodes > 1. A single-node "
     "job without one gets fresh credentials in a private temporary folder, "
     "removed once its daemon has read them, before any rank starts. "
     "rankrun mints each rank's own token from it (RANKD_RANK_TOKEN); "
     "without it, a reused daemon must hand them out "
     "(rankd --issue_rank_tokens)."},
    {"rankd", true, "PATH",
     "The rankd binary to start. Default: rankd next to rankrun, else on "
     "PATH."},
    {"rankd_listen", true, "HOST:PORT",
     "TCP address a daemon rankrun starts listens on. Default: "
     "0.0.0.0:<coordinator port> on node 0 of several, a free port "
     "elsewhere (127.0.0.1 for a single node)."},
    {"rankd_advertise", true, "HOST:PORT",
     "Address a daemon rankrun starts advertises to its peers. Default: "
     "the coordinator address on node 0; on other nodes 127.0.0.1:<port> "
     "when the coordinator is on loopback, else rankd's own choice."},
    {"rankd_log", true, "PATH",
     "Append the output of a daemon rankrun starts to PATH. Default: "
     "rankrun's stderr."},
    {"rankd_arg", true, "FLAG",
     "An extra flag for a daemon rankrun starts, e.g. "
     "--rankd_arg=--metrics_listen=0.0.0.0:9421; repeatable."},
    {"daemon_timeout_ms", true, "MS",
     "How long to wait for the daemon to be ready (registered with the "
     "coordinator). Default 60000."},
    {"stop_grace_ms", true, "MS",
     "After SIGTERM, how long a process (or a daemon rankrun started) may "
     "take to exit before SIGKILL. Default 10000."},
    {"exit_delay_ms", true, "MS",
     "How long rankrun stays after every process exited 0, e.g. so that a "
     "reused coordinator stays up for other nodes' leaving ranks. Default "
     "0."},
    {"prefix_output", false, "[=true|false]",
     "On by default: every line a process prints to stdout or stderr comes "
     "out of rankrun's stdout or stderr labelled with its rank, \"[rank 3] "
     "text\". rankrun reads each process's output through pipes and writes "
     "whole lines only, so two ranks' output never mixes within a line; a "
     "last line without a newline is written when the process exits, with "
     "one added, and a line over 64 KiB is split into labelled pieces. "
     "--prefix_output=false: the processes write to rankrun's stdout and "
     "stderr directly, byte for byte (a terminal stays a terminal, for "
     "prompts and progress bars), and a line a rank writes in pieces (as "
     "print() does unbuffered: the text, then the newline) can then mix "
     "with another rank's."},
    {"max_restarts", true, "N",
     "Restart a local rank that exits non-zero or by a signal, into the "
     "same rank (same RANK, LOCAL_RANK and rank token), at most N times "
     "per rank; RANKD_RESTART_COUNT tells the new process how many times "
     "its rank was restarted. A rank that exits 0 is never restarted, nor "
     "anything once rankrun is stopping (a signal, a rank out of restarts, "
     "the daemon's exit). Above 0, a daemon rankrun starts runs with "
     "--recovery=on, so that the job waits for the replacement (RECOVERING "
     "at the next epoch) instead of failing; a reused daemon must run with "
     "it already. The other ranks must rejoin the new epoch themselves "
     "(docs/operations.md, \"Restarting failed ranks\"). Default 0: the "
     "first failure stops the job."},
    {"restart_backoff_ms", true, "MS",
     "Wait (k - 1) times MS before restart k of a rank (--max_restarts): "
     "the first restart at once, later ones backing off. Default 1000."},
    {"recovery", true, "on|domain",
     "--recovery of a daemon rankrun starts with --max_restarts above 0: "
     "on (a loss moves the whole job to its next epoch) or domain (only "
     "the lost rank's data-parallel replica re-forms; the others serve "
     "on). Default on."},
    {"recovery_deadline_ms", true, "MS",
     "--recovery_deadline_ms of a daemon rankrun starts: how long the job "
     "may stay RECOVERING after a loss before it fails. Needs "
     "--max_restarts above 0. Default: rankd's."},
    {"help", false, nullptr, "Print this help and exit 0 (also -h)."},
};

// Short names, as torchrun users know them.
constexpr std::pair<const char*, const char*> kAliases[] = {
    {"tp", "tensor_parallel"},
    {"pp", "pipeline_parallel"},
    {"ep", "expert_parallel"},
    {"node_index", "node_rank"},
};

const OptionSpec* FindOption(const std::string& name) {
  std::string canonical = name;
  for (const auto& [alias, full] : kAliases) {
    if (name == alias) canonical = full;
  }
  for (const OptionSpec& spec : kOptions) {
    if (canonical == spec.name) return &spec;
  }
  return nullptr;
}

// Node index from the variables rankd itself reads; they must agree.
absl::Status NodeRankFromEnv(const EnvLookup& env, LaunchOptions& o) {
  for (const char* name :
       {"RANKD_NODE_INDEX", "LWS_WORKER_INDEX", "JOB_COMPLETION_INDEX"}) {
    std::optional<std::string> value = env(name);
    if (!value.has_value() || value->empty()) continue;
    absl::StatusOr<int64_t> n = ParseInteger(name, *value, 0, kMaxWorldSize);
    if (!n.ok()) return n.status();
    if (o.node_rank.has_value() && *o.node_rank != *n) {
      return Invalid(absl::StrCat(o.node_rank_source, "=", *o.node_rank,
                                  " but ", name, "=", *n,
                                  "; they must agree (set --node_rank)"));
    }
    o.node_rank = static_cast<uint32_t>(*n);
    o.node_rank_source = name;
  }
  return absl::OkStatus();
}

// Applies one option. `value` is "" for a boolean given without "=".
absl::Status Apply(const OptionSpec& spec, const std::string& shown,
                   const std::optional<std::string>& value, LaunchOptions& o) {
  const std::string name = spec.name;
  const std::string v = value.value_or("");
  auto count = [&](std::optional<uint32_t>& field) -> absl::Status {
    absl::StatusOr<int64_t> n = ParseInteger(shown, v, 1, kMaxWorldSize);
    if (!n.ok()) return n.status();
    field = static_cast<uint32_t>(*n);
    return absl::OkStatus();
  };
  auto millis = [&](int64_t& field, int64_t min) -> absl::Status {
    absl::StatusOr<int64_t> n = ParseInteger(shown, v, min, 3'600'000);
    if (!n.ok()) return n.status();
    field = *n;
    return absl::OkStatus();
  };
  if (name == "nproc_per_node") return count(o.nproc_per_node);
  if (name == "nnodes") return count(o.nnodes);
  if (name == "tensor_parallel") return count(o.tensor_parallel);
  if (name == "pipeline_parallel") return count(o.pipeline_parallel);
  if (name == "expert_parallel") return count(o.expert_parallel);
  if (name == "node_rank") {
    absl::StatusOr<int64_t> n = ParseInteger(shown, v, 0, kMaxWorldSize - 1);
    if (!n.ok()) return n.status();
    o.node_rank = static_cast<uint32_t>(*n);
    o.node_rank_source = shown;
    return absl::OkStatus();
  }
  if (name == "coordinator") {
    if (absl::Status s = CheckAddress(shown, v, false); !s.ok()) return s;
    absl::StatusOr<HostPort> hp = ParseHostPort(v);
    if (IsWildcardHost(hp->host)) {
      return Invalid(absl::StrCat(Assignment(shown, v),
                                  " must name a host the other nodes can "
                                  "reach, not a wildcard address"));
    }
    o.coordinator = v;
    return absl::OkStatus();
  }
  if (name == "job_id") {
    if (!IsJobId(v)) {
      return Invalid(absl::StrCat(Assignment(shown, v),
                                  " is not a job id: use 1 to 128 of A-Z a-z "
                                  "0-9 . _ -"));
    }
    o.job_id = v;
    return absl::OkStatus();
  }
  if (name == "daemon") {
    if (v == "auto") {
      o.daemon = DaemonMode::kAuto;
    } else if (v == "start") {
      o.daemon = DaemonMode::kStart;
    } else if (v == "reuse") {
      o.daemon = DaemonMode::kReuse;
    } else {
      return Invalid(
          absl::StrCat(Assignment(shown, v), ": use auto, start or reuse"));
    }
    return absl::OkStatus();
  }
  if (name == "rankd_socket") {
    if (!absl::StartsWith(v, "/")) {
      return Invalid(
          absl::StrCat(Assignment(shown, v), " must be an absolute path"));
    }
    if (v.size() > kMaxUnixSocketPathBytes) {
      return Invalid(absl::StrCat(Assignment(shown, v), " is longer than ",
                                  kMaxUnixSocketPathBytes,
                                  " bytes, the limit for Unix sockets"));
    }
    o.rankd_socket = v;
    return absl::OkStatus();
  }
  if (name == "target") {
    if (v.empty()) return Invalid(absl::StrCat(shown, " needs an address"));
    o.target = v;
    return absl::OkStatus();
  }
  if (name == "credentials_dir") {
    if (v.empty()) return Invalid(absl::StrCat(shown, " needs a folder"));
    o.credentials_dir = v;
    return absl::OkStatus();
  }
  if (name == "rankd") {
    if (v.empty()) return Invalid(absl::StrCat(shown, " needs a path"));
    o.rankd = v;
    return absl::OkStatus();
  }
  if (name == "rankd_listen") {
    if (absl::Status s = CheckAddress(shown, v, true); !s.ok()) return s;
    o.rankd_listen = v;
    return absl::OkStatus();
  }
  if (name == "rankd_advertise") {
    if (absl::Status s = CheckAddress(shown, v, false); !s.ok()) return s;
    o.rankd_advertise = v;
    return absl::OkStatus();
  }
  if (name == "rankd_log") {
    if (v.empty()) return Invalid(absl::StrCat(shown, " needs a path"));
    o.rankd_log = v;
    return absl::OkStatus();
  }
  if (name == "rankd_arg") {
    if (!absl::StartsWith(v, "--")) {
      return Invalid(absl::StrCat(Assignment(shown, v),
                                  " must be a rankd flag, e.g. "
                                  "--rankd_arg=--metrics_listen=:9421"));
    }
    o.rankd_args.push_back(v);
    return absl::OkStatus();
  }
  if (name == "daemon_timeout_ms") return millis(o.daemon_timeout_ms, 1);
  if (name == "stop_grace_ms") return millis(o.stop_grace_ms, 0);
  if (name == "exit_delay_ms") return millis(o.exit_delay_ms, 0);
  if (name == "max_restarts") {
    absl::StatusOr<int64_t> n = ParseInteger(shown, v, 0, kMaxRestartsLimit);
    if (!n.ok()) return n.status();
    o.max_restarts = static_cast<uint32_t>(*n);
    return absl::OkStatus();
  }
  if (name == "restart_backoff_ms") return millis(o.restart_backoff_ms, 0);
  if (name == "recovery") {
    if (v != "on" && v != "domain") {
      return Invalid(absl::StrCat(shown, "=", v,
                                  " is not a recovery mode rankrun starts a "
                                  "daemon with: on or domain"));
    }
    o.recovery = std::string(v);
    return absl::OkStatus();
  }
  if (name == "recovery_deadline_ms") {
    int64_t ms = 0;
    if (absl::Status s = millis(ms, 1); !s.ok()) return s;
    o.recovery_deadline_ms = ms;
    return absl::OkStatus();
  }
  if (name == "prefix_output") {
    absl::StatusOr<bool> b =
        value.has_value() ? ParseBool(shown, v) : absl::StatusOr<bool>(true);
    if (!b.ok()) return b.status();
    o.prefix_output = *b;
    return absl::OkStatus();
  }
  return Invalid(absl::StrCat("internal: unhandled option ", shown));
}

// The rules between options that need no daemon.
absl::Status Validate(const LaunchOptions& o) {
  if (o.command.empty()) {
    return Invalid(
        "missing PROGRAM: rankrun [OPTIONS] [--] PROGRAM [ARGS...] (see "
        "--help)");
  }
  if (o.node_rank.has_value() && o.nnodes.has_value() &&
      *o.node_rank >= *o.nnodes) {
    return Invalid(absl::StrCat(o.node_rank_source, "=", *o.node_rank,
                                " must be below --nnodes(", *o.nnodes, ")"));
  }
  const uint64_t nnodes = o.nnodes.value_or(1);
  if (o.nproc_per_node.has_value() &&
      nnodes * *o.nproc_per_node > kMaxWorldSize) {
    return Invalid(absl::StrCat(
        "--nnodes(", nnodes, ") * --nproc_per_node(", *o.nproc_per_node,
        ") exceeds the largest world size ", kMaxWorldSize));
  }
  if (!o.target.empty() && !o.rankd_socket.empty()) {
    return Invalid(absl::StrCat("--target=", o.target, " and --rankd_socket=",
                                o.rankd_socket, " exclude each other"));
  }
  if (!o.target.empty() && o.daemon == DaemonMode::kStart) {
    return Invalid(absl::StrCat("--target=", o.target,
                                " names a running daemon; it cannot be used "
                                "with --daemon=start (use --rankd_socket)"));
  }
  const bool may_start = o.daemon != DaemonMode::kReuse && o.target.empty();
  if (!may_start) {
    for (const auto& [set, name] :
         {std::pair{!o.rankd_listen.empty(), "--rankd_listen"},
          std::pair{!o.rankd_advertise.empty(), "--rankd_advertise"},
          std::pair{!o.rankd_args.empty(), "--rankd_arg"},
          std::pair{!o.rankd_log.empty(), "--rankd_log"},
          std::pair{o.recovery_deadline_ms.has_value(),
                    "--recovery_deadline_ms"},
          std::pair{o.recovery.has_value(), "--recovery"},
          std::pair{!o.rankd.empty(), "--rankd"}}) {
      if (set) {
        return Invalid(
            absl::StrCat(name, " is for a daemon rankrun starts, but ",
                         o.target.empty() ? "--daemon=reuse" : "--target",
                         " never starts one"));
      }
    }
  }
  if (o.recovery_deadline_ms.has_value() && o.max_restarts == 0) {
    return Invalid(absl::StrCat(
        "--recovery_deadline_ms=", *o.recovery_deadline_ms,
        " needs --max_restarts above 0 (without restarts the daemon runs "
        "with --recovery=off)"));
  }
  if (o.recovery.has_value() && o.max_restarts == 0) {
    return Invalid(absl::StrCat(
        "--recovery=", *o.recovery,
        " needs --max_restarts above 0 (without restarts the daemon runs "
        "with --recovery=off)"));
  }
  for (const std::string& flag : o.rankd_args) {
    if (o.max_restarts > 0 && (absl::StartsWith(flag, "--recovery=") ||
                               absl::StartsWith(flag, "--recovery_deadline"))) {
      return Invalid(absl::StrCat(
          "--rankd_arg=", flag, " with --max_restarts=", o.max_restarts,
          ": rankrun sets the daemon's --recovery itself (use --recovery=on|"
          "domain and --recovery_deadline_ms)"));
    }
  }
  if (o.daemon == DaemonMode::kStart && nnodes > 1) {
    if (o.coordinator.empty()) {
      return Invalid(absl::StrCat(
          "--nnodes=", nnodes,
          " needs --coordinator=HOST:PORT (node 0's daemon) to start this "
          "node's daemon"));
    }
    if (o.credentials_dir.empty()) {
      return Invalid(absl::StrCat(
          "--nnodes=", nnodes,
          " needs --credentials_dir=DIR, the job's credentials shared by "
          "every node (make them once with `rankctl credentials create "
          "DIR`)"));
    }
  }
  return absl::OkStatus();
}

// `text` in lines of at most `width` columns, each indented by `indent`.
std::string Wrap(absl::string_view text, size_t indent, size_t width) {
  std::string out;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty())
    absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

}  // namespace

absl::StatusOr<ParsedCommandLine> ParseOptions(
    const std::vector<std::string>& args, const EnvLookup& env) {
  ParsedCommandLine parsed;
  LaunchOptions& o = parsed.options;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h") {
      parsed.help = true;
      return parsed;
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") break;
    if (!absl::StartsWith(arg, "--")) {
      return Invalid(absl::StrCat("unknown option ", arg,
                                  " (options start with --; see --help)"));
    }
    std::string body = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      value = body.substr(eq + 1);
      body.resize(eq);
    }
    std::string name = body;
    for (char& c : name) c = c == '-' ? '_' : c;
    const OptionSpec* spec = FindOption(name);
    const std::string shown = absl::StrCat("--", body);
    if (spec == nullptr) {
      return Invalid(absl::StrCat("unknown option ", shown, " (see --help)"));
    }
    if (std::string(spec->name) == "help") {
      parsed.help = true;
      return parsed;
    }
    if (spec->takes_value && !value.has_value()) {
      if (i + 1 >= args.size()) {
        return Invalid(absl::StrCat(shown, " needs a value: ", shown, "=",
                                    spec->value_name));
      }
      value = args[++i];
    }
    if (absl::Status s = Apply(*spec, shown, value, o); !s.ok()) return s;
  }
  o.command.assign(args.begin() + static_cast<ptrdiff_t>(i), args.end());
  if (o.node_rank_source.empty()) {
    if (absl::Status s = NodeRankFromEnv(env, o); !s.ok()) return s;
  }
  if (absl::Status s = Validate(o); !s.ok()) return s;
  return parsed;
}

std::string HelpText() {
  std::string text =
      "Usage: rankrun [OPTIONS] [--] PROGRAM [ARGS...]\n"
      "\n"
      "Starts --nproc_per_node processes of PROGRAM on this node as ranks of "
      "a rankd\njob, like torchrun: starts (or reuses) the node's rankd "
      "daemon, gives every\nprocess the environment the rankd libraries "
      "read, forwards SIGINT, SIGTERM\nand SIGHUP to them, and when one "
      "fails stops the others and exits non-zero\nnaming it (or, with "
      "--max_restarts, first restarts it into its rank). A\nPROGRAM "
      "ending in .py runs under $RANKD_PYTHON, else /usr/bin/python3. Run "
      "\none rankrun per node.\n"
      "\n"
      "Options (--name=value or --name value; '-' and '_' alike in names):\n";
  for (const OptionSpec& spec : kOptions) {
    std::string head = absl::StrCat("  --", spec.name);
    if (spec.takes_value) {
      absl::StrAppend(&head, "=", spec.value_name);
    } else if (spec.value_name != nullptr) {
      absl::StrAppend(&head, spec.value_name);  // a boolean's "[=true|false]"
    }
    absl::StrAppend(&text, head, "\n", Wrap(spec.help, 6, 78));
  }
  absl::StrAppend(
      &text,
      "\n"
      "Every process gets, besides rankrun's own environment:\n"
      "  RANKD_TARGET          the node daemon's address (unix:///...)\n"
      "  RANKD_JOB_ID          the job id\n"
      "  RANKD_LOCAL_RANK      0..nproc_per_node-1 (also LOCAL_RANK)\n"
      "  RANKD_RANK            node_rank * nproc_per_node + local rank, the "
      "rank the\n"
      "                        daemon assigns (also RANK)\n"
      "  RANKD_WORLD_SIZE      nnodes * nproc_per_node (also WORLD_SIZE)\n"
      "  RANKD_NPROC_PER_NODE  nproc_per_node (also LOCAL_WORLD_SIZE)\n"
      "  RANKD_NODE_RANK       this node's index (also GROUP_RANK)\n"
      "  RANKD_RANK_TOKEN      this rank's own token (rank-<rank>.<mac>), for "
      "it "
      "alone\n"
      "  RANKD_RESTART_COUNT   how many times rankrun restarted this rank "
      "before\n"
      "                        (0 in its first process; --max_restarts)\n"
      "In ARGS, {local_rank}, {rank}, {node_rank}, {world_size}, "
      "{nproc_per_node},\n{job_id} and {target} are replaced by the "
      "process's values, for programs\nthat take them as flags, e.g. "
      "--local_rank={local_rank}.\n"
      "\n"
      "Exit status: 0 when every process exited 0; the first failed "
      "process's status\n(128 + N when it was killed by signal N); 2 for a "
      "bad command line or a\nPROGRAM that cannot run; 1 when rankrun "
      "itself failed (e.g. its daemon did\nnot become ready).\n"
      "\n"
      "Examples:\n"
      "  rankrun --nproc_per_node=4 -- python3 train.py\n"
      "  rankrun --nnodes=2 --node_rank=0 --coordinator=node0:7421 \\\n"
      "      --credentials_dir=/shared/creds --nproc_per_node=8 --tp=8 "
      "serve.py\n");
  return text;
}

absl::Duration RestartBackoff(const LaunchOptions& options, uint32_t restart) {
  if (restart <= 1) return absl::ZeroDuration();
  return absl::Milliseconds(options.restart_backoff_ms) * (restart - 1);
}

}  // namespace rankd::launcher
