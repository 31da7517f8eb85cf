// Store conformance: the same cases on c10d::TCPStore and on rankd's
// c10d store (a real rankd daemon, a joined rank), expecting the same
// results (the C++ twin of python/tests/test_torch.py's store cases);
// then rankd's own: errors, and what a job failure does to the store.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "c10d_store/errors.h"
#include "c10d_store/store.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"

namespace rankd::c10d_store {
namespace {

using std::chrono::milliseconds;
using testing::ClusterOptions;
using testing::LocalCluster;

constexpr char kJob[] = "c10d-store";

std::vector<uint8_t> B(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// One rankd job (one node, one rank) for the whole test program, and its
// joined rank; stopped at exit (the rank leaves, then the daemon stops).
// Recovering(): another such job whose daemon recovers in place.
class RankdJob {
 public:
  static RankdJob& Get() {
    static RankdJob job(/*recovery=*/false);
    return job;
  }
  static RankdJob& Recovering() {
    static RankdJob job(/*recovery=*/true);
    return job;
  }
  const std::shared_ptr<Client>& client() const { return client_; }

 private:
  explicit RankdJob(bool recovery) {
    ClusterOptions options;
    options.job_id = kJob;
    options.nnodes = 1;
    options.nproc_per_node = 1;
    options.declare_shared_prefix = false;
    options.extra_flags = {"--kv_shared_prefixes=torch/",
                           recovery ? "--recovery=on" : "--recovery=off"};
    cluster_ = std::make_unique<LocalCluster>(options);
    absl::Status started = cluster_->Start();
    if (!started.ok()) {
      ADD_FAILURE() << started;
      return;
    }
    ClientOptions client_options;
    client_options.target = cluster_->socket_target(0);
    client_options.bearer_token = cluster_->rank_token(0);
    auto client = Client::Connect(client_options);
    if (!client.ok()) {
      ADD_FAILURE() << client.status();
      return;
    }
    JoinOptions join;
    join.job_id = kJob;
    join.device.set_kind("cpu");
    auto joined = (*client)->Join(join);
    if (!joined.ok()) {
      ADD_FAILURE() << joined.status();
      return;
    }
    client_ = std::shared_ptr<Client>(std::move(*client));
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::shared_ptr<Client> client_;
};

// Which store a case runs on.
enum class Kind { kRankd, kTcp };

class StoreConformanceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    static int cases = 0;
    ++cases;
    const milliseconds timeout(1000);
    if (GetParam() == Kind::kRankd) {
      ASSERT_NE(RankdJob::Get().client(), nullptr);
      // A fresh namespace per case, as a fresh TCPStore.
      StoreOptions options;
      options.prefix = absl::StrCat("torch/case", cases, "/");
      options.timeout = timeout;
      // Two stores over one client (each would add a failure callback;
      // these tests fail no job).
      options.install_failure_callback = false;
      store_ = Store::Create(RankdJob::Get().client(), options);
      peer_ = Store::Create(RankdJob::Get().client(), options);
    } else {
      c10d::TCPStoreOptions options;
      options.port = 0;
      options.isServer = true;
      options.numWorkers = 1;
      options.waitWorkers = false;
      options.timeout = timeout;
      auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
      c10d::TCPStoreOptions client;
      client.port = server->getPort();
      client.timeout = timeout;
      store_ = server;
      peer_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client);
    }
  }

  // Whether `key` exists (check() on both stores).
  bool Has(const std::string& key) { return store_->check({key}); }

  c10::intrusive_ptr<c10d::Store> store_;
  // A second store over the same keys (a second TCPStore client; a second
  // rankd store with the same prefix).
  c10::intrusive_ptr<c10d::Store> peer_;
};

TEST_P(StoreConformanceTest, SetGetBytes) {
  store_->set("a", {0, 1, 'v'});
  store_->set("s", B("text"));
  EXPECT_EQ(store_->get("a"), std::vector<uint8_t>({0, 1, 'v'}));
  EXPECT_EQ(store_->get("s"), B("text"));
  store_->set("a", B("again"));  // a second write replaces
  EXPECT_EQ(store_->get("a"), B("again"));
  store_->set("empty", {});
  EXPECT_EQ(store_->get("empty"), std::vector<uint8_t>());
}

TEST_P(StoreConformanceTest, OneMebibyteValue) {
  std::vector<uint8_t> value(1 << 20);
  for (size_t i = 0; i < value.size(); ++i) value[i] = i % 251;
  store_->set("big", value);
  EXPECT_EQ(store_->get("big"), value);
}

TEST_P(StoreConformanceTest, GetOfAMissingKeyTimesOut) {
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(store_->get("never"), c10::Error);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, milliseconds(900));
  EXPECT_LT(took, milliseconds(10000));
}

TEST_P(StoreConformanceTest, GetWaitsForAKeyAnotherStoreSets) {
  store_->setTimeout(milliseconds(10000));
  std::thread writer([this] {
    std::this_thread::sleep_for(milliseconds(200));
    peer_->set("late", B("here"));
  });
  EXPECT_EQ(store_->get("late"), B("here"));
  writer.join();
}

