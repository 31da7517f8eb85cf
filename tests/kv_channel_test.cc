// The key-value channel (daemon/transport/kv_socket.h,
// client/internal/kv_channel.h) against real rankd daemons: the same
// script of key-value calls runs once with every call on the channel and
// once on gRPC, in two jobs alike, and must give the same answers byte for
// byte (values, statuses and their messages), on the coordinator's node
// and on a node that forwards to it; and a third time with the channel but
// without the round link, so the node forwards over unary Peer calls
// instead of the link (daemon/transport/round_link_protocol.h): the
// answers are again the same. Then the channel's gate, with raw
// frames: a connection that has not presented a valid ticket gets only
// its refusal, a ticket works once, a rank's channel acts only as that
// rank (refused with the Rank service's words), and bad frames get a
// precise error while the daemon keeps serving.
//
// Two nodes of 2 local ranks. Ranks 0 (node 0, the coordinator's) and 2
// (node 1) run the script through rankd::Client; rank 1 is played with a
// raw Rank stub and raw frames.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/admin_client.h"
#include "client/client.h"
#include "common/kv_frame.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/rank.grpc.pb.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = "kvchan";

ClusterOptions JobOptions() {
  ClusterOptions options;
  options.job_id = kJob;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  options.heartbeat_timeout_ms = 60000;
  return options;
}

std::unique_ptr<Client> MustJoin(const LocalCluster& cluster, uint32_t node,
                                 uint32_t rank, bool kv_channel) {
  ClientOptions options;
  options.target = cluster.socket_target(node);
  options.bearer_token = cluster.rank_token(rank);
  options.kv_channel = kv_channel;
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return nullptr;
  JoinOptions join;
  join.job_id = kJob;
  join.local_rank = rank % 2;
  join.world_size = 4;
  join.wait_for_world = absl::ZeroDuration();
  join.device.set_kind("cpu");
  auto joined = (*client)->Join(join);
  EXPECT_TRUE(joined.ok()) << joined.status();
  return *std::move(client);
}

template <typename T>
std::string Show(const absl::StatusOr<T>& result) {
  if (!result.ok()) return result.status().ToString();
  if constexpr (std::is_same_v<T, std::string>) {
    return result->size() > 64
               ? absl::StrCat("OK ", result->size(), " bytes, first ",
                              result->substr(0, 8), " last ",
                              result->substr(result->size() - 8))
               : absl::StrCat("OK ", *result);
  } else {
    return absl::StrCat("OK ", *result);
  }
}

std::string Show(const absl::Status& status) { return status.ToString(); }

