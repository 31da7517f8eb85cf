// Security of real rankd daemons: each role's own credential (node tokens
// for the Peer service, each rank's own token for Rank, the operator token
// for Admin over TCP), a node acting only as itself, Admin answers that work
// as no credential, refusal to start without credentials unless opted out,
// TLS (and mutual TLS) on the TCP listener, daemons registering through TLS,
// and the permissions of the Unix socket. A throwaway CA, server and client
// certificates are made with `openssl` in each cluster's folder.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "common/credentials.h"
#include "daemon/node/round_link.h"
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

constexpr char kMissingOperatorToken[] =
    "the Admin service needs the job's operator token (authorization: Bearer "
    "<operator.token>)";
constexpr char kRejectedOperatorToken[] = "operator token rejected";

std::string Bearer(const std::string& token) { return "Bearer " + token; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes a CA ("ca"), a second unrelated CA ("other-ca"), a server
// certificate for 127.0.0.1/localhost usable as a client certificate too
// (daemons present it to their coordinator), a client-only certificate
// ("client") and one signed by the other CA ("rogue") into `dir`.
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
chmod 600 *.key
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

// A cluster whose daemons use TLS (and the job's generated credentials).
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
  };
  if (security.mutual)
    o.extra_flags.push_back("--tls_require_client_cert=true");
  o.probe.tls_ca_file = dir + "/ca.pem";
  if (security.mutual) {
    o.probe.tls_cert_file = dir + "/client.pem";
    o.probe.tls_key_file = dir + "/client.key";
  }
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

// One call to each rankd service (and both streaming kinds), each with
// `authorization`; returns their statuses by name.
std::map<std::string, grpc::Status> CallEveryService(
    const std::shared_ptr<grpc::Channel>& channel,
    const std::string& authorization) {
  auto rank = v1::Rank::NewStub(channel);
  auto peer = v1::Peer::NewStub(channel);
  auto admin = v1::Admin::NewStub(channel);
  std::map<std::string, grpc::Status> out;
  {
    v1::KvSetRequest request;
    request.set_key("k");
    v1::KvSetResponse response;
    auto context = Ctx(authorization);
    out["Rank.KvSet"] = rank->KvSet(context.get(), request, &response);
  }
  {
    v1::WatchRequest request;
    auto context = Ctx(authorization);
    auto reader = rank->Watch(context.get(), request);
    v1::JobEvent event;
    EXPECT_FALSE(reader->Read(&event));
    out["Rank.Watch"] = reader->Finish();
  }
  // The Peer calls claim node 1 (the coordinator's own node 0 never calls
  // over the network).
  {
    v1::HeartbeatRequest request;
    request.mutable_node()->set_node_index(1);
    v1::HeartbeatResponse response;
    auto context = Ctx(authorization);
    out["Peer.Heartbeat"] = peer->Heartbeat(context.get(), request, &response);
  }
  {
    v1::SubscribeRequest request;
    request.mutable_node()->set_node_index(1);
    auto context = Ctx(authorization);
    auto reader = peer->Subscribe(context.get(), request);
    v1::JobEventBatch event;
    EXPECT_FALSE(reader->Read(&event));
    out["Peer.Subscribe"] = reader->Finish();
  }
  {
    v1::JobStatus response;
    auto context = Ctx(authorization);
    out["Admin.GetJob"] =
        admin->GetJob(context.get(), v1::GetJobRequest(), &response);
  }
  {
    auto context = Ctx(authorization);
    auto reader = admin->WatchEvents(context.get(), v1::WatchEventsRequest());
    v1::JobEvent event;
    while (reader->Read(&event)) {
      // A stream that was let in replays the history; that is enough.
      context->TryCancel();
    }
    grpc::Status status = reader->Finish();
    out["Admin.WatchEvents"] =
        status.error_code() == grpc::StatusCode::CANCELLED ? grpc::Status::OK
                                                           : status;
  }
  return out;
}

struct Expected {
  grpc::StatusCode code;
  std::string message;  // A fragment; "" for any.
};

void ExpectStatuses(const std::map<std::string, grpc::Status>& got,
                    const std::map<std::string, Expected>& want) {
  for (const auto& [name, status] : got) {
    SCOPED_TRACE(name);
    auto it = want.find(name.substr(0, name.find('.')));
    ASSERT_NE(it, want.end());
    if (it->second.code == grpc::StatusCode::OK) {
      // Let in: whatever the call itself answers, it is not about
      // credentials.
      EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << status.error_message();
      EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << status.error_message();
      continue;
    }
    EXPECT_EQ(status.error_code(), it->second.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(it->second.message));
  }
}

std::string NodeTokenOf(const LocalCluster& cluster, uint32_t node) {
  auto key = ReadCredentialFile(cluster.credentials_dir(), kNodeKeyFile);
  EXPECT_TRUE(key.ok()) << key.status();
  return NodeToken(key.value_or(""), cluster.options().job_id, node);
}