TEST_P(StoreConformanceTest, Add) {
  EXPECT_EQ(store_->add("n", 3), 3);
  EXPECT_EQ(store_->add("n", -5), -2);
  EXPECT_EQ(store_->get("n"), B("-2"));
  EXPECT_EQ(peer_->add("n", 0), -2);
}

TEST_P(StoreConformanceTest, CompareSet) {
  EXPECT_EQ(store_->compareSet("c", {}, B("first")), B("first"));
  EXPECT_EQ(store_->compareSet("c", B("wrong"), B("x")), B("first"));
  EXPECT_EQ(store_->compareSet("c", B("first"), B("second")), B("second"));
  EXPECT_EQ(store_->get("c"), B("second"));
  // Absent with a non-empty expectation: TCPStore answers the expectation.
  EXPECT_EQ(store_->compareSet("absent", B("e"), B("x")), B("e"));
  EXPECT_FALSE(Has("absent"));
}

TEST_P(StoreConformanceTest, WaitCheckDelete) {
  // (No wait for a key before it is set: torch 1.13's TCPStore client then
  // reads that wait's late answer as the next wait's.)
  store_->set("k", B("v"));
  store_->set("k2", B("v"));
  store_->wait({"k", "k2"});
  store_->wait({"k"}, milliseconds(1000));
  EXPECT_TRUE(store_->check({"k", "k2"}));
  EXPECT_FALSE(store_->check({"k", "missing"}));
  EXPECT_THROW(store_->wait({"k", "missing"}, milliseconds(300)), c10::Error);
  EXPECT_TRUE(store_->deleteKey("k"));
  EXPECT_FALSE(store_->deleteKey("k"));
  EXPECT_FALSE(Has("k"));
  EXPECT_TRUE(Has("k2"));
}

TEST_P(StoreConformanceTest, TimeoutIsSettable) {
  store_->setTimeout(milliseconds(2000));
  EXPECT_EQ(store_->getTimeout(), milliseconds(2000));
}

// Timeouts longer than one wait the daemon takes (an hour): the store
// waits in slices (ProcessGroupGloo's timeout reaches wait(keys, timeout)).
TEST_P(StoreConformanceTest, TimeoutsOverAnHourWork) {
  const milliseconds two_hours(2 * 3600 * 1000);
  store_->set("k", B("v"));
  store_->setTimeout(two_hours);
  EXPECT_EQ(store_->get("k"), B("v"));
  store_->wait({"k"}, two_hours);
  store_->wait({"k"});
}

TEST_P(StoreConformanceTest, NumKeys) {
  // TCPStore counts a key of its own ("init/"); both count from there.
  const int64_t before = store_->getNumKeys();
  store_->set("a", B("1"));
  store_->set("b", B("2"));
  store_->set("a", B("again"));  // a second write adds no key
  EXPECT_EQ(store_->getNumKeys(), before + 2);
  EXPECT_EQ(store_->add("n", 1), 1);
  EXPECT_EQ(store_->getNumKeys(), before + 3);
  EXPECT_TRUE(store_->deleteKey("a"));
  EXPECT_EQ(store_->getNumKeys(), before + 2);
  // What torch's own code holds: a PrefixStore over the store (which
  // forwards every call, getNumKeys and deleteKey included, in C++).
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("pg", store_);
  prefixed->set("x", B("1"));
  EXPECT_EQ(store_->getNumKeys(), before + 3);
  EXPECT_EQ(prefixed->getNumKeys(), before + 3);
  EXPECT_EQ(store_->get("pg/x"), B("1"));
  EXPECT_TRUE(prefixed->deleteKey("x"));
  EXPECT_EQ(store_->getNumKeys(), before + 2);
}

INSTANTIATE_TEST_SUITE_P(BothStores, StoreConformanceTest,
                         ::testing::Values(Kind::kRankd, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kRankd ? "Rankd" : "Tcp";
                         });

// rankd's own: errors carry rankd's code and words.
class RankdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(RankdJob::Get().client(), nullptr); }
  c10::intrusive_ptr<Store> Make(const std::string& prefix,
                                 milliseconds timeout = milliseconds(200)) {
    StoreOptions options;
    options.prefix = prefix;
    options.timeout = timeout;
    options.install_failure_callback = false;
    return Store::Create(RankdJob::Get().client(), options);
  }
};

TEST_F(RankdStoreTest, TimeoutNamesTheKeyAndTheTimeout) {
  auto store = Make("torch/errors/");
  try {
    store->get("never");
    FAIL() << "no timeout";
  } catch (const StoreTimeoutError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(std::string(e.what()).find("key 'never' was not set within "
                                         "0.2 s"),
              std::string::npos)
        << e.what();
  }
  try {
    store->wait({"never2"}, milliseconds(100));
    FAIL() << "no timeout";
  } catch (const StoreTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never2'"), std::string::npos);
  }
}

