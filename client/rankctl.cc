// client/rankctl.cc: rankctl, the operator's command-line view of a rankd
// job. See RankctlUsage() in rankctl_args.cc for commands, flags and exit
// statuses. Output formatting lives in rankctl_format.h.
//
// Depends on //client:admin_client and the rankctl_args / rankctl_format
// libraries.

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/admin_client.h"
#include "client/channel.h"
#include "client/rankctl_args.h"
#include "client/rankctl_format.h"
#include "common/credentials.h"
#include "rankd/v1/admin.pb.h"

namespace rankd {
namespace {

int Fail(const absl::Status& status) {
  // The message may come from the daemon: no escape sequences through.
  std::cerr << "rankctl: " << TerminalSafe(status.message()) << " ["
            << absl::StatusCodeToString(status.code()) << "]\n";
  return kExitRpcError;
}

int UsageError(absl::string_view message) {
  std::cerr << "rankctl: " << message << "\n";
  return kExitUsage;
}

// Prints `message` as JSON or, when --json is off, as `text`.
template <typename Message, typename Formatter>
int Print(const RankctlArgs& args, const absl::StatusOr<Message>& message,
          Formatter text) {
  if (!message.ok()) return Fail(message.status());
  if (args.json) {
    absl::StatusOr<std::string> json = ToJson(*message, /*multiline=*/true);
    if (!json.ok()) return Fail(json.status());
    std::cout << *json;
    if (json->empty() || json->back() != '\n') std::cout << "\n";
  } else {
    std::cout << text(*message);
  }
  std::cout.flush();
  return std::cout.good() ? kExitOk : kExitRpcError;
}

int Run(const RankctlArgs& args) {
  ClientOptions options;
  options.target = args.target.empty() ? DefaultTarget() : args.target;
  if (args.command == RankctlArgs::Command::kCredentialsCreate) {
    if (auto s = CreateCredentials(args.credentials_dir); !s.ok()) {
      return Fail(s);
    }
    std::cout << "wrote " << args.credentials_dir << "/{" << kNodeKeyFile << ","
              << kOperatorTokenFile << "}\n";
    return kExitOk;
  }
  if (args.command == RankctlArgs::Command::kCredentialsRankToken) {
    // From the node key, or from the node's own token when that is all the
    // folder holds (a node's folder).
    std::string node_token;
    auto key = ReadCredentialFile(args.credentials_dir, kNodeKeyFile);
    if (key.ok()) {
      node_token = NodeToken(*key, args.job_id, args.node_index);
    } else if (absl::IsNotFound(key.status())) {
      auto token = ReadCredentialFile(args.credentials_dir, kNodeTokenFile);
      if (!token.ok()) return Fail(token.status());
      if (!absl::StartsWith(*token,
                            absl::StrCat("node-", args.node_index, "."))) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            args.credentials_dir, "/", kNodeTokenFile, " is not node ",
            args.node_index, "'s token, and there is no ", kNodeKeyFile)));
      }
      node_token = *std::move(token);
    } else {
      return Fail(key.status());
    }
    std::cout << RankToken(node_token, args.job_id, args.rank) << "\n";
    return kExitOk;
  }
  if (args.command == RankctlArgs::Command::kCredentialsNodeToken) {
    auto key = ReadCredentialFile(args.credentials_dir, kNodeKeyFile);
    if (!key.ok()) return Fail(key.status());
    std::cout << NodeToken(*key, args.job_id, args.node_index) << "\n";
    return kExitOk;
  }
  absl::Duration timeout = absl::Milliseconds(args.timeout_ms);
  if (args.timeout_ms == 0) timeout = absl::Milliseconds(5000);
  options.connect_timeout = timeout;
  options.call_timeout = timeout;
  if (!args.token_file.empty()) {
    // A credential file's checks: a regular file of one short line (never
    // a device or a pipe, which would be read without end).
    absl::StatusOr<std::string> token = ReadCredentialPath(args.token_file);
    if (!token.ok()) {
      return UsageError(
          absl::StrCat("--token_file: ", token.status().message()));
    }
    options.bearer_token = *std::move(token);
  }
  options.tls_ca_file = args.tls_ca;
  options.tls_cert_file = args.tls_cert;
  options.tls_key_file = args.tls_key;
  options.tls_server_name = args.tls_server_name;

  absl::StatusOr<std::unique_ptr<AdminClient>> client =
      AdminClient::Connect(options);
  if (!client.ok()) {
    if (client.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageError(client.status().message());
    }
    return Fail(client.status());
  }
  const AdminClient& admin = **client;

  switch (args.command) {
    case RankctlArgs::Command::kStatus:
      return Print(args, admin.GetJob(), FormatJobStatus);
    case RankctlArgs::Command::kTopology:
      return Print(args, admin.GetTopology(), FormatTopology);
    case RankctlArgs::Command::kMembers:
      return Print(args, admin.ListMembers(), FormatMembers);
    case RankctlArgs::Command::kKvGet: {
      absl::StatusOr<std::string> value = admin.KvGet(args.key);
      if (!value.ok()) return Fail(value.status());
      v1::AdminKvGetResponse response;
      response.set_value(*value);
      return Print(args, absl::StatusOr<v1::AdminKvGetResponse>(response),
                   [](const v1::AdminKvGetResponse& r) {
                     return absl::StrCat(FormatKvValue(r.value()), "\n");
                   });
    }
    case RankctlArgs::Command::kHealth: {
      absl::StatusOr<std::string> status = admin.Health(args.service);
      if (!status.ok()) return Fail(status.status());
      if (args.json) {
        std::cout << "{\n  \"status\": \"" << *status << "\"\n}\n";
      } else {
        std::cout << *status << "\n";
      }
      std::cout.flush();
      return *status == "SERVING" ? kExitOk : kExitNotServing;
    }
    case RankctlArgs::Command::kWatch: {
      absl::Status failed;
      absl::Status status = admin.WatchEvents(
          args.after,
          [&](const v1::JobEvent& event) {
            if (args.json) {
              absl::StatusOr<std::string> json =
                  ToJson(event, /*multiline=*/false);
              if (!json.ok()) {
                failed = json.status();
                return false;
              }
              std::cout << *json << "\n";
            } else {
              std::cout << FormatEvent(event) << "\n";
            }
            std::cout.flush();
            return std::cout.good();
          },
          args.timeout_ms == 0 ? absl::InfiniteDuration()
                               : absl::Milliseconds(args.timeout_ms));
      if (!failed.ok()) return Fail(failed);
      if (!status.ok()) return Fail(status);
      return kExitOk;
    }
    case RankctlArgs::Command::kCredentialsCreate:
    case RankctlArgs::Command::kCredentialsNodeToken:
    case RankctlArgs::Command::kCredentialsRankToken:
      break;  // Handled above, without a daemon.
  }
  return UsageError("unhandled command");
}

}  // namespace
}  // namespace rankd

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<rankd::RankctlArgs> parsed = rankd::ParseRankctlArgs(args);
  if (!parsed.ok()) return rankd::UsageError(parsed.status().message());
  if (parsed->help) {
    std::cout << rankd::RankctlUsage();
    return rankd::kExitOk;
  }
  return rankd::Run(*parsed);
}