// The coordinator's round link port, from its log ("round link on port N");
// 0 when it logged none.
int RoundLinkPort(LocalCluster& cluster) {
  const std::string log = cluster.daemon(0).ReadLog();
  const std::string marker = "round link on port ";
  size_t at = log.find(marker);
  if (at == std::string::npos) return 0;
  at += marker.size();
  int port = 0;
  const std::string digits =
      log.substr(at, log.find_first_not_of("0123456789", at) - at);
  return absl::SimpleAtoi(digits, &port) ? port : 0;
}

// Node `node`'s daemon incarnation, from its log ("node N (daemon
// incarnation HEX) registered"); 0 when not found.
uint64_t DaemonIncarnation(LocalCluster& cluster, uint32_t node) {
  const std::string log = cluster.daemon(node).ReadLog();
  const std::string marker = "(daemon incarnation ";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return 0;
  const size_t begin = at + marker.size();
  uint64_t incarnation = 0;
  return absl::SimpleHexAtoi(log.substr(begin, log.find(')', begin) - begin),
                             &incarnation)
             ? incarnation
             : 0;
}

// A round link to `cluster`'s coordinator as node `node` of `job` with
// `token`, waited on until it opened or was refused; as the node's live
// daemon (its incarnation) unless `incarnation` names another.
absl::Status OpenRoundLink(LocalCluster& cluster, const std::string& job,
                           uint32_t node, const std::string& token,
                           std::unique_ptr<RoundLink>* link,
                           uint64_t incarnation = 0) {
  RoundLink::Options options;
  options.host = "127.0.0.1";
  options.port = static_cast<uint16_t>(RoundLinkPort(cluster));
  options.coordinator_address = cluster.tcp_address(0);
  options.node.set_job_id(job);
  options.node.set_node_index(node);
  options.node.set_daemon_incarnation(
      incarnation != 0 ? incarnation : DaemonIncarnation(cluster, node));
  options.node_token = token;
  *link = std::make_unique<RoundLink>(std::move(options));
  return (*link)->WaitOpen(absl::Seconds(10));
}

// The rank that joined on `node`, from Admin.ListMembers.
uint32_t RankOnNode(const AdminClient& admin, uint32_t node) {
  auto members = admin.ListMembers();
  EXPECT_TRUE(members.ok()) << members.status();
  if (members.ok()) {
    for (const auto& m : members->members()) {
      if (m.node_index() == node && m.state() == v1::MEMBER_STATE_JOINED) {
        return m.rank();
      }
    }
  }
  ADD_FAILURE() << "no rank joined on node " << node;
  return 0;
}

constexpr grpc::StatusCode kOk = grpc::StatusCode::OK;
constexpr grpc::StatusCode kUnauthenticated = grpc::StatusCode::UNAUTHENTICATED;
constexpr grpc::StatusCode kDenied = grpc::StatusCode::PERMISSION_DENIED;

TEST(SecurityTest, TlsListenerRefusesPlaintextAndServesTlsClientsWithTheToken) {
  auto cluster = SecureCluster(1, 1, Security{});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  const std::string dir = cluster->dir();
  const std::string address = cluster->tcp_address(0);
  const std::string token = cluster->operator_token();

  // Plaintext HTTP/2 cannot talk to the TLS listener.
  grpc::Status plain = GetJob(PlainChannel(address), Bearer(token));
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE)
      << plain.error_message();
  ClientOptions plain_options;
  plain_options.target = address;
  plain_options.connect_timeout = absl::Seconds(1);
  plain_options.bearer_token = token;
  auto plain_admin = AdminClient::Connect(plain_options);
  ASSERT_FALSE(plain_admin.ok());
  EXPECT_EQ(plain_admin.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(plain_admin.status().message(), HasSubstr(address));

  // A TLS client that does not trust the daemon's CA is refused too.
  grpc::Status untrusted =
      GetJob(TlsChannel(address, dir + "/other-ca.pem"), Bearer(token));
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE)
      << untrusted.error_message();

  // TLS with the CA and the operator token works, raw and through
  // AdminClient.
  auto tls = TlsChannel(address, dir + "/ca.pem");
  v1::JobStatus job;
  grpc::Status ok = GetJob(tls, Bearer(token), &job);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(job.job_id(), "secure");
  EXPECT_EQ(job.registered_nodes(), 1u);
  ClientOptions options = cluster->AdminOptions(0);
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
  EXPECT_THAT(denied.status().message(), HasSubstr(kMissingOperatorToken));
}