TEST_F(RankdStoreTest, RankdRefusalsAreStoreErrorsWithItsCode) {
  auto store = Make("torch/errors/");
  std::vector<uint8_t> too_big((1 << 20) + 1, 'x');
  try {
    store->set("big", too_big);
    FAIL() << "accepted a value over 1 MiB";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument)
        << e.what();
  }
  // A key past rankd's key limit (with the prefix).
  EXPECT_THROW(store->set(std::string(kMaxKeyBytes, 'k'), B("1")), StoreError);
  // A value that is no counter cannot be added to.
  store->set("text", B("not a number"));
  try {
    store->add("text", 1);
    FAIL() << "added to a value that is no counter";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("not a decimal counter"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(RankdStoreTest, APrefixTheJobDoesNotShareStillWorksForOneRank) {
  // Not shared: rank 0 creates and owns the keys; a lone rank works, and
  // set's compare-and-set loop works on owned keys too.
  auto store = Make("own/");
  store->set("k", B("1"));
  store->set("k", B("2"));
  EXPECT_EQ(store->get("k"), B("2"));
  EXPECT_TRUE(store->deleteKey("k"));
}

TEST_F(RankdStoreTest, CreateRefusesBadArguments) {
  StoreOptions options;
  options.prefix = "";
  EXPECT_THROW(Store::Create(RankdJob::Get().client(), options), StoreError);
  EXPECT_THROW(Store::Create(nullptr), StoreError);
}

TEST_F(RankdStoreTest, KeysLiveUnderThePrefix) {
  auto store = Make("torch/prefix-check/");
  store->set("a", B("1"));
  auto value = RankdJob::Get().client()->KvGet("torch/prefix-check/a",
                                               absl::ZeroDuration());
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "1");
}

TEST_F(RankdStoreTest, AJobFailureFailsEveryCallAndEndsGlooConnections) {
  auto store = Make("torch/failure/");
  // A Gloo pair's listening address, published as ProcessGroupGloo does (a
  // tcp Address record: sockaddr_storage, then a sequence number), and a
  // connection to it.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
      0);
  ASSERT_EQ(listen(listener, 1), 0);
  sockaddr_storage published{};
  socklen_t length = sizeof(published);
  getsockname(listener, reinterpret_cast<sockaddr*>(&published), &length);
  const int dialed = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(dialed, reinterpret_cast<sockaddr*>(&published), length),
            0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  std::vector<uint8_t> record(sizeof(published) + sizeof(int64_t), 0);
  std::memcpy(record.data(), &published, sizeof(published));
  store->set("rank_0", record);
  EXPECT_EQ(store->sockets_shut_down(), 0);

  store->OnJobFailure(absl::AbortedError(
      "job J failed (MEMBER_LOST, node 0, rank 1, event 9): rank 1 lost"));
  // The listener and both ends of the connection.
  EXPECT_EQ(store->sockets_shut_down(), 3);
  char byte;
  EXPECT_EQ(recv(dialed, &byte, 1, 0), 0);  // the end of the stream
  for (int fd : {dialed, accepted, listener}) close(fd);

  try {
    store->get("rank_0");
    FAIL() << "a call after the failure went through";
  } catch (const JobFailedError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kAborted);
    EXPECT_EQ(std::string(e.what()).substr(0, e.status().message().size()),
              "rankd store get: job J failed (MEMBER_LOST, node 0, rank 1, "
              "event 9): rank 1 lost");
  }
  EXPECT_THROW(store->set("k", B("v")), JobFailedError);
  EXPECT_THROW(store->add("n", 1), c10::Error);  // torch's class, as ever
  EXPECT_THROW(store->add("n", 1), JobFailedError);
  try {
    store->add("n", 1);
  } catch (const EpochEndedError& e) {
    ADD_FAILURE() << "the job does not recover in place: " << e.what();
  } catch (const JobFailedError&) {
  }
  // Only the first failure counts.
  store->OnJobFailure(absl::UnavailableError("another"));
  try {
    store->check({"k"});
    FAIL() << "a call after the failure went through";
  } catch (const JobFailedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 lost"), std::string::npos);
  }
}

// Where the job recovers in place, the store's keys are epoch-scoped
// (process_group_test's kill drill checks the EpochEndedError of a loss).
TEST(RecoveringRankdStoreTest, KeysAreEpochScoped) {
  const std::shared_ptr<Client>& client = RankdJob::Recovering().client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->descriptor().recovers_in_place());
  StoreOptions options;
  options.prefix = "torch/recovering/";
  options.install_failure_callback = false;
  auto store = Store::Create(client, options);
  EXPECT_EQ(store->prefix(), "epoch/1/torch/recovering/");
  store->set("k", B("v"));
  absl::StatusOr<std::string> raw =
      client->KvGet("epoch/1/torch/recovering/k", absl::ZeroDuration());
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, "v");
  EXPECT_EQ(store->get("k"), B("v"));
}

}  // namespace
}  // namespace rankd::c10d_store
