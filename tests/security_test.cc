// Transport security of real rankd daemons: TLS (and mutual TLS) on the TCP
// listener from certificate files, the bearer token on every rankd service,
// daemons registering with each other through TLS with the token, and the
// permissions of the Unix socket. A throwaway CA, server and client
// certificates are made with `openssl` in each cluster's folder.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.grpc.pb.h"
#include "rankd/v1/peer.grpc.pb.h"
#include "rankd/v1/rank.grpc.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "s3cret-token";
constexpr char kMissingToken[] =
    "this daemon requires a bearer token (authorization: Bearer <token>)";
constexpr char kRejectedToken[] = "bearer token rejected";
std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes a CA ("ca"), a second unrelated CA ("other-ca"), a server
// certificate for 127.0.0.1/localhost usable as a client certificate too
// (daemons present it to their coordinator), a client-only certificate
// ("client"), one signed by the other CA ("rogue"), and token files into
// `dir`.
absl::Status MakePki(const std::string& dir) {
  const std::string script = absl::StrCat(R"(set -e
cd ')",
                                          dir, R"('
ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" \
    -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "/CN=$3"
  printf "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" \
    -CAcreateserial -out "$1.pem" -days 2 -extfile "$1.ext"
}
ca ca
ca other-ca
leaf server ca localhost 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n'
leaf client ca rankctl 'extendedKeyUsage=clientAuth\n'
leaf rogue other-ca rogue 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n'
printf 's3cret-token\n' > token
printf 'impostor-token-9f3a\n' > wrong-token
chmod 600 *.key token wrong-token
)");
  const std::string script_path = dir + "/pki.sh";
  std::ofstream(script_path) << script;
  const std::string log = dir + "/pki.log";
  int status =
      std::system(absl::StrCat("sh ", script_path, " >", log, " 2>&1").c_str());
  if (ExitCode(status) != 0) {
    return absl::InternalError(
        absl::StrCat("making certificates with openssl failed (is the openssl "
                     "package installed? tools/setup.sh):\n",
                     Slurp(log)));
  }
  return absl::OkStatus();
}

struct Security {
  bool mutual = false;  // --tls_require_client_cert
};

// A cluster whose daemons use TLS and the bearer token in its own folder.
std::unique_ptr<LocalCluster> SecureCluster(uint32_t nnodes, uint32_t nproc,
                                            Security security) {
  ClusterOptions options;
  options.job_id = "secure";
  options.nnodes = nnodes;
  options.nproc_per_node = nproc;
  options.heartbeat_timeout_ms = 3000;  // TLS handshakes on a loaded machine
  auto cluster = std::make_unique<LocalCluster>(options);
  const std::string dir = cluster->dir();
  absl::Status pki = MakePki(dir);
  EXPECT_TRUE(pki.ok()) << pki;
  if (!pki.ok()) return nullptr;
  ClusterOptions& o = cluster->mutable_options();
  o.extra_flags = {
      absl::StrCat("--tls_cert=", dir, "/server.pem"),
      absl::StrCat("--tls_key=", dir, "/server.key"),
      absl::StrCat("--tls_ca=", dir, "/ca.pem"),
      absl::StrCat("--auth_token_file=", dir, "/token"),
  };
  if (security.mutual)
    o.extra_flags.push_back("--tls_require_client_cert=true");
  o.probe.tls_ca_file = dir + "/ca.pem";
  if (security.mutual) {
    o.probe.tls_cert_file = dir + "/client.pem";
    o.probe.tls_key_file = dir + "/client.key";
  }
  o.probe.bearer_token = kToken;
  return cluster;
}

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address,
                                          const std::string& ca,
                                          const std::string& cert = "",
                                          const std::string& key = "") {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Slurp(ca);
  if (!cert.empty()) {
    ssl.pem_cert_chain = Slurp(cert);
    ssl.pem_private_key = Slurp(key);
  }
  return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
}

std::shared_ptr<grpc::Channel> PlainChannel(const std::string& target) {
  return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
}

// A context with a 3 s deadline and, unless empty, `authorization`.
std::unique_ptr<grpc::ClientContext> Ctx(const std::string& authorization) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(3));
  if (!authorization.empty())
    context->AddMetadata("authorization", authorization);
  return context;
}

grpc::Status GetJob(const std::shared_ptr<grpc::Channel>& channel,
                    const std::string& authorization,
                    v1::JobStatus* job = nullptr) {
  auto stub = v1::Admin::NewStub(channel);
  v1::JobStatus ignored;
  auto context = Ctx(authorization);
  return stub->GetJob(context.get(), v1::GetJobRequest(),
                      job != nullptr ? job : &ignored);
}