// Over TCP every service wants its own role's credential; none of them
// opens another service, and a refusal never echoes what was sent.
TEST(SecurityTest, EachServiceTakesOnlyItsOwnRolesCredential) {
  ClusterOptions options;
  options.job_id = "roles";
  options.nnodes = 2;
  options.nproc_per_node = 1;
  LocalCluster cluster(options);
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  auto tcp = PlainChannel(cluster.tcp_address(0));
  // Rank 0's own token (CallEveryService's Rank calls name rank 0).
  const std::string rank = cluster.rank_token(0);
  const std::string op = cluster.operator_token();
  const std::string node = NodeTokenOf(cluster, 1);
  ASSERT_FALSE(rank.empty() || op.empty());
  {
    SCOPED_TRACE("no credential");
    ExpectStatuses(
        CallEveryService(tcp, ""),
        {{"Rank",
          {kUnauthenticated,
           "the Rank service needs the rank's own rank "
           "token"}},
         {"Peer", {kUnauthenticated, "the Peer service needs a node token"}},
         {"Admin", {kUnauthenticated, kMissingOperatorToken}}});
  }
  {
    SCOPED_TRACE("garbage, another scheme, trailing bytes");
    for (const std::string& bad :
         {Bearer("hunter2"), "Basic " + op, Bearer(op + "x"),
          Bearer(std::string(4000, 'a'))}) {
      auto got = CallEveryService(tcp, bad);
      ExpectStatuses(got, {{"Rank", {kUnauthenticated, "rank token"}},
                           {"Peer", {kUnauthenticated, "node token"}},
                           {"Admin", {kUnauthenticated, "operator token"}}});
      for (const auto& [name, status] : got) {
        EXPECT_THAT(status.error_message(), Not(HasSubstr("hunter2")));
      }
    }
  }
  {
    SCOPED_TRACE("the operator token");
    ExpectStatuses(CallEveryService(tcp, Bearer(op)),
                   {{"Rank", {kUnauthenticated, "rank token rejected"}},
                    {"Peer", {kUnauthenticated, "node token rejected"}},
                    {"Admin", {kOk, ""}}});
  }
  {
    SCOPED_TRACE("the rank token");
    ExpectStatuses(CallEveryService(tcp, Bearer(rank)),
                   {{"Rank", {kOk, ""}},
                    {"Peer", {kUnauthenticated, "node token rejected"}},
                    {"Admin", {kUnauthenticated, kRejectedOperatorToken}}});
  }
  {
    SCOPED_TRACE("a node token");
    ExpectStatuses(CallEveryService(tcp, Bearer(node)),
                   {{"Rank", {kUnauthenticated, "rank token rejected"}},
                    {"Peer", {kOk, ""}},
                    {"Admin", {kUnauthenticated, kRejectedOperatorToken}}});
  }
  {
    // The coordinator's own node reaches it in-process, never over TCP: its
    // token here was minted from a copy of the node key.
    SCOPED_TRACE("the coordinator's own node token");
    ExpectStatuses(
        CallEveryService(tcp, Bearer(NodeTokenOf(cluster, 0))),
        {{"Rank", {kUnauthenticated, "rank token rejected"}},
         {"Peer", {kDenied, "node 0 is this coordinator's own node"}},
         {"Admin", {kUnauthenticated, kRejectedOperatorToken}}});
  }
  {
    SCOPED_TRACE("a node token of another job under another key");
    std::string other = cluster.dir() + "/other-credentials";
    ASSERT_TRUE(CreateCredentials(other).ok());
    auto key = ReadCredentialFile(other, kNodeKeyFile);
    ASSERT_TRUE(key.ok());
    ExpectStatuses(CallEveryService(tcp, Bearer(NodeToken(*key, "roles", 1))),
                   {{"Rank", {kUnauthenticated, ""}},
                    {"Peer", {kUnauthenticated, "node token rejected"}},
                    {"Admin", {kUnauthenticated, ""}}});
  }
  // On the Unix socket file permissions authenticate operators, while a
  // rank presents its own token there too (so no process that can reach
  // the socket can act as a rank it was not given); the Peer service is
  // not served there, whatever the caller sends.
  auto local = PlainChannel(cluster.socket_target(0));
  for (const std::string& auth : {std::string(), Bearer(node)}) {
    SCOPED_TRACE(auth.empty() ? "Unix socket" : "Unix socket, node token");
    ExpectStatuses(CallEveryService(local, auth),
                   {{"Rank", {kUnauthenticated, "rank token"}},
                    {"Peer",
                     {kDenied,
                      "the Peer service is for daemons and "
                      "is not served on the Unix socket"}},
                    {"Admin", {kOk, ""}}});
  }
  {
    SCOPED_TRACE("Unix socket, rank 0's token");
    ExpectStatuses(CallEveryService(local, Bearer(rank)),
                   {{"Rank", {kOk, ""}},
                    {"Peer", {kDenied, "is not served on the Unix socket"}},
                    {"Admin", {kOk, ""}}});
  }
  // Key-value values are not an operator's to read unless the daemon was
  // started with --admin_kv_read.
  auto admin = v1::Admin::NewStub(tcp);
  v1::AdminKvGetRequest request;
  request.set_key("k");
  v1::AdminKvGetResponse response;
  auto context = Ctx(Bearer(op));
  grpc::Status kv = admin->KvGet(context.get(), request, &response);
  EXPECT_EQ(kv.error_code(), kDenied);
  EXPECT_THAT(kv.error_message(),
              HasSubstr("reading key-value values through Admin is off"));
}

