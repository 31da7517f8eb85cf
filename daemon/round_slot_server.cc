// daemon/round_slot_server.cc: see round_slot_server.h.
#include "daemon/round_slot_server.h"

#include <sched.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "common/round_slots.h"
#include "daemon/log.h"

namespace rankd {
namespace {

// How often a watcher checks that its rank is still a member.
constexpr absl::Duration kMemberCheck = absl::Seconds(1);
// Rings of the request bell in a row that bring no request: a rank's end
// rings only when it posts (or attaches), so this many is a rank keeping
// its watcher busy on purpose.
constexpr int kMaxEmptyRings = 1000;

absl::StatusOr<std::string> RandomName() {
  char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != sizeof(bytes)) {
    return absl::UnavailableError("cannot draw a random round-slots name");
  }
  return absl::StrCat(".rankd-rounds-",
                      absl::BytesToHexString(absl::string_view(bytes, 16)));
}

}  // namespace

// One rank's file and its watcher thread.
class RoundSlotServer::Channel {
 public:
  Channel(NodeAgent* agent, std::shared_ptr<const RoundObserver> observe,
          v1::MemberRef member, std::string path,
          std::shared_ptr<RoundSlots> slots, absl::Duration spin)
      : agent_(agent),
        observe_(std::move(observe)),
        member_(std::move(member)),
        path_(std::move(path)),
        slots_(std::move(slots)),
        spin_(spin) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  // Asks the watcher to end and wakes it (and the rank's waiters).
  void Close() {
    stop_.store(true);
    slots_->Close();
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
    Unlink();
  }
  bool finished() const { return finished_.load(); }

 private:
  void Unlink() {
    if (!unlinked_.exchange(true)) ::unlink(path_.c_str());
  }

  void Run() {
    const absl::Time attach_by = MonotonicNow() + kAttachTimeout;
    absl::Time next_check = MonotonicNow() + kMemberCheck;
    uint64_t next = 0;  // the next request to take
    int empty_rings = 0;
    // Whether the last two requests came back to back (see kBackToBack).
    bool hot = false;
    absl::Time last_request = absl::InfinitePast();
    std::string ended;
    // Closed by Close() or by the rank itself (it detached): either way no
    // request will come.
    while (!stop_.load() && !slots_->closed()) {
      const uint32_t bell = slots_->RequestBell();
      if (!unlinked_.load() &&
          (slots_->attached() || MonotonicNow() >= attach_by)) {
        Unlink();
      }
      const uint64_t posted = slots_->posted();
      if (slots_->broken()) {
        ended = "truncated its round-slots file";
        break;
      }
      empty_rings = posted > next ? 0 : empty_rings + 1;
      if (empty_rings > kMaxEmptyRings) {
        ended = absl::StrCat("broke the protocol (rang ", kMaxEmptyRings,
                             " times without posting)");
        break;
      }
      if (posted > next) {
        const absl::Time now = MonotonicNow();
        hot = spin_ > absl::ZeroDuration() && now - last_request <= kBackToBack;
        last_request = now;
      }
      if (!DispatchUpTo(posted, next, ended)) break;
      if (MonotonicNow() >= next_check) {
        if (absl::Status s = agent_->CheckMember(member_); !s.ok()) {
          // What the rank posted meanwhile gets the agent's own answer
          // (the job's failure, "left", ...) rather than "closed".
          std::string ignored;
          DispatchUpTo(slots_->posted(), next, ignored);
          ended = absl::StrCat("is no longer a member (", s.message(), ")");
          break;
        }
        next_check = MonotonicNow() + kMemberCheck;
        empty_rings = 0;  // the 1 s wake-ups ring nothing either
      }
      absl::Time wake = next_check;
      if (!unlinked_.load() && attach_by < wake) wake = attach_by;
      if (hot && SpinForRequests(bell)) continue;
      slots_->WaitForRequests(bell, wake);
    }
    if (!ended.empty()) {
      Log(absl::StrCat("rank ", member_.rank(), " ", ended,
                       "; closing its round slots"));
      slots_->Close();
    }
    Unlink();
    finished_.store(true);
  }

  // Polls the request bell for a little while after a request, as the
  // rank polls for its answer: true when it moved.
  bool SpinForRequests(uint32_t bell) {
    const absl::Time until = MonotonicNow() + spin_;
    while (MonotonicNow() < until) {
      if (slots_->RequestBell() != bell) return true;
      sched_yield();
    }
    return false;
  }

  // Dispatches requests [next, posted), advancing `next`. False, with
  // `violation` set, when the rank's count moved backwards or past the
  // slots, or a request reuses a slot whose previous request is not
  // answered yet: the rank reads an answer before it reuses its slot, so
  // one that posts sooner would make the daemon hold more rounds than it
  // has slots.
  bool DispatchUpTo(uint64_t posted, uint64_t& next, std::string& violation) {
    const uint32_t slots = slots_->geometry().slots;
    if (posted < next || posted - next > slots) {
      violation = absl::StrCat("broke the protocol (posted ", posted,
                               " requests after ", next, " were taken, with ",
                               slots, " slots)");
      return false;
    }
    for (; next < posted; ++next) {
      if (next >= slots &&
          ledger_->answered[next % slots].load() != next - slots + 1) {
        violation = absl::StrCat("broke the protocol (posted request ", next,
                                 " before request ", next - slots,
                                 " of the same slot was answered)");
        return false;
      }
      Dispatch(next);
    }
    return true;
  }