// Calls one method of each rankd service (and both streaming kinds) with
// `authorization` and expects UNAUTHENTICATED with `message`.
void ExpectUnauthenticatedEverywhere(
    const std::shared_ptr<grpc::Channel>& channel,
    const std::string& authorization, const std::string& message) {
  auto rank = v1::Rank::NewStub(channel);
  auto peer = v1::Peer::NewStub(channel);
  auto admin = v1::Admin::NewStub(channel);
  auto check = [&](const grpc::Status& s, const char* what) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << what << ": " << s.error_message();
    EXPECT_EQ(s.error_message(), message) << what;
  };
  {
    v1::JoinRequest request;
    request.set_job_id("secure");
    request.set_incarnation(1);
    v1::JoinResponse response;
    auto context = Ctx(authorization);
    check(rank->Join(context.get(), request, &response), "Rank.Join");
  }
  {
    v1::KvSetRequest request;
    request.set_key("k");
    v1::KvSetResponse response;
    auto context = Ctx(authorization);
    check(rank->KvSet(context.get(), request, &response), "Rank.KvSet");
  }
  {
    v1::WatchRequest request;
    auto context = Ctx(authorization);
    auto reader = rank->Watch(context.get(), request);
    v1::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    check(reader->Finish(), "Rank.Watch");
  }
  {
    v1::HeartbeatRequest request;
    v1::HeartbeatResponse response;
    auto context = Ctx(authorization);
    check(peer->Heartbeat(context.get(), request, &response), "Peer.Heartbeat");
  }
  {
    v1::RegisterNodeRequest request;
    v1::RegisterNodeResponse response;
    auto context = Ctx(authorization);
    check(peer->RegisterNode(context.get(), request, &response),
          "Peer.RegisterNode");
  }
  {
    v1::SubscribeRequest request;
    auto context = Ctx(authorization);
    auto reader = peer->Subscribe(context.get(), request);
    v1::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    check(reader->Finish(), "Peer.Subscribe");
  }
  {
    v1::JobStatus response;
    auto context = Ctx(authorization);
    check(admin->GetJob(context.get(), v1::GetJobRequest(), &response),
          "Admin.GetJob");
  }
  {
    v1::AdminKvGetRequest request;
    request.set_key("k");
    v1::AdminKvGetResponse response;
    auto context = Ctx(authorization);
    check(admin->KvGet(context.get(), request, &response), "Admin.KvGet");
  }
  {
    auto context = Ctx(authorization);
    auto reader = admin->WatchEvents(context.get(), v1::WatchEventsRequest());
    v1::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    check(reader->Finish(), "Admin.WatchEvents");
  }
}

TEST(SecurityTest, TlsListenerRefusesPlaintextAndServesTlsClientsWithTheToken) {
  auto cluster = SecureCluster(1, 1, Security{});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  const std::string dir = cluster->dir();
  const std::string address = cluster->tcp_address(0);

  // Plaintext HTTP/2 cannot talk to the TLS listener.
  grpc::Status plain =
      GetJob(PlainChannel(address), std::string("Bearer ") + kToken);
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE)
      << plain.error_message();
  ClientOptions plain_options;
  plain_options.target = address;
  plain_options.connect_timeout = absl::Seconds(1);
  plain_options.bearer_token = kToken;
  auto plain_admin = AdminClient::Connect(plain_options);
  ASSERT_FALSE(plain_admin.ok());
  EXPECT_EQ(plain_admin.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(plain_admin.status().message(), HasSubstr(address));

  // A TLS client that does not trust the daemon's CA is refused too.
  grpc::Status untrusted = GetJob(TlsChannel(address, dir + "/other-ca.pem"),
                                  std::string("Bearer ") + kToken);
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE)
      << untrusted.error_message();

  // TLS with the CA and the token works, raw and through AdminClient.
  auto tls = TlsChannel(address, dir + "/ca.pem");
  v1::JobStatus job;
  grpc::Status ok = GetJob(tls, std::string("Bearer ") + kToken, &job);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(job.job_id(), "secure");
  EXPECT_EQ(job.registered_nodes(), 1u);
  ClientOptions options;
  options.target = address;
  options.tls_ca_file = dir + "/ca.pem";
  options.bearer_token = kToken;
  auto admin = AdminClient::Connect(options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto topology = (*admin)->GetTopology();
  ASSERT_TRUE(topology.ok()) << topology.status();
  EXPECT_EQ(topology->world_size(), 1u);
  // Health (liveness/readiness probes) needs no token.
  options.bearer_token.clear();
  auto tokenless = AdminClient::Connect(options);
  ASSERT_TRUE(tokenless.ok()) << tokenless.status();
  auto health = (*tokenless)->Health("readiness");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
  auto denied = (*tokenless)->GetJob();
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(denied.status().message(), HasSubstr(kMissingToken));
}