TEST(SecurityTest, AdminKeyValueReadsNeedTheOperatorTokenEvenLocally) {
  ClusterOptions options;
  options.job_id = "kvread";
  options.nnodes = 1;
  options.nproc_per_node = 1;
  options.extra_flags = {"--admin_kv_read=true"};
  LocalCluster cluster(options);
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  for (const std::string& target :
       {cluster.tcp_address(0), cluster.socket_target(0)}) {
    SCOPED_TRACE(target);
    auto admin = v1::Admin::NewStub(PlainChannel(target));
    v1::AdminKvGetRequest request;
    request.set_key("k");
    v1::AdminKvGetResponse response;
    auto without = Ctx("");
    grpc::Status denied = admin->KvGet(without.get(), request, &response);
    EXPECT_EQ(denied.error_code(), kUnauthenticated);
    auto with = Ctx(Bearer(cluster.operator_token()));
    grpc::Status missing = admin->KvGet(with.get(), request, &response);
    EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND)
        << missing.error_message();
    // A key no rank could have set is refused without being echoed.
    request.set_key(std::string(200000, 'k'));
    auto again = Ctx(Bearer(cluster.operator_token()));
    grpc::Status long_key = admin->KvGet(again.get(), request, &response);
    EXPECT_EQ(long_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_LT(long_key.error_message().size(), 200u);
  }
}

