// client/channel.cc: see channel.h.

#include "client/channel.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_file.h"
#include "common/grpc_deadline.h"
#include "common/host_port.h"
#include "common/limits.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"
#include "proto/status_details.h"

namespace rankd {
namespace {

constexpr char kTargetForms[] =
    "expected unix:///path.sock, unix:/path, /path.sock, unix-abstract:name, "
    "host:port, [ipv6]:port or dns:///host:port";

absl::Status BadTarget(absl::string_view target, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid rankd target \"", target, "\": ", why, " (", kTargetForms, ")"));
}

absl::StatusOr<Target> UnixTarget(absl::string_view original,
                                  absl::string_view path) {
  if (path.empty()) return BadTarget(original, "empty socket path");
  if (path.size() > kMaxUnixSocketPathBytes) {
    return BadTarget(original,
                     absl::StrCat("socket path is ", path.size(),
                                  " bytes; Unix sockets allow at most ",
                                  kMaxUnixSocketPathBytes));
  }
  Target t;
  t.kind = Target::Kind::kUnix;
  t.unix_path = std::string(path);
  t.grpc_target = absl::StrCat("unix:", path);
  t.display = std::string(original);
  return t;
}

// Validates "host:port" or "[v6]:port" as every rankd address is read
// (common/host_port.h), then requires a port a client can connect to.
absl::Status CheckHostPort(absl::string_view original, absl::string_view hp) {
  absl::StatusOr<HostPort> parsed =
      ParseHostPort(std::string_view(hp.data(), hp.size()));
  if (!parsed.ok()) return BadTarget(original, parsed.status().message());
  if (parsed->port == 0) {
    return BadTarget(original,
                     "port 0 is not in 1..65535: a client needs a fixed port");
  }
  return absl::OkStatus();
}

// A TLS file of the options: bounded, a regular file only
// (common/bounded_file.h); InvalidArgument naming `what` otherwise.
absl::StatusOr<std::string> ReadFile(absl::string_view what,
                                     const std::string& path) {
  absl::StatusOr<std::string> contents =
      ReadBoundedFile(path, kMaxTlsFileBytes);
  if (!contents.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " \"", path,
                     "\": ", contents.status().message()));
  }
  if (contents->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", path, "\" is empty"));
  }
  return contents;
}

absl::Status CheckOptions(const ClientOptions& o, const Target& target) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("rankd client options for ", target.display, ": ", why));
  };
  if (o.connect_timeout <= absl::ZeroDuration() ||
      o.connect_timeout == absl::InfiniteDuration()) {
    return bad("connect_timeout must be positive and finite");
  }
  if (o.call_timeout <= absl::ZeroDuration() ||
      o.call_timeout == absl::InfiniteDuration()) {
    return bad("call_timeout must be positive and finite");
  }
  if (o.keepalive_time < absl::ZeroDuration() ||
      o.keepalive_timeout < absl::ZeroDuration() ||
      o.keepalive_time == absl::InfiniteDuration() ||
      o.keepalive_timeout == absl::InfiniteDuration()) {
    return bad("keepalive_time and keepalive_timeout must be finite and >= 0");
  }
  if (o.round_spin.has_value() && (*o.round_spin < absl::ZeroDuration() ||
                                   *o.round_spin > absl::Milliseconds(100))) {
    return bad("round_spin must be between 0 and 100ms");
  }
  for (char c : o.bearer_token) {
    if (c <= ' ' || c > '~') {
      return bad(
          "bearer_token contains a space, control or non-ASCII character "
          "(strip the trailing newline of a token file)");
    }
  }
  bool tls = !o.tls_ca_file.empty();
  if (!tls && (!o.tls_cert_file.empty() || !o.tls_key_file.empty() ||
               !o.tls_server_name.empty())) {
    return bad(
        "tls_cert_file, tls_key_file and tls_server_name need tls_ca_file");
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return bad("tls_cert_file and tls_key_file must be given together");
  }
  if (tls && target.kind == Target::Kind::kUnix) {
    return bad(
        "TLS applies to TCP targets only; Unix sockets are protected "
        "by file permissions");
  }
  return absl::OkStatus();
}

std::string StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "UNKNOWN";
}

int ClampMillis(absl::Duration d) {
  int64_t ms = absl::ToInt64Milliseconds(d);
  if (ms > std::numeric_limits<int>::max())
    return std::numeric_limits<int>::max();
  return ms < 1 ? 1 : static_cast<int>(ms);
}

}  // namespace

std::string DefaultTarget() {
  const char* env = std::getenv(kTargetEnvVar);
  if (env != nullptr && *env != '\0') return env;
  return kDefaultTarget;
}