TEST(SecurityTest, MissingOrWrongTokenIsUnauthenticatedOnEveryService) {
  auto cluster = SecureCluster(1, 1, Security{});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  auto tls = TlsChannel(cluster->tcp_address(0), cluster->dir() + "/ca.pem");
  {
    SCOPED_TRACE("TLS, no token");
    ExpectUnauthenticatedEverywhere(tls, "", kMissingToken);
  }
  {
    SCOPED_TRACE("TLS, wrong token");
    ExpectUnauthenticatedEverywhere(tls, "Bearer wrong-token", kRejectedToken);
  }
  {
    SCOPED_TRACE("TLS, right token in the wrong scheme");
    ExpectUnauthenticatedEverywhere(tls, std::string("Basic ") + kToken,
                                    kRejectedToken);
  }
  {
    SCOPED_TRACE("TLS, token with trailing garbage");
    ExpectUnauthenticatedEverywhere(tls, std::string("Bearer ") + kToken + "x",
                                    kRejectedToken);
  }
  // The Unix socket (plaintext, local) needs the token as well.
  auto local = PlainChannel(cluster->socket_target(0));
  {
    SCOPED_TRACE("Unix socket, no token");
    ExpectUnauthenticatedEverywhere(local, "", kMissingToken);
  }
  v1::JobStatus job;
  grpc::Status ok = GetJob(local, std::string("Bearer ") + kToken, &job);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(job.job_id(), "secure");
  // The rejection never echoes what was sent.
  grpc::Status wrong = GetJob(tls, "Bearer hunter2");
  EXPECT_THAT(wrong.error_message(), Not(HasSubstr("hunter2")));
  // And the daemon still serves the right token over TLS.
  ok = GetJob(tls, std::string("Bearer ") + kToken, &job);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

TEST(SecurityTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  auto cluster = SecureCluster(1, 1, Security{.mutual = true});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  const std::string dir = cluster->dir();
  const std::string address = cluster->tcp_address(0);
  const std::string bearer = std::string("Bearer ") + kToken;

  grpc::Status no_cert = GetJob(TlsChannel(address, dir + "/ca.pem"), bearer);
  EXPECT_EQ(no_cert.error_code(), grpc::StatusCode::UNAVAILABLE)
      << no_cert.error_message();
  grpc::Status rogue =
      GetJob(TlsChannel(address, dir + "/ca.pem", dir + "/rogue.pem",
                        dir + "/rogue.key"),
             bearer);
  EXPECT_EQ(rogue.error_code(), grpc::StatusCode::UNAVAILABLE)
      << rogue.error_message();
  grpc::Status plain = GetJob(PlainChannel(address), bearer);
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE)
      << plain.error_message();

  auto mtls = TlsChannel(address, dir + "/ca.pem", dir + "/client.pem",
                         dir + "/client.key");
  v1::JobStatus job;
  grpc::Status ok = GetJob(mtls, bearer, &job);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(job.job_id(), "secure");
  // A valid client certificate does not replace the token.
  grpc::Status tokenless = GetJob(mtls, "");
  EXPECT_EQ(tokenless.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(tokenless.error_message(), kMissingToken);

  ClientOptions options;
  options.target = address;
  options.tls_ca_file = dir + "/ca.pem";
  options.tls_cert_file = dir + "/client.pem";
  options.tls_key_file = dir + "/client.key";
  options.bearer_token = kToken;
  auto admin = AdminClient::Connect(options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto members = (*admin)->ListMembers();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(members->members_size(), 1);
}

TEST(SecurityTest, DaemonsFormAJobThroughTlsWithTheTokenAndRanksRunOnIt) {
  auto cluster = SecureCluster(3, 2, Security{});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();  // probes every daemon's readiness
  ASSERT_TRUE(started.ok()) << started;
  const std::string dir = cluster->dir();
  ClientOptions options;
  options.target = cluster->tcp_address(0);
  options.tls_ca_file = dir + "/ca.pem";
  options.bearer_token = kToken;
  auto admin = AdminClient::Connect(options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto members = (*admin)->ListMembers();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->nodes_size(), 3);
  for (uint32_t n = 0; n < 3; ++n) {
    EXPECT_EQ(members->nodes(n).state(), v1::NODE_STATE_REGISTERED) << n;
    EXPECT_EQ(members->nodes(n).address(), cluster->tcp_address(n));
  }
  // Ranks join through their Unix sockets with the token; joins, rounds and
  // the key-value broker cross the TLS links between daemons.
  auto workers =
      cluster->StartAllWorkers({"--rounds=3", "--kv_keys=2",
                                absl::StrCat("--token_file=", dir, "/token")});
  ASSERT_TRUE(workers.ok()) << workers.status();
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(60));
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 0) << (*workers)[r].ReadLog();
    EXPECT_THAT((*workers)[r].ReadLog(), HasSubstr("ROUNDS_OK n=3"));
    EXPECT_THAT((*workers)[r].ReadLog(), HasSubstr("KV_OK keys=2"));
  }
  auto job = (*admin)->GetJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->registered_nodes(), 3u);
  EXPECT_EQ(job->joined_ranks(), 6u);
  EXPECT_EQ(job->completed_rounds(), 4u);  // 3 rounds + the KV barrier
  EXPECT_EQ(job->state(), v1::JOB_STATE_COMPLETED) << job->failure();
}

