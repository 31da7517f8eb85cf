// Writes the seed corpora of the binary-input fuzzers into a folder (the
// repository's fuzz/corpus): valid requests of every method of every
// service in the service driver's input format (fuzz/internal/
// service_driver.h), and replies for rankctl's formatter. Seeds are
// deterministic, so rerunning this rewrites the same files:
//   bazel run //fuzz:write_seeds -- "$PWD/fuzz/corpus"
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/peer.pb.h"
#include "rankd/v1/rank.pb.h"

namespace {

using google::protobuf::Message;

// The corpus folder (main's argument; a pointer: no global string).
const char* out_dir = nullptr;

void Write(const std::string& fuzzer, const std::string& name,
           const std::string& bytes) {
  std::string dir = absl::StrCat(out_dir, "/", fuzzer);
  mkdir(dir.c_str(), 0755);
  std::ofstream(absl::StrCat(dir, "/", name), std::ios::binary) << bytes;
}

// A service driver input: method index, credential, request.
void WriteCall(const std::string& fuzzer, const std::string& service,
               const std::string& method, int credential,
               const Message& request, int variant = 0) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          service);
  const google::protobuf::MethodDescriptor* m = s->FindMethodByName(method);
  if (m == nullptr || m->input_type() != request.GetDescriptor()) {
    std::fprintf(stderr, "write_seeds: bad method %s\n", method.c_str());
    std::exit(1);
  }
  std::string bytes;
  bytes.push_back(static_cast<char>(m->index()));
  bytes.push_back(static_cast<char>(credential));
  bytes += request.SerializeAsString();
  Write(fuzzer, absl::StrCat(method, "-", credential, "-", variant), bytes);
}

rankd::v1::MemberRef Member(uint32_t rank) {
  rankd::v1::MemberRef member;
  member.set_job_id("fuzz");
  member.set_rank(rank);
  member.set_incarnation(1);  // the driver substitutes the live one
  return member;
}

void RankSeeds() {
  const std::string f = "rank_service_fuzzer", s = "rankd.v1.Rank";
  for (uint32_t rank : {0u, 1u}) {
    rankd::v1::JoinRequest join;
    join.set_job_id("fuzz");
    join.set_local_rank(rank);
    join.set_rank(rank);
    join.set_world_size(2);
    join.set_incarnation(1000 + rank);
    join.set_pid(4242 + rank);
    join.set_wait_for_world_ms(20);
    join.mutable_device()->set_kind("cpu");
    WriteCall(f, s, "Join", 0, join, rank);
    WriteCall(f, s, "Join", 2, join, rank);
  }
  rankd::v1::GetDescriptorRequest descriptor;
  *descriptor.mutable_member() = Member(0);
  WriteCall(f, s, "GetDescriptor", 0, descriptor);
  rankd::v1::AllGatherWordsRequest words;
  *words.mutable_member() = Member(0);
  words.set_round(1);
  words.add_words(7);
  words.add_words(9);
  words.set_timeout_ms(20);
  WriteCall(f, s, "AllGatherWords", 0, words);
  rankd::v1::KvSetRequest set;
  *set.mutable_member() = Member(0);
  set.set_key("nccl/unique_id");
  set.set_value("0123456789");
  WriteCall(f, s, "KvSet", 0, set);
  WriteCall(f, s, "KvSet", 1, set);
  rankd::v1::KvGetRequest get;
  *get.mutable_member() = Member(1);
  get.set_key("nccl/unique_id");
  get.set_timeout_ms(20);
  WriteCall(f, s, "KvGet", 0, get);
  rankd::v1::KvAddRequest add;
  *add.mutable_member() = Member(0);
  add.set_key("counter");
  add.set_delta(3);
  WriteCall(f, s, "KvAdd", 0, add);
  rankd::v1::KvDeleteRequest del;
  *del.mutable_member() = Member(0);
  del.set_key("counter");
  WriteCall(f, s, "KvDelete", 0, del);
  rankd::v1::WatchRequest watch;
  *watch.mutable_member() = Member(0);
  WriteCall(f, s, "Watch", 0, watch);
  rankd::v1::LeaveRequest leave;
  *leave.mutable_member() = Member(1);
  WriteCall(f, s, "Leave", 0, leave);
}

rankd::v1::NodeRef Node1() {
  rankd::v1::NodeRef node;
  node.set_job_id("fuzz");
  node.set_node_index(1);
  node.set_daemon_incarnation(77);
  return node;
}

