// gloo_rank: one rank of a test job that brings a c10d::ProcessGroupGloo
// up over rankd's c10d store (c10d_store/store.h) and runs collectives,
// for c10d_store/process_group_test.cc. Joins through --target with the
// token in $RANKD_RANK_TOKEN (as a launcher hands it), prints "OK ..."
// lines for each check that held and "ERROR ..." for one that did not
// (exit status 1).
//
//   --mode=collectives  all_reduce, all_gather and broadcast with exact
//                       values on the world, then all_reduce on a subgroup
//                       of ranks 0 and world-1; exit 0.
//   --mode=kill_drill   one all_reduce; ranks 0 and 1 make a subgroup;
//                       then, while --victim (not 0 or 1) sleeps until the
//                       test kills it, rank 0 waits in a subgroup
//                       all_reduce rank 1 never joins, rank 1 in a store
//                       get of a key no one sets, and every other rank in
//                       a world all_reduce; each prints "WAITING", then
//                       "COLLECTIVE_ENDED <ms> <error>" (rank 1:
//                       "PENDING_STORE_ERROR <ms> <error>") when its wait
//                       ends, "STORE_ERROR <error>" from its next store
//                       call and "SOCKETS_SHUT <n>"; rank 1 then stays
//                       12 s more before it exits.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "c10d_store/store.h"
#include "client/client.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"

// After c10d's headers: ATen/ATen.h first fails to compile as C++20 with
// clang (a std::vector of the then incomplete c10::IValue).
#include "ATen/ATen.h"

ABSL_FLAG(std::string, target, "", "daemon target");
ABSL_FLAG(std::string, job_id, "c10d", "job id");
ABSL_FLAG(uint32_t, local_rank, 0, "local rank");
ABSL_FLAG(uint32_t, world_size, 0, "expected world size");
ABSL_FLAG(std::string, mode, "collectives", "collectives or kill_drill");
ABSL_FLAG(int, victim, -1, "kill_drill: the rank the test kills");

namespace {

using rankd::c10d_store::Store;

void Say(const std::string& line) {
  std::cout << line << std::endl;  // flushed: the test reads it live
}

[[noreturn]] void Fail(const std::string& what) {
  Say(absl::StrCat("ERROR ", what));
  std::_Exit(1);
}

std::string Values(const at::Tensor& t) {
  std::vector<std::string> parts;
  for (int64_t i = 0; i < t.numel(); ++i) {
    parts.push_back(absl::StrCat(t[i].item<int64_t>()));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

void Expect(const std::string& what, const at::Tensor& got,
            const std::string& want) {
  const std::string values = Values(got);
  if (values != want)
    Fail(absl::StrCat(what, ": got ", values, ", want ", want));
  Say(absl::StrCat("OK ", what, " ", values));
}

std::string FirstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

int64_t MillisSince(std::chrono::steady_clock::time_point started) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now() - started)
      .count();
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGroup(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size) {
  auto options =
      c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  options->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size,
                                                     options);
}

void Collectives(const c10::intrusive_ptr<Store>& store, int rank, int world) {
  auto pg = MakeGroup(store, rank, world);
  // all_reduce: [r+1, 10(r+1)] summed over the world.
  std::vector<at::Tensor> reduced = {
      at::tensor({int64_t{rank + 1}, int64_t{10 * (rank + 1)}})};
  pg->allreduce(reduced)->wait();
  const int64_t sum = int64_t{world} * (world + 1) / 2;
  Expect("all_reduce", reduced[0], absl::StrCat("[", sum, ",", 10 * sum, "]"));

  // all_gather: each rank's [100 r].
  std::vector<at::Tensor> mine = {at::tensor({int64_t{100 * rank}})};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int r = 0; r < world; ++r) {
    gathered[0].push_back(at::zeros({1}, at::kLong));
  }
  pg->allgather(gathered, mine)->wait();
  std::vector<std::string> want;
  for (int r = 0; r < world; ++r) {
    if (gathered[0][r].item<int64_t>() != 100 * r) {
      Fail(absl::StrCat("all_gather: slot ", r, " holds ",
                        gathered[0][r].item<int64_t>()));
    }
    want.push_back(absl::StrCat(100 * r));
  }
  Say(absl::StrCat("OK all_gather [", absl::StrJoin(want, ","), "]"));

  // broadcast from the last rank.
  const int root = world - 1;
  std::vector<at::Tensor> cast = {
      rank == root ? at::tensor({int64_t{7}, int64_t{-3}, int64_t{42}})
                   : at::zeros({3}, at::kLong)};
  c10d::BroadcastOptions from_root;
  from_root.rootRank = root;
  pg->broadcast(cast, from_root)->wait();
  Expect("broadcast", cast[0], "[7,-3,42]");