// Every key-value call the torch store makes, as rank `rank` with `other`
// another rank; sequential, so the answers do not depend on timing (the
// blocked get is released by a set from another thread either way).
std::vector<std::string> Script(Client& client, uint32_t rank, uint32_t other) {
  const std::string own = absl::StrCat("r", rank, "/");
  const std::string theirs = absl::StrCat("r", other, "/");
  const std::string mib(kMaxValueBytes, 'm');
  std::string mib_marked = mib;
  mib_marked.front() = 'A';
  mib_marked.back() = 'Z';
  std::vector<std::string> out;
  auto log = [&](absl::string_view what, std::string result) {
    out.push_back(absl::StrCat(what, " -> ", result));
  };
  log("set small", Show(client.KvSet(own + "small", "v")));
  log("get small", Show(client.KvGet(own + "small", absl::Seconds(1))));
  log("set 1 MiB", Show(client.KvSet(own + "big", mib_marked)));
  log("get 1 MiB", Show(client.KvGet(own + "big", absl::Seconds(5))));
  log("set 1 MiB + 1", Show(client.KvSet(own + "bigger", mib + "x")));
  log("get empty key", Show(client.KvGet("", absl::Seconds(1))));
  log("get missing, no wait",
      Show(client.KvGet(own + "missing", absl::ZeroDuration())));
  log("get missing, 300 ms",
      Show(client.KvGet(own + "missing", absl::Milliseconds(300))));
  log("get other rank's missing, 300 ms",
      Show(client.KvGet(theirs + "never", absl::Milliseconds(300))));
  log("cas wrong", Show(client.KvCompareAndSet(own + "small", "nope", "x")));
  log("cas right", Show(client.KvCompareAndSet(own + "small", "v", "w")));
  log("get after cas", Show(client.KvGet(own + "small", absl::Seconds(1))));
  log("create", Show(client.KvCompareAndSet(own + "new", std::nullopt, "a")));
  log("create again",
      Show(client.KvCompareAndSet(own + "new", std::nullopt, "b")));
  log("add 5", Show(client.KvAdd(own + "counter", 5)));
  log("add -2", Show(client.KvAdd(own + "counter", -2)));
  log("add to a value", Show(client.KvAdd(own + "small", 1)));
  log("count own", Show(client.KvCount(own)));
  log("delete", Show(client.KvDelete(own + "new")));
  log("delete again", Show(client.KvDelete(own + "new")));
  log("cad wrong", Show(client.KvCompareAndDelete(own + "small", "nope")));
  log("cad right", Show(client.KvCompareAndDelete(own + "small", "w")));
  log("count own after", Show(client.KvCount(own)));
  log("count long prefix", Show(client.KvCount(std::string(600, 'p'))));
  log("set other's", Show(client.KvSet(theirs + "x", "y")));
  log("add other's", Show(client.KvAdd(theirs + "c", 1)));
  log("delete other's", Show(client.KvDelete(theirs + "x")));
  log("set shared plainly", Show(client.KvSet("shared/" + own, "s")));
  log("create shared",
      Show(client.KvCompareAndSet("shared/" + own, std::nullopt, "s")));
  log("set unowned", Show(client.KvSet(absl::StrCat("free", rank), "f")));
  // A blocked get released by a set from another thread of the same rank.
  absl::StatusOr<std::string> waited;
  std::thread getter(
      [&] { waited = client.KvGet(own + "later", absl::Seconds(10)); });
  log("set while a get waits", Show(client.KvSet(own + "later", "z")));
  getter.join();
  log("the waiting get", Show(waited));
  return out;
}

// Runs the script on ranks 0 (coordinator's node) and 2 (the other node)
// of a fresh job, every key-value call on the channel or on gRPC; node 1
// forwards over the round link, or (`round_link` false: the coordinator
// offers none) over unary Peer calls.
std::vector<std::string> RunJob(bool kv_channel, bool round_link = true) {
  ClusterOptions options = JobOptions();
  if (!round_link) options.node_flags = {{"--round_link_port=off"}};
  LocalCluster cluster(options);
  absl::Status started = cluster.Start();
  EXPECT_TRUE(started.ok()) << started;
  if (!started.ok()) return {};
  // Node 1's forwarding path is the one asked for: the link opens just
  // after the node registers; the script starts once it has.
  const std::string linked =
      "open: this node's rounds and forwarded key-value calls go over it";
  if (round_link) {
    EXPECT_TRUE(WaitForLog(cluster.daemon(1), linked, absl::Seconds(10)))
        << cluster.daemon(1).ReadLog();
  } else {
    EXPECT_THAT(cluster.daemon(1).ReadLog(), ::testing::Not(HasSubstr(linked)));
  }
  std::unique_ptr<Client> rank0 = MustJoin(cluster, 0, 0, kv_channel);
  std::unique_ptr<Client> rank2 = MustJoin(cluster, 1, 2, kv_channel);
  if (rank0 == nullptr || rank2 == nullptr) return {};
  const std::string path =
      kv_channel ? "kv-channel" : "grpc (ClientOptions.kv_channel is off)";
  EXPECT_EQ(rank0->kv_path(), path);
  EXPECT_EQ(rank2->kv_path(), path);
  std::vector<std::string> transcript = Script(*rank0, 0, 2);
  for (std::string& line : Script(*rank2, 2, 0)) {
    transcript.push_back(std::move(line));
  }
  transcript.push_back(absl::StrCat("count all -> ", Show(rank0->KvCount(""))));
  // Messages name the daemon's socket, which lies in the job's own folder,
  // the coordinator's port, and how long a forwarded wait had left when
  // it left the node (which may differ by a millisecond).
  const std::regex waited("within [0-9]+ ms");
  for (std::string& line : transcript) {
    line =
        absl::StrReplaceAll(line, {{cluster.dir(), "<job folder>"},
                                   {cluster.tcp_address(0), "<coordinator>"}});
    line = std::regex_replace(line, waited, "within <n> ms");
  }
  return transcript;
}