void PeerSeeds() {
  const std::string f = "peer_service_fuzzer", s = "rankd.v1.Peer";
  constexpr int kNodeToken = 4;
  rankd::v1::RegisterNodeRequest reg;
  reg.mutable_config()->set_job_id("fuzz");
  reg.mutable_config()->set_world_size(2);
  reg.mutable_config()->set_nnodes(2);
  reg.mutable_config()->set_nproc_per_node(1);
  reg.mutable_config()->mutable_topology()->set_tensor(1);
  reg.mutable_config()->mutable_topology()->set_pipeline(1);
  reg.mutable_config()->mutable_topology()->set_expert(1);
  reg.mutable_config()->mutable_topology()->set_data(2);
  rankd::v1::NodeInfo* info = reg.mutable_node();
  info->set_node_index(1);
  info->set_hostname("node-1");
  info->set_address("127.0.0.1:1");
  info->set_local_ranks(1);
  info->set_daemon_incarnation(77);
  info->add_devices()->set_kind("cpu");
  for (int credential = 0; credential < 6; ++credential) {
    WriteCall(f, s, "RegisterNode", credential, reg);
  }
  rankd::v1::HeartbeatRequest heartbeat;
  *heartbeat.mutable_node() = Node1();
  WriteCall(f, s, "Heartbeat", kNodeToken, heartbeat);
  rankd::v1::SubscribeRequest subscribe;
  *subscribe.mutable_node() = Node1();
  WriteCall(f, s, "Subscribe", kNodeToken, subscribe);
  rankd::v1::JoinRankRequest join;
  *join.mutable_node() = Node1();
  join.set_rank(1);
  join.set_incarnation(2001);
  join.set_pid(99);
  join.set_wait_for_world_ms(20);
  join.mutable_device()->set_kind("cpu");
  WriteCall(f, s, "JoinRank", kNodeToken, join);
  join.set_rank(0);  // node 0's rank: refused
  WriteCall(f, s, "JoinRank", kNodeToken, join, 1);
  rankd::v1::ContributeWordsRequest words;
  *words.mutable_node() = Node1();
  words.set_round(1);
  rankd::v1::RankFrame* frame = words.add_frames();
  frame->set_rank(1);
  frame->add_words(5);
  words.set_timeout_ms(20);
  WriteCall(f, s, "ContributeWords", kNodeToken, words);
  words.set_round(50);
  WriteCall(f, s, "ContributeWords", kNodeToken, words, 1);
  rankd::v1::KvSetRequest set;
  *set.mutable_member() = Member(1);
  set.set_key("k");
  set.set_value("v");
  WriteCall(f, s, "KvSet", kNodeToken, set);
  rankd::v1::KvGetRequest get;
  *get.mutable_member() = Member(1);
  get.set_key("k");
  get.set_timeout_ms(20);
  WriteCall(f, s, "KvGet", kNodeToken, get);
  rankd::v1::KvAddRequest add;
  *add.mutable_member() = Member(1);
  add.set_key("n");
  add.set_delta(-2);
  WriteCall(f, s, "KvAdd", kNodeToken, add);
  rankd::v1::KvDeleteRequest del;
  *del.mutable_member() = Member(1);
  del.set_key("k");
  WriteCall(f, s, "KvDelete", kNodeToken, del);
  rankd::v1::ReleaseRankRequest release;
  *release.mutable_node() = Node1();
  release.set_rank(1);
  release.set_incarnation(1);
  release.set_reason("drill");
  WriteCall(f, s, "ReleaseRank", kNodeToken, release);
  rankd::v1::LeaveNodeRequest leave;
  *leave.mutable_node() = Node1();
  leave.set_reason("done");
  WriteCall(f, s, "LeaveNode", kNodeToken, leave);
}

void AdminSeeds() {
  const std::string f = "admin_service_fuzzer", s = "rankd.v1.Admin";
  for (int credential : {0, 1, 3}) {
    WriteCall(f, s, "GetJob", credential, rankd::v1::GetJobRequest());
    WriteCall(f, s, "GetTopology", credential, rankd::v1::GetTopologyRequest());
    WriteCall(f, s, "ListMembers", credential, rankd::v1::ListMembersRequest());
    rankd::v1::AdminKvGetRequest get;
    get.set_key("nccl/unique_id");
    WriteCall(f, s, "KvGet", credential, get);
    WriteCall(f, s, "WatchEvents", credential, rankd::v1::WatchEventsRequest());
  }
}

// rankctl_format_fuzzer inputs: selector byte, then the message.
void FormatSeeds() {
  const std::string f = "rankctl_format_fuzzer";
  rankd::v1::JobStatus job;
  job.set_job_id("demo");
  job.set_state(rankd::v1::JOB_STATE_FAILED);
  job.set_failure("rank 3 lost:\nconnection closed");
  job.set_world_size(4);
  Write(f, "job", std::string(1, '\0') + job.SerializeAsString());
  rankd::v1::Topology topology;
  topology.set_job_id("demo");
  topology.set_world_size(2);
  rankd::v1::NodeInfo* node = topology.add_nodes();
  node->set_node_index(0);
  node->set_hostname("host\t0");
  node->add_devices()->set_kind("cuda");
  Write(f, "topology", std::string(1, '\1') + topology.SerializeAsString());
  rankd::v1::MemberList members;
  rankd::v1::MemberStatus* member = members.add_members();
  member->set_rank(1);
  member->set_state(rankd::v1::MEMBER_STATE_IN_ROUND);
  member->set_round(12);
  Write(f, "members", std::string(1, '\2') + members.SerializeAsString());
  rankd::v1::JobEvent event;
  event.set_sequence(9);
  event.set_kind(rankd::v1::EVENT_KIND_MEMBER_LOST);
  event.add_ranks(1);
  event.add_ranks(2);
  event.set_message("rank 1 lost:\r\nits daemon restarted");
  Write(f, "event", std::string(1, '\3') + event.SerializeAsString());
  Write(f, "kv_value", std::string("\4value\x01\xff", 8));
  Write(f, "table", "\5NODE\tSTATE\n0\tREADY\n1\t\x1b[31mLOST");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_seeds CORPUS_FOLDER\n");
    return 2;
  }
  out_dir = argv[1];
  mkdir(out_dir, 0755);
  RankSeeds();
  PeerSeeds();
  AdminSeeds();
  FormatSeeds();
  return 0;
}