  // A subgroup of ranks 0 and world-1 (one per node), as torch's new_group
  // makes one: its own key namespace under the store.
  if (rank == 0 || rank == root) {
    auto sub_store = c10::make_intrusive<c10d::PrefixStore>("subgroup", store);
    auto sub = MakeGroup(sub_store, rank == 0 ? 0 : 1, 2);
    std::vector<at::Tensor> t = {at::tensor({int64_t{rank}})};
    sub->allreduce(t)->wait();
    Expect("subgroup_all_reduce", t[0], absl::StrCat("[", root, "]"));
  }
  // Every rank leaves only after the subgroup is done.
  std::vector<at::Tensor> last = {at::ones({1}, at::kLong)};
  pg->allreduce(last)->wait();
  Expect("final_all_reduce", last[0], absl::StrCat("[", world, "]"));
}

// Prints how the pending `work` ended: "COLLECTIVE_ENDED <ms> <error>".
void AwaitEnd(const c10::intrusive_ptr<c10d::Work>& work) {
  Say("WAITING");
  const auto started = std::chrono::steady_clock::now();
  std::string error = "(none)";
  try {
    work->wait();
  } catch (const std::exception& e) {
    error = e.what();
  }
  Say(absl::StrCat("COLLECTIVE_ENDED ", MillisSince(started), " ",
                   FirstLine(error)));
}

void KillDrill(const c10::intrusive_ptr<Store>& store, int rank, int world,
               int victim) {
  auto pg = MakeGroup(store, rank, world);
  std::vector<at::Tensor> first = {at::ones({4})};
  pg->allreduce(first)->wait();
  Say("OK first_all_reduce");
  // Ranks 0 and 1 (the victim is neither) also form a subgroup, whose
  // connections do not reach the victim: only the store's shutdown ends a
  // wait in it.
  c10::intrusive_ptr<c10d::ProcessGroupGloo> sub;
  if (rank <= 1) {
    sub = MakeGroup(c10::make_intrusive<c10d::PrefixStore>("drill", store),
                    rank, 2);
  }
  if (rank == victim) {
    Say("VICTIM");
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (rank == 0) {
    // Waits in a subgroup all_reduce that rank 1 never joins.
    std::vector<at::Tensor> t = {at::ones({1 << 16})};
    AwaitEnd(sub->allreduce(t));
  } else if (rank == 1) {
    // Waits in a store get of a key no one sets (the store's timeout is
    // minutes).
    Say("WAITING");
    const auto started = std::chrono::steady_clock::now();
    try {
      store->get("never-set");
      Say("PENDING_STORE_ERROR (none)");
    } catch (const rankd::c10d_store::JobFailedError& e) {
      Say(absl::StrCat("PENDING_STORE_ERROR ", MillisSince(started), " ",
                       FirstLine(e.what())));
    }
  } else {
    // Waits in a world all_reduce the victim never joins.
    std::vector<at::Tensor> t = {at::ones({1 << 16})};
    AwaitEnd(pg->allreduce(t));
  }
  try {
    store->get("after-the-failure");
    Say("STORE_ERROR (none)");
  } catch (const rankd::c10d_store::EpochEndedError& e) {
    Say(absl::StrCat("STORE_ERROR EpochEndedError: ", FirstLine(e.what())));
  } catch (const rankd::c10d_store::JobFailedError& e) {
    Say(absl::StrCat("STORE_ERROR JobFailedError: ", FirstLine(e.what())));
  } catch (const std::exception& e) {
    Say(absl::StrCat("STORE_ERROR (not JobFailedError) ", FirstLine(e.what())));
  }
  Say(absl::StrCat("SOCKETS_SHUT ", store->sockets_shut_down()));
  if (rank == 1) {
    // Stays, its connections open, past the drill's bound: rank 0's
    // subgroup wait must end by the shutdown, not by this process's exit.
    std::this_thread::sleep_for(std::chrono::seconds(12));
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  rankd::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  auto connected = rankd::Client::Connect(options);
  if (!connected.ok()) Fail(connected.status().ToString());
  std::shared_ptr<rankd::Client> client(std::move(*connected));
  rankd::JoinOptions join;
  join.job_id = absl::GetFlag(FLAGS_job_id);
  join.local_rank = absl::GetFlag(FLAGS_local_rank);
  join.world_size = absl::GetFlag(FLAGS_world_size);
  join.wait_for_world = absl::Seconds(30);
  join.device.set_kind("cpu");
  auto session = client->Join(join);
  if (!session.ok()) Fail(session.status().ToString());
  const int rank = static_cast<int>(session->rank());
  const int world = static_cast<int>(session->world_size());
  Say(absl::StrCat("JOINED rank ", rank, " of ", world, " pid ", getpid()));
  try {
    auto store = Store::Create(client);
    if (absl::GetFlag(FLAGS_mode) == "kill_drill") {
      KillDrill(store, rank, world, absl::GetFlag(FLAGS_victim));
    } else {
      Collectives(store, rank, world);
    }
  } catch (const std::exception& e) {
    Fail(e.what());
  }
  Say("DONE");
  return 0;
}