TEST(KvChannelTest, EveryCallAnswersAsOnGrpc) {
  const std::vector<std::string> channel = RunJob(/*kv_channel=*/true);
  const std::vector<std::string> grpc = RunJob(/*kv_channel=*/false);
  const std::vector<std::string> unlinked =
      RunJob(/*kv_channel=*/true, /*round_link=*/false);
  ASSERT_EQ(channel.size(), grpc.size());
  ASSERT_EQ(channel.size(), unlinked.size());
  ASSERT_FALSE(channel.empty());
  for (size_t i = 0; i < channel.size(); ++i) {
    EXPECT_EQ(channel[i], grpc[i]) << "line " << i;
    EXPECT_EQ(channel[i], unlinked[i])
        << "line " << i << ": forwarded over the round link, then not";
  }
  // And the answers are the store's, not merely alike.
  auto line = [&](absl::string_view prefix) {
    for (const std::string& l : channel) {
      if (absl::StartsWith(l, prefix)) return l;
    }
    return std::string("(none)");
  };
  EXPECT_EQ(line("get small"), "get small -> OK v");
  EXPECT_EQ(line("get 1 MiB"),
            absl::StrCat("get 1 MiB -> OK ", kMaxValueBytes,
                         " bytes, first Ammmmmmm last mmmmmmmZ"));
  EXPECT_THAT(line("get missing, 300 ms"), HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(line("get missing, 300 ms"), HasSubstr("r0/missing"));
  EXPECT_EQ(line("cas wrong"), "cas wrong -> OK 0");
  EXPECT_EQ(line("cas right"), "cas right -> OK 1");
  EXPECT_EQ(line("create again"), "create again -> OK 0");
  EXPECT_EQ(line("add -2"), "add -2 -> OK 3");
  EXPECT_EQ(line("delete again"), "delete again -> OK 0");
  EXPECT_THAT(line("set other's"), HasSubstr("PERMISSION_DENIED"));
  EXPECT_EQ(line("the waiting get"), "the waiting get -> OK z");
}

// A daemon's --socket folder that does not exist yet (the first start after
// a reboot: /run is a tmpfs) once left the round slots and the key-value
// channel off for the daemon's whole life: their folder was made before
// the socket's. Both are on.
TEST(KvChannelFolderTest, ADaemonWhoseSocketFolderIsNewOpensTheFastPaths) {
  ClusterOptions options;
  options.job_id = kJob;
  options.nnodes = 1;
  options.nproc_per_node = 1;
  // Short: a Unix socket's path has room for 107 bytes. Removed once the
  // daemon is gone (the cluster's destructor, before the guard's).
  const std::string root = absl::StrCat("/tmp/rankd-fresh-", ::getpid());
  std::filesystem::remove_all(root);
  struct RemoveAfter {
    std::string path;
    ~RemoveAfter() { std::filesystem::remove_all(path); }
  } remove_after{root};
  const std::string fresh = root + "/run/rankd/node0.sock";
  options.node_flags = {{"--socket=" + fresh}};
  LocalCluster cluster(options);
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  ClientOptions client_options;
  client_options.target = "unix://" + fresh;
  client_options.bearer_token = cluster.rank_token(0);
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  JoinOptions join;
  join.job_id = kJob;
  join.local_rank = 0;
  join.world_size = 1;
  join.device.set_kind("cpu");
  auto joined = (*client)->Join(join);
  ASSERT_TRUE(joined.ok()) << joined.status() << cluster.daemon(0).ReadLog();
  EXPECT_TRUE(absl::StartsWith((*client)->round_path(), "shared-memory"))
      << (*client)->round_path() << "\n"
      << cluster.daemon(0).ReadLog();
  EXPECT_THAT((*client)->kv_path(), Not(HasSubstr("grpc")))
      << cluster.daemon(0).ReadLog();
  ASSERT_TRUE((*client)->Leave().ok());
}

// The channel's gate and its frames, with raw sockets.
class KvChannelGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>(JobOptions());
    absl::Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started;
    unix_ = v1::Rank::NewStub(grpc::CreateChannel(
        cluster_->socket_target(0), grpc::InsecureChannelCredentials()));
    const std::filesystem::path socket(cluster_->socket_path(0));
    kv_path_ = (socket.parent_path() / ".rankd-rounds" /
                (socket.filename().string() + ".kv"))
                   .string();
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    if (!token.empty()) {
      context->AddMetadata("authorization", "Bearer " + token);
    }
    return context;
  }

  v1::MemberRef JoinRank1() {
    v1::JoinRequest request;
    request.set_job_id(kJob);
    request.set_local_rank(1);
    request.set_world_size(4);
    request.set_incarnation(0x5101);
    request.set_pid(::getpid());
    request.mutable_device()->set_kind("cpu");
    v1::JoinResponse response;
    auto context = Ctx(cluster_->rank_token(1));
    grpc::Status s = unix_->Join(context.get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.member();
  }

  // A connected raw socket to the key-value channel (-1 on failure).
  int Connect() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, kv_path_.data(), kv_path_.size());
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ADD_FAILURE() << "connect " << kv_path_ << ": " << std::strerror(errno);
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void Send(int fd, const std::string& bytes) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // An open channel of `member` (rank 1): a fresh ticket presented on a
  // new connection, welcomed; -1 on failure. Its replies read with
  // `reader`.
  int OpenChannel(const v1::MemberRef& member, KvFrameReader& reader) {
    v1::OpenKvChannelRequest request;
    *request.mutable_member() = member;
    v1::OpenKvChannelResponse response;
    auto context = Ctx(cluster_->rank_token(1));
    grpc::Status opened =
        unix_->OpenKvChannel(context.get(), request, &response);
    EXPECT_TRUE(opened.ok()) << opened.error_message();
    if (!opened.ok()) return -1;
    int fd = Connect();
    if (fd < 0) return -1;
    Send(fd, EncodeKvFrame(KvFrameKind::kHello, 0, response.ticket()));
    auto welcome = Reply(fd, nullptr, reader);
    EXPECT_TRUE(welcome.has_value() && welcome->first.ok());
    return fd;
  }

  // The next reply's status and response, or nullopt once the daemon
  // closed the connection (or 10 s passed).
  std::optional<std::pair<absl::Status, std::string>> Reply(int fd,
                                                            uint64_t* id) {
    return Reply(fd, id, reader_);
  }
  std::optional<std::pair<absl::Status, std::string>> Reply(
      int fd, uint64_t* id, KvFrameReader& reader) {
    while (true) {
      auto frame = reader.Next();
      EXPECT_TRUE(frame.ok()) << frame.status();
      if (!frame.ok()) return std::nullopt;
      if (frame->has_value()) {
        EXPECT_EQ((*frame)->kind, KvFrameKind::kReply);
        if (id != nullptr) *id = (*frame)->id;
        absl::Status status;
        absl::string_view response;
        absl::Status decoded =
            DecodeKvReply((*frame)->payload, &status, &response);
        EXPECT_TRUE(decoded.ok()) << decoded;
        return std::make_pair(status, std::string(response));
      }
      char buffer[4096];
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return std::nullopt;
      reader.Append(buffer, static_cast<size_t>(n));
    }
  }

  // True when the daemon closes `fd` (reads end) within 10 s.
  bool Closed(int fd) {
    char byte;
    return ::recv(fd, &byte, 1, 0) == 0;
  }

  void ExpectStillServing() {
    EXPECT_TRUE(cluster_->daemon(0).running()) << cluster_->daemon(0).ReadLog();
    auto admin = AdminClient::Connect(cluster_->AdminOptions(0));
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto health = (*admin)->Health("");
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, "SERVING");
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Rank::Stub> unix_;
  std::string kv_path_;
  KvFrameReader reader_;
};