// A READY 2-node job, one rank per node holding until the test ends, and
// an operator's AdminClient on node 0. The ranks must leave cleanly: the
// calls the tests make may not have disturbed the job.
class HeldJobTest : public ::testing::Test {
 protected:
  void StartJob(const std::string& job_id) {
    ClusterOptions options;
    options.job_id = job_id;
    options.nnodes = 2;
    options.nproc_per_node = 1;
    options.heartbeat_timeout_ms = 3000;
    cluster_ = std::make_unique<LocalCluster>(options);
    absl::Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started;
    auto workers = cluster_->StartAllWorkers(
        {absl::StrCat("--leave_when_file=", cluster_->dir(), "/leave")});
    ASSERT_TRUE(workers.ok()) << workers.status();
    workers_ = *std::move(workers);
    auto admin = AdminClient::Connect(cluster_->AdminOptions(0));
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *std::move(admin);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (admin_->GetJob().value_or(v1::JobStatus()).state() !=
           v1::JOB_STATE_READY) {
      ASSERT_LT(absl::Now(), deadline) << workers_[0].ReadLog();
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  void TearDown() override {
    if (cluster_ == nullptr) return;
    std::ofstream(cluster_->dir() + "/leave") << "bye\n";
    for (int s : WaitAll(workers_, absl::Seconds(20))) {
      EXPECT_EQ(ExitCode(s), 0);
    }
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::vector<ChildProcess> workers_;
  std::unique_ptr<AdminClient> admin_;
};

// What an attacker on the network learns from Admin (with the operator
// token, even) opens nothing: no incarnation is shown, and every Peer or
// Rank call rebuilt from it without a node or rank token is refused. The
// job is unaffected.
TEST_F(HeldJobTest, AdminDataWorksAsNoCredentialAndTheJobIsUnaffected) {
  ASSERT_NO_FATAL_FAILURE(StartJob("attacked"));
  LocalCluster& cluster = *cluster_;
  AdminClient* const admin = admin_.get();
  auto topology = admin->GetTopology();
  auto members = admin->ListMembers();
  ASSERT_TRUE(topology.ok() && members.ok());
  for (const auto& n : topology->nodes()) EXPECT_EQ(n.daemon_incarnation(), 0u);
  for (const auto& m : members->members()) EXPECT_EQ(m.incarnation(), 0u);
  // Nor do the events (node registrations, rank joins) or the job's texts.
  // Ranks that join within the coordinator's hold share one event, which
  // lists them in `members` (and sets `member` only when there is one).
  int registrations = 0, joins = 0;
  (void)admin->WatchEvents(
      0,
      [&](const v1::JobEvent& event) {
        if (event.has_node()) {
          ++registrations;
          EXPECT_EQ(event.node().daemon_incarnation(), 0u);
        }
        if (event.has_member()) {
          EXPECT_EQ(event.member().incarnation(), 0u);
        }
        if (event.kind() == v1::EVENT_KIND_MEMBER_JOINED) {
          joins += event.members_size();
        }
        for (const v1::MemberDetails& m : event.members()) {
          EXPECT_EQ(m.incarnation(), 0u);
        }
        return true;
      },
      absl::Milliseconds(500));
  EXPECT_EQ(registrations, 2);
  EXPECT_EQ(joins, 2);

  auto tcp = PlainChannel(cluster.tcp_address(0));
  auto peer = v1::Peer::NewStub(tcp);
  auto rank = v1::Rank::NewStub(tcp);
  for (const std::string& auth :
       {std::string(), Bearer(cluster.operator_token())}) {
    SCOPED_TRACE(auth.empty() ? "no credential" : "operator token");
    v1::RegisterNodeRequest reg;
    reg.mutable_config()->set_job_id("attacked");
    *reg.mutable_node() = topology->nodes(1);
    reg.mutable_node()->set_daemon_incarnation(0xbad);
    v1::RegisterNodeResponse reg_response;
    auto c1 = Ctx(auth);
    EXPECT_EQ(peer->RegisterNode(c1.get(), reg, &reg_response).error_code(),
              kUnauthenticated);
    v1::SubscribeRequest sub;
    sub.mutable_node()->set_job_id("attacked");
    sub.mutable_node()->set_node_index(1);
    auto c2 = Ctx(auth);
    auto reader = peer->Subscribe(c2.get(), sub);
    v1::JobEventBatch event;
    EXPECT_FALSE(reader->Read(&event));
    EXPECT_EQ(reader->Finish().error_code(), kUnauthenticated);
    v1::KvSetRequest set;
    set.mutable_member()->set_job_id("attacked");
    set.mutable_member()->set_rank(0);
    set.set_key("nccl/uid");
    set.set_value("forged");
    v1::KvSetResponse set_response;
    auto c3 = Ctx(auth);
    EXPECT_EQ(peer->KvSet(c3.get(), set, &set_response).error_code(),
              kUnauthenticated);
    auto c4 = Ctx(auth);
    EXPECT_EQ(rank->KvSet(c4.get(), set, &set_response).error_code(),
              kUnauthenticated);
    v1::ContributeWordsRequest words;
    words.mutable_node()->set_job_id("attacked");
    words.set_round(10);
    words.add_frames()->set_rank(0);
    words.set_timeout_ms(1);
    v1::AllGatherWordsResponse words_response;
    auto c5 = Ctx(auth);
    EXPECT_EQ(
        peer->ContributeWords(c5.get(), words, &words_response).error_code(),
        kUnauthenticated);
    // The round stream is refused at once, before it reads anything.
    auto c6 = Ctx(auth);
    auto stream = peer->Rounds(c6.get());
    stream->Write(words);
    v1::RoundOutcome outcome;
    EXPECT_FALSE(stream->Read(&outcome));
    EXPECT_EQ(stream->Finish().error_code(), kUnauthenticated);
  }
  absl::SleepFor(absl::Milliseconds(300));
  auto job = admin->GetJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_READY) << job->failure();
  EXPECT_EQ(job->registered_nodes(), 2u);
  EXPECT_EQ(job->joined_ranks(), 2u);
  EXPECT_LE(job->completed_rounds(), 1u);
}

// A node authenticated by its token may act only as itself: register,
// heartbeat, subscribe, leave, join, release and key-value calls naming
// another node, or a rank on another node, are refused.
TEST_F(HeldJobTest, ANodeCanActOnlyAsItself) {
  ASSERT_NO_FATAL_FAILURE(StartJob("itself"));
  LocalCluster& cluster = *cluster_;
  AdminClient* const admin = admin_.get();
  // Node 1's own token, against the coordinator (node 0).
  const std::string as_node1 = Bearer(NodeTokenOf(cluster, 1));
  const std::string refused = "node 1's credential cannot act as node 0";
  auto peer = v1::Peer::NewStub(PlainChannel(cluster.tcp_address(0)));
  v1::NodeRef node0;
  node0.set_job_id("itself");
  node0.set_node_index(0);
  node0.set_daemon_incarnation(1);
  auto expect_refused = [&](const grpc::Status& s, const std::string& want) {
    EXPECT_EQ(s.error_code(), kDenied) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(want));
  };
  {
    v1::RegisterNodeRequest request;
    request.mutable_node()->set_node_index(0);
    v1::RegisterNodeResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->RegisterNode(context.get(), request, &response),
                   refused);
  }
  {
    v1::HeartbeatRequest request;
    *request.mutable_node() = node0;
    v1::HeartbeatResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->Heartbeat(context.get(), request, &response), refused);
  }
  {
    v1::SubscribeRequest request;
    *request.mutable_node() = node0;
    auto context = Ctx(as_node1);
    auto reader = peer->Subscribe(context.get(), request);
    v1::JobEventBatch event;
    EXPECT_FALSE(reader->Read(&event));
    expect_refused(reader->Finish(), refused);
  }
  {
    v1::LeaveNodeRequest request;
    *request.mutable_node() = node0;
    v1::LeaveNodeResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->LeaveNode(context.get(), request, &response), refused);
  }
  {
    v1::JoinRankRequest request;
    *request.mutable_node() = node0;
    request.set_rank(0);
    request.set_incarnation(7);
    v1::JoinRankResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->JoinRank(context.get(), request, &response), refused);
  }
  {
    v1::ContributeWordsRequest request;
    *request.mutable_node() = node0;
    request.set_round(1);
    request.add_frames()->set_rank(0);
    request.set_timeout_ms(100);
    v1::AllGatherWordsResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->ContributeWords(context.get(), request, &response),
                   refused);
    // On the round stream: the stream itself opens (node 1 may stream its
    // own rounds), and the first message naming node 0 ends it.
    auto streamed = Ctx(as_node1);
    auto stream = peer->Rounds(streamed.get());
    stream->Write(request);
    v1::RoundOutcome outcome;
    EXPECT_FALSE(stream->Read(&outcome));
    expect_refused(stream->Finish(), refused);
    // On the round link: node 1's token opens a link as node 1, and the
    // first contribution naming node 0 closes it saying why.
    ASSERT_NE(RoundLinkPort(cluster), 0) << cluster.daemon(0).ReadLog();
    std::unique_ptr<RoundLink> link;
    absl::Status opened =
        OpenRoundLink(cluster, "itself", 1, NodeTokenOf(cluster, 1), &link);
    ASSERT_TRUE(opened.ok()) << opened;
    absl::Notification answered;
    absl::Status linked;
    PendingRounds::RoundReply reply =
        [&](absl::StatusOr<v1::AllGatherWordsResponse> r) {
          linked = r.status();
          answered.Notify();
        };
    ASSERT_TRUE(link->Send(request, reply, absl::InfiniteFuture()));
    ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(linked.code(), absl::StatusCode::kPermissionDenied) << linked;
    EXPECT_THAT(linked.message(), HasSubstr(refused));
    // Node 1's token does not open a link as node 0 (the coordinator's own)
    // or as node 1 of another job; a made-up token opens nothing.
    absl::Status as_node0 =
        OpenRoundLink(cluster, "itself", 0, NodeTokenOf(cluster, 1), &link);
    EXPECT_EQ(as_node0.code(), absl::StatusCode::kPermissionDenied) << as_node0;
    EXPECT_THAT(as_node0.message(), HasSubstr("coordinator's own"));
    absl::Status other_job =
        OpenRoundLink(cluster, "other", 1, NodeTokenOf(cluster, 1), &link);
    EXPECT_EQ(other_job.code(), absl::StatusCode::kPermissionDenied)
        << other_job;
    absl::Status forged =
        OpenRoundLink(cluster, "itself", 1, "node-1.0123456789abcdef", &link);
    EXPECT_EQ(forged.code(), absl::StatusCode::kUnauthenticated) << forged;
    EXPECT_THAT(forged.message(), HasSubstr("not node 1's token"));
    // Node 1's token with another daemon incarnation than the one serving
    // node 1 (a fenced predecessor's): refused, so it cannot replace the
    // live daemon's link.
    ASSERT_NE(DaemonIncarnation(cluster, 1), 0u) << cluster.daemon(1).ReadLog();
    absl::Status stale =
        OpenRoundLink(cluster, "itself", 1, NodeTokenOf(cluster, 1), &link,
                      DaemonIncarnation(cluster, 1) ^ 1);
    EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
    EXPECT_THAT(stale.message(), HasSubstr("is stale"));
  }
  // Naming itself but a rank of node 0: the release and key-value calls.
  const uint32_t rank_on_0 = RankOnNode(*admin, 0);
  const std::string not_its_rank =
      absl::StrCat("node 1's credential cannot act for rank ", rank_on_0,
                   ", which is not on that node");
  {
    v1::ReleaseRankRequest request;
    request.mutable_node()->set_job_id("itself");
    request.mutable_node()->set_node_index(1);
    request.set_rank(rank_on_0);
    v1::ReleaseRankResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->ReleaseRank(context.get(), request, &response),
                   not_its_rank);
  }
  {
    v1::KvSetRequest request;
    request.mutable_member()->set_job_id("itself");
    request.mutable_member()->set_rank(rank_on_0);
    request.set_key("k");
    v1::KvSetResponse response;
    auto context = Ctx(as_node1);
    expect_refused(peer->KvSet(context.get(), request, &response),
                   not_its_rank);
    v1::KvDeleteRequest del;
    *del.mutable_member() = request.member();
    del.set_key("k");
    v1::KvDeleteResponse del_response;
    auto again = Ctx(as_node1);
    expect_refused(peer->KvDelete(again.get(), del, &del_response),
                   not_its_rank);
    // Forwarded over node 1's round link instead: the same check, the same
    // words, and the link stays open (a refused call is an answer, not a
    // protocol error). A get that would wait is refused before it waits.
    std::unique_ptr<RoundLink> link;
    absl::Status opened =
        OpenRoundLink(cluster, "itself", 1, NodeTokenOf(cluster, 1), &link);
    ASSERT_TRUE(opened.ok()) << opened;
    v1::KvLinkRequest set_call, get_call, delete_call;
    *set_call.mutable_kv_set() = request;
    get_call.mutable_kv_get()->mutable_member()->set_job_id("itself");
    get_call.mutable_kv_get()->mutable_member()->set_rank(rank_on_0);
    get_call.mutable_kv_get()->set_key("k");
    get_call.mutable_kv_get()->set_timeout_ms(60000);
    *delete_call.mutable_kv_delete() = del;
    for (const v1::KvLinkRequest& call : {set_call, get_call, delete_call}) {
      absl::Notification answered;
      absl::StatusOr<v1::KvLinkReply> reply;
      PendingKvCalls::KvReply done = [&](absl::StatusOr<v1::KvLinkReply> r) {
        reply = std::move(r);
        answered.Notify();
      };
      ASSERT_TRUE(link->SendKv(call, done, absl::InfiniteFuture(), nullptr));
      ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
      ASSERT_TRUE(reply.ok()) << reply.status();
      EXPECT_EQ(reply->code(),
                static_cast<int>(absl::StatusCode::kPermissionDenied));
      EXPECT_EQ(reply->message(), not_its_rank);
    }
  }
  // The job is unaffected, and the ranks finish their rounds.
  auto job = admin->GetJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_READY) << job->failure();
  EXPECT_EQ(job->registered_nodes(), 2u);
}