  // Hands request `sequence` to the agent; the reply writes the answer.
  // The request counts as taken only once the agent has it.
  void Dispatch(uint64_t sequence) {
    absl::StatusOr<SlotRequest> taken = slots_->Take(sequence);
    std::shared_ptr<RoundSlots> slots = slots_;
    std::shared_ptr<Ledger> ledger = ledger_;
    if (!taken.ok()) {
      ledger->Answered(sequence);
      slots->Answer(sequence, 0, 0, {}, taken.status());
      slots->MarkTaken(sequence);
      return;
    }
    v1::AllGatherWordsRequest request;
    *request.mutable_member() = member_;
    request.set_round(taken->round);
    request.set_timeout_ms(taken->timeout_ms);
    request.mutable_words()->Add(taken->words.begin(), taken->words.end());
    const uint64_t round = taken->round;
    agent_->AllGatherWords(
        request, [slots, ledger, sequence, round, observe = observe_,
                  taken_at = MonotonicNow()](
                     absl::StatusOr<v1::AllGatherWordsResponse> result) {
          ledger->Answered(sequence);
          if (!result.ok()) {
            slots->Answer(sequence, round, 0, {}, result.status());
          } else {
            slots->Answer(sequence, result->round(), result->words_per_rank(),
                          result->words(), absl::OkStatus());
          }
          if (*observe)
            (*observe)(result.status().code(), MonotonicNow() - taken_at);
        });
    slots_->MarkTaken(sequence);
  }

  // Which request each slot last answered, kept by the daemon (the file's
  // copy is the rank's to spoil). Shared with pending replies.
  struct Ledger {
    explicit Ledger(uint32_t slots)
        : answered(std::make_unique<std::atomic<uint64_t>[]>(slots)),
          slots(slots) {}
    void Answered(uint64_t sequence) {
      answered[sequence % slots].store(sequence + 1);
    }
    std::unique_ptr<std::atomic<uint64_t>[]> answered;
    const uint32_t slots;
  };

  NodeAgent* const agent_;
  const std::shared_ptr<const RoundObserver> observe_;
  const v1::MemberRef member_;
  const std::string path_;
  // Shared with replies still to come; they may outlive the channel.
  const std::shared_ptr<RoundSlots> slots_;
  const absl::Duration spin_;
  const std::shared_ptr<Ledger> ledger_ =
      std::make_shared<Ledger>(slots_->geometry().slots);
  std::atomic<bool> stop_{false};
  std::atomic<bool> unlinked_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

RoundSlotServer::RoundSlotServer(NodeAgent* agent, std::string folder,
                                 mode_t mode, RoundObserver observe,
                                 absl::Duration spin)
    : agent_(agent),
      folder_(std::move(folder)),
      mode_(mode),
      observe_(std::make_shared<const RoundObserver>(std::move(observe))),
      spin_(spin) {}

RoundSlotServer::~RoundSlotServer() { Stop(); }

absl::StatusOr<v1::OpenRoundSlotsResponse> RoundSlotServer::Open(
    const v1::OpenRoundSlotsRequest& request) {
  if (absl::Status s = agent_->CheckMember(request.member()); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> name = RandomName();
  if (!name.ok()) return name.status();
  const std::string path = absl::StrCat(folder_, "/", *name);
  const RoundSlotsGeometry geometry =
      RoundSlotsGeometry::ForWorld(agent_->world_size());
  absl::StatusOr<std::unique_ptr<RoundSlots>> slots =
      RoundSlots::Create(path, mode_, geometry);
  if (!slots.ok()) return slots.status();
  auto channel = std::make_shared<Channel>(agent_, observe_, request.member(),
                                           path, std::move(*slots), spin_);
  std::vector<std::shared_ptr<Channel>> retired;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      channel->Join();  // unlinks; its thread never started
      return absl::UnavailableError("the daemon is shutting down");
    }
    auto it = channels_.find(request.member().rank());
    if (it != channels_.end()) retired.push_back(std::move(it->second));
    for (auto i = channels_.begin(); i != channels_.end();) {
      if (i->second != nullptr && i->second->finished()) {
        retired.push_back(std::move(i->second));
        i = channels_.erase(i);
      } else {
        ++i;
      }
    }
    channels_[request.member().rank()] = channel;
    channel->Start();
  }
  for (const auto& old : retired) {
    old->Close();
    old->Join();
  }
  v1::OpenRoundSlotsResponse response;
  response.set_path(path);
  response.set_slots(geometry.slots);
  response.set_frame_words(geometry.frame_words);
  response.set_result_words(geometry.result_words);
  return response;
}

void RoundSlotServer::Stop() {
  std::map<uint32_t, std::shared_ptr<Channel>> channels;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    channels.swap(channels_);
  }
  for (auto& [rank, channel] : channels) channel->Close();
  for (auto& [rank, channel] : channels) channel->Join();
}

size_t RoundSlotServer::open() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [rank, channel] : channels_) n += !channel->finished();
  return n;
}

}  // namespace rankd