TEST_F(KvChannelGateTest, AConnectionWithoutAValidTicketGetsOnlyItsRefusal) {
  const std::string refusal =
      "UNAUTHENTICATED: the key-value channel needs a ticket from "
      "Rank.OpenKvChannel, asked for on the connection the rank joined on "
      "and presented within seconds; this one is not (or no longer) valid";
  {
    int fd = Connect();
    ASSERT_GE(fd, 0);
    Send(fd, EncodeKvFrame(KvFrameKind::kHello, 0, std::string(32, '\0')));
    auto reply = Reply(fd, nullptr);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->first.ToString(), refusal);
    EXPECT_TRUE(Closed(fd));
    ::close(fd);
  }
  {
    // A request before the hello: refused, never run.
    int fd = Connect();
    ASSERT_GE(fd, 0);
    v1::KvCountRequest count;
    Send(fd, EncodeKvFrame(KvFrameKind::kCount, 9, count.SerializeAsString()));
    uint64_t id = 0;
    auto reply = Reply(fd, &id);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(id, 9u);
    EXPECT_EQ(reply->first.ToString(),
              "UNAUTHENTICATED: the key-value channel's first frame must be "
              "its hello with a ticket, not KvCount");
    EXPECT_EQ(reply->second, "");
    EXPECT_TRUE(Closed(fd));
    ::close(fd);
  }
  {
    // An oversized frame: refused from its header.
    int fd = Connect();
    ASSERT_GE(fd, 0);
    std::string header = EncodeKvFrame(KvFrameKind::kHello, 0, "");
    header[3] = 0x7f;
    Send(fd, header);
    auto reply = Reply(fd, nullptr);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->first.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(reply->first.message(),
                HasSubstr("key-value hello frame announces"));
    EXPECT_TRUE(Closed(fd));
    ::close(fd);
  }
  ExpectStillServing();
}