TEST(SecurityTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  auto cluster = SecureCluster(1, 1, Security{.mutual = true});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  const std::string dir = cluster->dir();
  const std::string address = cluster->tcp_address(0);
  const std::string bearer = Bearer(cluster->operator_token());

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
  EXPECT_EQ(tokenless.error_message(), kMissingOperatorToken);

  auto admin = AdminClient::Connect(cluster->AdminOptions(0));
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto members = (*admin)->ListMembers();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(members->members_size(), 1);
}

TEST(SecurityTest, DaemonsFormAJobThroughTlsAndRanksRunOnIt) {
  auto cluster = SecureCluster(3, 2, Security{});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();  // probes every daemon's readiness
  ASSERT_TRUE(started.ok()) << started;
  auto admin = AdminClient::Connect(cluster->AdminOptions(0));
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto members = (*admin)->ListMembers();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->nodes_size(), 3);
  for (uint32_t n = 0; n < 3; ++n) {
    EXPECT_EQ(members->nodes(n).state(), v1::NODE_STATE_REGISTERED) << n;
    EXPECT_EQ(members->nodes(n).address(), cluster->tcp_address(n));
  }
  // Ranks join through their Unix sockets (with their own tokens); joins,
  // rounds and the key-value broker cross the TLS links between daemons.
  auto workers = cluster->StartAllWorkers({"--rounds=3", "--kv_keys=2"});
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
  // The round link is not encrypted, so with TLS on it is not offered and
  // rounds stayed on the TLS-protected stream.
  EXPECT_THAT(cluster->daemon(0).ReadLog(),
              HasSubstr("round link off: TLS is on"));
  EXPECT_EQ(RoundLinkPort(*cluster), 0);
  for (uint32_t n = 1; n < 3; ++n) {
    EXPECT_THAT(cluster->daemon(n).ReadLog(), Not(HasSubstr("round link")));
  }
}