absl::StatusOr<Target> ParseTarget(absl::string_view target) {
  absl::string_view t = target;
  if (t.empty()) return BadTarget(target, "empty address");
  for (char c : t) {
    if (c <= ' ' || c > '~') {
      return BadTarget(target, "contains a space or control character");
    }
  }
  if (absl::StartsWith(t, "unix://")) {
    absl::string_view path = t.substr(strlen("unix://"));
    if (!absl::StartsWith(path, "/")) {
      return BadTarget(target,
                       "unix:// needs an absolute path (three slashes)");
    }
    return UnixTarget(target, path);
  }
  if (absl::StartsWith(t, "unix:")) {
    return UnixTarget(target, t.substr(strlen("unix:")));
  }
  if (absl::StartsWith(t, "/")) return UnixTarget(target, t);
  if (absl::StartsWith(t, "unix-abstract:")) {
    absl::string_view name = t.substr(strlen("unix-abstract:"));
    if (name.empty()) return BadTarget(target, "empty abstract socket name");
    Target out;
    out.kind = Target::Kind::kUnix;
    out.grpc_target = std::string(t);
    out.display = std::string(target);
    return out;
  }
  Target out;
  out.kind = Target::Kind::kTcp;
  out.grpc_target = std::string(t);
  out.display = std::string(target);
  if (absl::StartsWith(t, "dns:")) {
    absl::string_view rest = t.substr(strlen("dns:"));
    if (absl::StartsWith(rest, "//")) {
      // dns://[authority]/host:port
      size_t slash = rest.find('/', 2);
      if (slash == absl::string_view::npos) {
        return BadTarget(target, "dns:// needs dns:///host:port");
      }
      rest = rest.substr(slash + 1);
    }
    absl::Status s = CheckHostPort(target, rest);
    if (!s.ok()) return s;
    return out;
  }
  if (absl::StartsWith(t, "ipv4:") || absl::StartsWith(t, "ipv6:")) {
    absl::string_view rest = t.substr(5);
    if (rest.empty()) return BadTarget(target, "empty address list");
    return out;
  }
  size_t scheme = t.find("://");
  if (scheme != absl::string_view::npos) {
    return BadTarget(target, absl::StrCat("unsupported scheme \"",
                                          t.substr(0, scheme), "\""));
  }
  absl::Status s = CheckHostPort(target, t);
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<uint32_t> ToMillis32(absl::Duration d, absl::string_view what) {
  if (d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must not be negative (got ", absl::FormatDuration(d), ")"));
  }
  if (d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be finite; every rankd wait has a deadline"));
  }
  // Round up so that 0.5ms does not become "do not wait".
  int64_t ms = absl::ToInt64Milliseconds(d);
  if (d > absl::Milliseconds(ms)) ++ms;
  if (ms > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of ", absl::FormatDuration(d),
                     " is too long (at most 4294967295 ms)"));
  }
  return static_cast<uint32_t>(ms);
}

absl::Status FromGrpcStatus(const grpc::Status& status,
                            absl::string_view context, absl::Duration waited) {
  if (status.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(status.error_code());
  std::string message = absl::StrCat(context, ": ", status.error_message());
  if (code == absl::StatusCode::kDeadlineExceeded &&
      status.error_message() == "Deadline Exceeded" &&
      waited > absl::ZeroDuration()) {
    absl::StrAppend(&message, " (no answer from the daemon within ",
                    absl::FormatDuration(waited), ")");
  } else if (code == absl::StatusCode::kUnavailable) {
    absl::StrAppend(&message,
                    " (is the rankd daemon running and reachable there?)");
  }
  return WithDetails(absl::Status(code, message), status.error_details());
}

Connection::Connection(Passkey, ClientOptions options, Target target,
                       std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      target_(std::move(target)),
      channel_(std::move(channel)) {}

absl::StatusOr<std::shared_ptr<const Connection>> Connection::Open(
    const ClientOptions& given) {
  ClientOptions options = given;
  if (options.target.empty()) options.target = DefaultTarget();
  absl::StatusOr<Target> target = ParseTarget(options.target);
  if (!target.ok()) return target.status();
  absl::Status valid = CheckOptions(options, *target);
  if (!valid.ok()) return valid;
  auto read = [&](absl::string_view what,
                  const std::string& path) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> contents = ReadFile(what, path);
    if (!contents.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rankd client options for ", target->display, ": ",
                       contents.status().message()));
    }
    return contents;
  };

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // One connection per client object: a client's liveness lease must not
  // share fate with (or be kept alive by) another client's connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (target->kind == Target::Kind::kTcp &&
      options.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                ClampMillis(options.keepalive_time));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                ClampMillis(options.keepalive_timeout));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }

  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = read("tls_ca_file", options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert =
          read("tls_cert_file", options.tls_cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key =
          read("tls_key_file", options.tls_key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }

  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target->grpc_target, creds, args);
  if (channel == nullptr) {
    return absl::InternalError(absl::StrCat(
        "rankd connect to ", target->display, ": gRPC created no channel"));
  }
  if (!channel->WaitForConnected(GrpcDeadlineAfter(options.connect_timeout))) {
    std::string hint;
    if (!target->unix_path.empty()) {
      struct stat st;
      if (::stat(target->unix_path.c_str(), &st) != 0) {
        hint = absl::StrCat("; socket ", target->unix_path, ": ",
                            std::strerror(errno),
                            " (is the rankd daemon running on this node?)");
      } else if (!S_ISSOCK(st.st_mode)) {
        hint = absl::StrCat("; ", target->unix_path, " is not a socket");
      } else {
        hint =
            "; the socket exists but nothing accepted the connection "
            "(daemon not running, or no permission to connect?)";
      }
    } else {
      hint = "; is the rankd daemon listening there";
      if (!options.tls_ca_file.empty())
        hint += ", and does its TLS setup match";
      hint += "?";
    }
    return absl::UnavailableError(absl::StrCat(
        "rankd connect to ", target->display, ": not ready within ",
        absl::FormatDuration(options.connect_timeout), " (channel state ",
        StateName(channel->GetState(false)), ")", hint));
  }
  return std::make_shared<const Connection>(
      Passkey(), std::move(options), *std::move(target), std::move(channel));
}

void Connection::PrepareContext(grpc::ClientContext* context,
                                absl::Duration timeout) const {
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(GrpcDeadlineAfter(timeout));
  }
  if (!options_.bearer_token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options_.bearer_token));
  }
}

std::string Connection::Context(absl::string_view method) const {
  return absl::StrCat("rankd ", method, " via ", target_.display);
}

}  // namespace rankd