TEST_F(KvChannelGateTest, ATicketOpensOneChannelThatActsOnlyAsItsRank) {
  const v1::MemberRef member = JoinRank1();
  // Not without the rank's token, and not over TCP.
  {
    v1::OpenKvChannelRequest request;
    *request.mutable_member() = member;
    v1::OpenKvChannelResponse response;
    auto context = Ctx("");
    EXPECT_EQ(
        unix_->OpenKvChannel(context.get(), request, &response).error_code(),
        grpc::StatusCode::UNAUTHENTICATED);
    auto tcp = v1::Rank::NewStub(grpc::CreateChannel(
        cluster_->tcp_address(0), grpc::InsecureChannelCredentials()));
    auto tcp_context = Ctx(cluster_->rank_token(1));
    EXPECT_EQ(
        tcp->OpenKvChannel(tcp_context.get(), request, &response).error_code(),
        grpc::StatusCode::PERMISSION_DENIED);
  }
  v1::OpenKvChannelRequest request;
  *request.mutable_member() = member;
  v1::OpenKvChannelResponse response;
  auto context = Ctx(cluster_->rank_token(1));
  grpc::Status opened = unix_->OpenKvChannel(context.get(), request, &response);
  ASSERT_TRUE(opened.ok()) << opened.error_message();
  EXPECT_EQ(response.path(), kv_path_);

  int fd = Connect();
  ASSERT_GE(fd, 0);
  Send(fd, EncodeKvFrame(KvFrameKind::kHello, 0, response.ticket()));
  auto welcome = Reply(fd, nullptr);
  ASSERT_TRUE(welcome.has_value());
  EXPECT_TRUE(welcome->first.ok()) << welcome->first;

  // The ticket is spent.
  int again = Connect();
  ASSERT_GE(again, 0);
  KvFrameReader saved = std::move(reader_);
  reader_ = KvFrameReader();
  Send(again, EncodeKvFrame(KvFrameKind::kHello, 0, response.ticket()));
  auto refused = Reply(again, nullptr);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->first.code(), absl::StatusCode::kUnauthenticated);
  ::close(again);
  reader_ = std::move(saved);

  // A request as rank 1 works; as rank 0 it is refused exactly as the
  // Rank service refuses rank 1's credential acting as rank 0.
  v1::KvSetRequest own;
  *own.mutable_member() = member;
  own.set_key("r1/raw");
  own.set_value("1");
  Send(fd, EncodeKvFrame(KvFrameKind::kSet, 1, own.SerializeAsString()));
  uint64_t id = 0;
  auto stored = Reply(fd, &id);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(id, 1u);
  ASSERT_TRUE(stored->first.ok()) << stored->first;
  v1::KvSetResponse set_response;
  ASSERT_TRUE(set_response.ParseFromString(stored->second));
  EXPECT_TRUE(set_response.stored());

  v1::KvSetRequest impostor = own;
  impostor.mutable_member()->set_rank(0);
  impostor.set_key("r0/raw");
  Send(fd, EncodeKvFrame(KvFrameKind::kSet, 2, impostor.SerializeAsString()));
  auto denied = Reply(fd, &id);
  ASSERT_TRUE(denied.has_value());
  EXPECT_EQ(id, 2u);
  auto grpc_context = Ctx(cluster_->rank_token(1));
  v1::KvSetResponse unused;
  grpc::Status grpc_denied =
      unix_->KvSet(grpc_context.get(), impostor, &unused);
  EXPECT_EQ(static_cast<int>(denied->first.code()),
            static_cast<int>(grpc_denied.error_code()));
  EXPECT_EQ(denied->first.message(), grpc_denied.error_message());
  EXPECT_EQ(denied->first.code(), absl::StatusCode::kPermissionDenied);

  // A malformed request: a precise error; the channel stays open.
  Send(fd, EncodeKvFrame(KvFrameKind::kGet, 3, "\xff\xff\xff"));
  auto malformed = Reply(fd, &id);
  ASSERT_TRUE(malformed.has_value());
  EXPECT_EQ(malformed->first.ToString(),
            "INVALID_ARGUMENT: malformed KvGet request on the key-value "
            "channel");
  v1::KvGetRequest get;
  *get.mutable_member() = member;
  get.set_key("r1/raw");
  Send(fd, EncodeKvFrame(KvFrameKind::kGet, 4, get.SerializeAsString()));
  auto got = Reply(fd, &id);
  ASSERT_TRUE(got.has_value());
  v1::KvGetResponse get_response;
  ASSERT_TRUE(get_response.ParseFromString(got->second));
  EXPECT_EQ(get_response.value(), "1");
  ::close(fd);
  ExpectStillServing();
}