// A rank that is not on the daemon's host reaches it over TCP with its own
// rank token, and is refused without it.
TEST(SecurityTest, RanksOverTcpPresentTheRankToken) {
  ClusterOptions options;
  options.job_id = "tcpranks";
  options.nnodes = 1;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  const std::string tcp = absl::StrCat("--target=", cluster.tcp_address(0));
  cluster.mutable_options().env[kRankTokenEnv] = "";  // no token
  auto refused = cluster.StartWorker(0, 0, {tcp});
  ASSERT_TRUE(refused.ok()) << refused.status();
  std::optional<int> status = refused->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_NE(ExitCode(*status), 0);
  EXPECT_THAT(refused->ReadLog(),
              HasSubstr("the Rank service needs the rank's own rank token"));
  // Another rank's token names another rank.
  cluster.mutable_options().env[kRankTokenEnv] = cluster.rank_token(1);
  auto other = cluster.StartWorker(0, 0, {tcp});
  ASSERT_TRUE(other.ok()) << other.status();
  status = other->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_NE(ExitCode(*status), 0);
  EXPECT_THAT(other->ReadLog(),
              HasSubstr("the credential of rank 1 cannot act as rank 0"));
  // Each with its own (which the harness hands it in $RANKD_RANK_TOKEN).
  cluster.mutable_options().env.erase(kRankTokenEnv);
  std::vector<ChildProcess> workers;
  for (uint32_t l = 0; l < 2; ++l) {
    auto w = cluster.StartWorker(0, l, {tcp, "--rounds=2"});
    ASSERT_TRUE(w.ok()) << w.status();
    workers.push_back(*std::move(w));
  }
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(30));
  for (size_t r = 0; r < workers.size(); ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 0) << workers[r].ReadLog();
    EXPECT_THAT(workers[r].ReadLog(), HasSubstr("ROUNDS_OK n=2"));
  }
}

TEST(SecurityTest, DaemonsRegisterThroughMutualTls) {
  auto cluster = SecureCluster(2, 1, Security{.mutual = true});
  ASSERT_NE(cluster, nullptr);
  absl::Status started = cluster->Start();
  ASSERT_TRUE(started.ok()) << started;
  for (uint32_t n = 0; n < 2; ++n) {
    auto admin = AdminClient::Connect(cluster->AdminOptions(n));
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto job = (*admin)->GetJob();
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->registered_nodes(), 2u) << "node " << n;
    EXPECT_EQ(job->state(), v1::JOB_STATE_FORMING);
  }
}