TEST(SecurityTest, DaemonsRegisterThroughMutualTls) {
  auto cluster = SecureCluster(2, 1, Security{.mutual = true});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  const std::string dir = cluster->dir();
  for (uint32_t n = 0; n < 2; ++n) {
    ClientOptions options;
    options.target = cluster->tcp_address(n);
    options.tls_ca_file = dir + "/ca.pem";
    options.tls_cert_file = dir + "/client.pem";
    options.tls_key_file = dir + "/client.key";
    options.bearer_token = kToken;
    auto admin = AdminClient::Connect(options);
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto job = (*admin)->GetJob();
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->registered_nodes(), 2u) << "node " << n;
    EXPECT_EQ(job->state(), v1::JOB_STATE_FORMING);
  }
}

TEST(SecurityTest, DaemonWithTheWrongTokenCannotRegisterAndExits) {
  auto cluster = SecureCluster(2, 1, Security{});
  ASSERT_NE(cluster, nullptr);
  cluster->mutable_options().node_flags = {
      {}, {absl::StrCat("--auth_token_file=", cluster->dir(), "/wrong-token")}};
  absl::Status started = cluster->Start(absl::Seconds(15));
  ASSERT_FALSE(started.ok());
  EXPECT_THAT(std::string(started.message()),
              HasSubstr("daemon 1 exited during start"));
  std::optional<int> status = cluster->daemon(1).Wait(absl::Seconds(5));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ExitCode(*status), 1);
  const std::string log = cluster->daemon(1).ReadLog();
  EXPECT_THAT(log, HasSubstr("could not register with the coordinator at " +
                             cluster->tcp_address(0)));
  EXPECT_THAT(log, HasSubstr(kRejectedToken));
  EXPECT_THAT(log, Not(HasSubstr("impostor-token-9f3a")));
  // The coordinator is unaffected.
  ClientOptions options;
  options.target = cluster->tcp_address(0);
  options.tls_ca_file = cluster->dir() + "/ca.pem";
  options.bearer_token = kToken;
  auto admin = AdminClient::Connect(options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto job = (*admin)->GetJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->registered_nodes(), 1u);
  EXPECT_EQ(job->state(), v1::JOB_STATE_FORMING);
}

TEST(SecurityTest, UnixSocketIsOwnerAndGroupOnly) {
  auto cluster = SecureCluster(2, 1, Security{});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  for (uint32_t n = 0; n < 2; ++n) {
    struct stat st {};
    ASSERT_EQ(::stat(cluster->socket_path(n).c_str(), &st), 0)
        << cluster->socket_path(n);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    const mode_t mode = st.st_mode & 07777;
    EXPECT_EQ(mode & ~static_cast<mode_t>(0660), 0u)
        << "socket mode " << std::oct << mode << " is wider than 0660";
    EXPECT_EQ(mode & 0007, 0u) << "others have access: " << std::oct << mode;
  }
}

}  // namespace
}  // namespace rankd::testing