TEST_F(KvChannelGateTest, ATicketWorksOnlyForTheProcessThatAskedForIt) {
  const v1::MemberRef member = JoinRank1();
  v1::OpenKvChannelRequest request;
  *request.mutable_member() = member;
  v1::OpenKvChannelResponse response;
  auto context = Ctx(cluster_->rank_token(1));
  grpc::Status opened = unix_->OpenKvChannel(context.get(), request, &response);
  ASSERT_TRUE(opened.ok()) << opened.error_message();
  // Another process (a child of this one, connecting on its own)
  // presents the ticket: refused, and the ticket is spent.
  int result[2];
  ASSERT_EQ(::pipe(result), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(result[0]);
    int fd = Connect();
    std::string answer = "no answer";
    if (fd >= 0) {
      const std::string hello =
          EncodeKvFrame(KvFrameKind::kHello, 0, response.ticket());
      (void)!::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
      if (auto reply = Reply(fd, nullptr)) answer = reply->first.ToString();
    }
    (void)!::write(result[1], answer.data(), answer.size());
    ::_exit(0);
  }
  ::close(result[1]);
  std::string answer;
  char buffer[1024];
  ssize_t n;
  while ((n = ::read(result[0], buffer, sizeof(buffer))) > 0) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  ::close(result[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_THAT(answer,
              HasSubstr("PERMISSION_DENIED: the key-value channel ticket of "
                        "rank 1 was issued to pid "));
  EXPECT_THAT(answer, HasSubstr(absl::StrCat("not to pid ", child)));
  int fd = Connect();
  ASSERT_GE(fd, 0);
  Send(fd, EncodeKvFrame(KvFrameKind::kHello, 0, response.ticket()));
  auto spent = Reply(fd, nullptr);
  ASSERT_TRUE(spent.has_value());
  EXPECT_EQ(spent->first.code(), absl::StatusCode::kUnauthenticated);
  ::close(fd);
  ExpectStillServing();
}

TEST_F(KvChannelGateTest, AfterLeaveTheChannelRefusesAsTheRankServiceDoes) {
  const v1::MemberRef member = JoinRank1();
  v1::OpenKvChannelRequest request;
  *request.mutable_member() = member;
  v1::OpenKvChannelResponse response;
  auto context = Ctx(cluster_->rank_token(1));
  ASSERT_TRUE(unix_->OpenKvChannel(context.get(), request, &response).ok());
  int fd = Connect();
  ASSERT_GE(fd, 0);
  Send(fd, EncodeKvFrame(KvFrameKind::kHello, 0, response.ticket()));
  auto welcome = Reply(fd, nullptr);
  ASSERT_TRUE(welcome.has_value());
  ASSERT_TRUE(welcome->first.ok()) << welcome->first;

  v1::LeaveRequest leave;
  *leave.mutable_member() = member;
  v1::LeaveResponse left;
  auto leave_context = Ctx(cluster_->rank_token(1));
  ASSERT_TRUE(unix_->Leave(leave_context.get(), leave, &left).ok());

  v1::KvAddRequest add;
  *add.mutable_member() = member;
  add.set_key("r1/after");
  add.set_delta(1);
  Send(fd, EncodeKvFrame(KvFrameKind::kAdd, 5, add.SerializeAsString()));
  auto refused = Reply(fd, nullptr);
  ASSERT_TRUE(refused.has_value());
  auto grpc_context = Ctx(cluster_->rank_token(1));
  v1::KvAddResponse unused;
  grpc::Status grpc_refused = unix_->KvAdd(grpc_context.get(), add, &unused);
  ASSERT_FALSE(grpc_refused.ok());
  EXPECT_EQ(static_cast<int>(refused->first.code()),
            static_cast<int>(grpc_refused.error_code()));
  EXPECT_EQ(refused->first.message(), grpc_refused.error_message());
  ::close(fd);
}

// A channel with its fill of requests in flight (32 blocked gets) reads
// no more of its socket; once they end (the key is set over gRPC), it
// reads again at once: the request sent behind them is answered.
TEST_F(KvChannelGateTest, AChannelAtItsFillReadsAgainWhenItsCallsEnd) {
  const v1::MemberRef member = JoinRank1();
  KvFrameReader reader;
  const int fd = OpenChannel(member, reader);
  ASSERT_GE(fd, 0);
  constexpr uint64_t kFill = 32;  // KvSocket::Options::max_requests_in_flight
  v1::KvGetRequest wait;
  *wait.mutable_member() = member;
  wait.set_key("r1/later");
  wait.set_timeout_ms(60000);
  for (uint64_t id = 1; id <= kFill; ++id) {
    Send(fd, EncodeKvFrame(KvFrameKind::kGet, id, wait.SerializeAsString()));
  }
  v1::KvGetRequest absent;
  *absent.mutable_member() = member;
  absent.set_key("r1/absent");
  Send(fd, EncodeKvFrame(KvFrameKind::kGet, 100, absent.SerializeAsString()));
  // Not read yet: the fill is in flight.
  timeval quick{0, 300'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &quick, sizeof(quick));
  char byte;
  EXPECT_LT(::recv(fd, &byte, 1, MSG_PEEK), 0);
  timeval patient{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patient, sizeof(patient));

  v1::KvSetRequest set;
  *set.mutable_member() = member;
  set.set_key("r1/later");
  set.set_value("v");
  v1::KvSetResponse stored;
  auto context = Ctx(cluster_->rank_token(1));
  ASSERT_TRUE(unix_->KvSet(context.get(), set, &stored).ok());
  std::set<uint64_t> answered;
  for (uint64_t i = 0; i <= kFill; ++i) {
    uint64_t id = 0;
    auto reply = Reply(fd, &id, reader);
    ASSERT_TRUE(reply.has_value()) << "after " << answered.size() << " replies";
    answered.insert(id);
    if (id == 100) {
      EXPECT_EQ(reply->first.code(), absl::StatusCode::kNotFound)
          << reply->first;
    } else {
      EXPECT_TRUE(reply->first.ok()) << reply->first;
    }
  }
  EXPECT_EQ(answered.size(), kFill + 1);
  EXPECT_EQ(answered.count(100), 1u);
  ::close(fd);
  ExpectStillServing();
}

// A rank that stops reading its replies stops having its requests read:
// 300 gets of a 1 MiB value, never read, leave the daemon holding a few
// MiB of replies, not 300 MiB; the daemon serves on.
TEST_F(KvChannelGateTest, ARankThatReadsNoRepliesHoldsBoundedDaemonMemory) {
  const v1::MemberRef member = JoinRank1();
  v1::KvSetRequest set;
  *set.mutable_member() = member;
  set.set_key("r1/big");
  set.set_value(std::string(1 << 20, 'b'));
  v1::KvSetResponse stored;
  auto context = Ctx(cluster_->rank_token(1));
  ASSERT_TRUE(unix_->KvSet(context.get(), set, &stored).ok());
  auto resident_kib = [&] {
    std::ifstream status(
        absl::StrCat("/proc/", cluster_->daemon(0).pid(), "/status"));
    std::string line;
    while (std::getline(status, line)) {
      if (absl::StartsWith(line, "VmRSS:")) {
        return std::stol(line.substr(6));
      }
    }
    return 0L;
  };
  KvFrameReader reader;
  const int fd = OpenChannel(member, reader);
  ASSERT_GE(fd, 0);
  const long before = resident_kib();
  v1::KvGetRequest get;
  *get.mutable_member() = member;
  get.set_key("r1/big");
  std::string frames;
  for (uint64_t id = 1; id <= 300; ++id) {
    frames += EncodeKvFrame(KvFrameKind::kGet, id, get.SerializeAsString());
  }
  // All of it fits the socket's buffer: the daemon decides what it reads.
  Send(fd, frames);
  absl::SleepFor(absl::Seconds(2));
  const long grown = resident_kib() - before;
  EXPECT_LT(grown, 64 << 10) << "KiB held for the unread replies";
  // Reading now, the rank gets its replies in order of their requests'
  // ends, all of them.
  for (int i = 0; i < 300; ++i) {
    uint64_t id = 0;
    auto reply = Reply(fd, &id, reader);
    ASSERT_TRUE(reply.has_value()) << "after " << i << " replies";
    ASSERT_TRUE(reply->first.ok()) << reply->first;
  }
  ::close(fd);
  ExpectStillServing();
}

// A rank has one channel: its next one closes the earlier (whose waits
// end), and serves.
TEST_F(KvChannelGateTest, ARanksNewChannelClosesItsEarlierOne) {
  const v1::MemberRef member = JoinRank1();
  KvFrameReader first_reader, second_reader;
  const int first = OpenChannel(member, first_reader);
  ASSERT_GE(first, 0);
  v1::KvGetRequest wait;
  *wait.mutable_member() = member;
  wait.set_key("r1/never");
  wait.set_timeout_ms(60000);
  Send(first, EncodeKvFrame(KvFrameKind::kGet, 1, wait.SerializeAsString()));
  const int second = OpenChannel(member, second_reader);
  ASSERT_GE(second, 0);
  EXPECT_FALSE(Reply(first, nullptr, first_reader).has_value());
  v1::KvGetRequest absent;
  *absent.mutable_member() = member;
  absent.set_key("r1/absent");
  Send(second, EncodeKvFrame(KvFrameKind::kGet, 2, absent.SerializeAsString()));
  auto reply = Reply(second, nullptr, second_reader);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->first.code(), absl::StatusCode::kNotFound);
  ::close(first);
  ::close(second);
  ExpectStillServing();
}

}  // namespace
}  // namespace rankd::testing