TEST(SecurityTest, DaemonWithAnotherJobsCredentialsCannotRegisterAndExits) {
  auto cluster = SecureCluster(2, 1, Security{});
  ASSERT_NE(cluster, nullptr);
  const std::string other = cluster->dir() + "/impostor";
  ASSERT_TRUE(CreateCredentials(other).ok());
  cluster->mutable_options().node_flags = {
      {}, {absl::StrCat("--credentials_dir=", other)}};
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
  EXPECT_THAT(log, HasSubstr("node token rejected"));
  auto key = ReadCredentialFile(other, kNodeKeyFile);
  ASSERT_TRUE(key.ok());
  EXPECT_THAT(log, Not(HasSubstr(*key)));
  // The coordinator is unaffected.
  auto admin = AdminClient::Connect(cluster->AdminOptions(0));
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto job = (*admin)->GetJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->registered_nodes(), 1u);
  EXPECT_EQ(job->state(), v1::JOB_STATE_FORMING);
}

// A daemon holding only its own node.token (issued with rankctl
// credentials node-token) joins the job; one holding another node's token
// does not start.
TEST(SecurityTest, ADaemonCanHoldOnlyItsOwnNodeToken) {
  ClusterOptions options;
  options.job_id = "ownid";
  options.nnodes = 2;
  options.nproc_per_node = 1;
  LocalCluster cluster(options);
  const std::string own = cluster.dir() + "/node1-only";
  ASSERT_EQ(::mkdir(own.c_str(), 0700), 0);
  std::ofstream(own + "/node.token") << NodeTokenOf(cluster, 1) << "\n";
  cluster.mutable_options().node_flags = {
      {}, {absl::StrCat("--credentials_dir=", own)}};
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  // Without operator.token node 1 serves operators on its Unix socket
  // only.
  auto tcp = PlainChannel(cluster.tcp_address(1));
  grpc::Status remote = GetJob(tcp, Bearer(cluster.operator_token()));
  EXPECT_EQ(remote.error_code(), kDenied);
  EXPECT_THAT(remote.error_message(), HasSubstr("has no operator.token"));
  v1::JobStatus job;
  grpc::Status local = GetJob(PlainChannel(cluster.socket_target(1)), "", &job);
  ASSERT_TRUE(local.ok()) << local.error_message();
  EXPECT_EQ(job.registered_nodes(), 2u);

  const std::string wrong = cluster.dir() + "/node0-token";
  ASSERT_EQ(::mkdir(wrong.c_str(), 0700), 0);
  std::ofstream(wrong + "/node.token") << NodeTokenOf(cluster, 0) << "\n";
  auto daemon = ChildProcess::Spawn(
      {Runfile("daemon/rankd"), "--job_id=ownid", "--nnodes=2",
       "--node_index=1", "--nproc_per_node=1",
       absl::StrCat("--listen=127.0.0.1:", FreePort()),
       "--socket=", absl::StrCat("--coordinator=", cluster.tcp_address(0)),
       absl::StrCat("--credentials_dir=", wrong)},
      {}, cluster.dir() + "/wrong.log");
  ASSERT_TRUE(daemon.ok());
  std::optional<int> status = daemon->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ExitCode(*status), 1);
  EXPECT_THAT(daemon->ReadLog(), HasSubstr("is not a token of node 1"));
}

// Secure by default: without credentials a daemon does not start, and
// running without them is an explicit, loudly logged choice.
TEST(SecurityTest, NoCredentialsMeansNoStartUnlessExplicitlyAllowed) {
  ClusterOptions options;
  options.credentials = ClusterOptions::Credentials::kCustom;
  options.nnodes = 1;
  options.nproc_per_node = 1;
  LocalCluster refused(options);
  absl::Status start = refused.Start(absl::Seconds(10));
  ASSERT_FALSE(start.ok());
  EXPECT_THAT(std::string(start.message()),
              HasSubstr("rankd needs the job's credentials: pass "
                        "--credentials_dir=DIR (create one with `rankctl "
                        "credentials create DIR`"));

  options.credentials = ClusterOptions::Credentials::kNone;
  LocalCluster open(options);
  ASSERT_TRUE(open.Start().ok());
  EXPECT_THAT(open.daemon(0).ReadLog(),
              HasSubstr("WARNING: running WITHOUT AUTHENTICATION"));
  v1::JobStatus job;
  grpc::Status ok = GetJob(PlainChannel(open.tcp_address(0)), "", &job);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  // The Peer service stays off the Unix socket even then.
  auto peer = v1::Peer::NewStub(PlainChannel(open.socket_target(0)));
  v1::HeartbeatRequest request;
  v1::HeartbeatResponse response;
  auto context = Ctx("");
  EXPECT_EQ(peer->Heartbeat(context.get(), request, &response).error_code(),
            kDenied);
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
    // The credentials folder and its files are the owner's alone.
    ASSERT_EQ(::stat(cluster->credentials_dir().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0077, 0u);
  }
}

}  // namespace
}  // namespace rankd::testing
