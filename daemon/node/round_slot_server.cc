// daemon/node/round_slot_server.cc: see round_slot_server.h.
#include "daemon/node/round_slot_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "common/round_slots.h"
#include "daemon/log.h"

namespace rankd {
namespace {

// Rings of the request bell in a row that bring no request: a rank's end
// rings only when it posts (or attaches), so this many is a rank keeping
// its watcher busy on purpose.
constexpr int kMaxEmptyRings = 1000;

// Every round-slots file's name starts so (RandomName, RemoveStaleFiles).
constexpr absl::string_view kFilePrefix = ".rankd-rounds-";

absl::StatusOr<std::string> RandomName() {
  char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != sizeof(bytes)) {
    return absl::UnavailableError("cannot draw a random round-slots name");
  }
  return absl::StrCat(kFilePrefix,
                      absl::BytesToHexString(absl::string_view(bytes, 16)));
}

}  // namespace

// Polls, on one thread, the files of every channel whose rounds come back
// to back, so that a node's busy ranks keep one daemon thread polling
// instead of one each (on a node with few cores, every polling thread
// takes turns on a core with the ranks that finish the round). A channel's
// watcher hands its channel over with Cover and blocks until the poller
// hands it back: when no covered channel has had a request for `idle`,
// when the channel ended, or at Stop.
class RoundSlotServer::Poller {
 public:
  explicit Poller(absl::Duration idle) : idle_(idle) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Poller() { Stop(); }

  // Polls `channel` (whose watcher calls this) until it is handed back.
  void Cover(Channel* channel) ABSL_LOCKS_EXCLUDED(mu_);

  // Requests taken by this thread so far.
  uint64_t taken() const { return taken_.load(); }

  // Hands every channel back (from the poller's thread, between looks, so
  // a channel handed back may end at once), and ends the thread. Later
  // Covers return at once, so a busy watcher then takes its rank's requests
  // itself, one Step per request: close the channels first, as
  // RoundSlotServer::Stop does. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration idle_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Channel*> covered_ ABSL_GUARDED_BY(mu_);
  absl::Time last_cover_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<uint64_t> taken_{0};
  std::thread thread_;
};

// One rank's file and its watcher thread.
class RoundSlotServer::Channel {
 public:
  // With a `poller`, the watcher hands the channel over to it while the
  // rank's requests come back to back.
  Channel(NodeAgent* agent, std::shared_ptr<const RoundObserver> observe,
          v1::MemberRef member, std::string path,
          std::shared_ptr<RoundSlots> slots, std::shared_ptr<Poller> poller,
          const Options& options)
      : agent_(agent),
        observe_(std::move(observe)),
        member_(std::move(member)),
        path_(std::move(path)),
        slots_(std::move(slots)),
        poller_(std::move(poller)),
        back_to_back_(options.back_to_back),
        member_check_(options.member_check),
        next_check_(MonotonicNow() + member_check_) {}

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

  // What one look at the file found.
  enum class Look {
    kRequests,  // took one or more requests
    kNothing,   // nothing new
    kEnded,     // the channel ended (closed, or the rank broke the rules)
  };

  // Takes what the rank posted (the poller's look at a covered channel);
  // adds the number of requests taken to `taken`.
  Look LookAsPoller(std::atomic<uint64_t>& taken)
      ABSL_LOCKS_EXCLUDED(step_mu_) {
    absl::MutexLock lock(&step_mu_);
    const uint64_t before = next_;
    const Look look = Step(/*after_ring=*/false);
    taken.fetch_add(next_ - before);
    return look;
  }

 private:
  void Unlink() {
    if (!unlinked_.exchange(true)) ::unlink(path_.c_str());
  }

  void Run() {
    bool handed_back = false;  // by the poller, just now
    while (true) {
      // Read before looking at `posted`, so a request posted after the
      // look moves the bell from this value and the sleep below ends.
      const uint32_t bell = slots_->RequestBell();
      Look look;
      bool hot;
      absl::Time wake;
      {
        absl::MutexLock lock(&step_mu_);
        look = Step(/*after_ring=*/!handed_back);
        hot = hot_;
        wake = next_check_;
        if (!unlinked_.load() && attach_by_ < wake) wake = attach_by_;
      }
      if (look == Look::kEnded) break;
      handed_back = false;
      if (look == Look::kRequests && hot && poller_ != nullptr) {
        poller_->Cover(this);
        handed_back = true;
        continue;  // what came since it was handed back is taken first
      }
      slots_->WaitForRequests(bell, wake);
    }
    std::string ended;
    {
      absl::MutexLock lock(&step_mu_);
      ended = ended_;
    }
    if (!ended.empty()) {
      Log(absl::StrCat("rank ", member_.rank(), " ", ended,
                       "; closing its round slots"));
      slots_->Close();
    }
    Unlink();
    finished_.store(true);
  }

  // One look at the file: unlinks it once the rank mapped it (or at
  // attach_by_), takes what the rank posted, and checks each member_check_
  // that the rank is still a member. kEnded sets ended_ where the rank is
  // at fault (empty when the file was closed). `after_ring`: the watcher's
  // look after a wake-up, which counts towards kMaxEmptyRings when the
  // rank posted nothing (the poller's looks are not rings).
  Look Step(bool after_ring) ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_) {
    // Closed by Close() or by the rank itself (it detached): either way no
    // request will come.
    if (ended_step_ || stop_.load() || slots_->closed()) {
      ended_step_ = true;
      return Look::kEnded;
    }
    if (!unlinked_.load() &&
        (slots_->attached() || MonotonicNow() >= attach_by_)) {
      Unlink();
    }
    const uint64_t posted = slots_->posted();
    if (slots_->broken()) return End("truncated its round-slots file");
    if (posted > next_) {
      empty_rings_ = 0;
    } else if (after_ring) {
      ++empty_rings_;
    }
    if (empty_rings_ > kMaxEmptyRings) {
      return End(absl::StrCat("broke the protocol (rang ", kMaxEmptyRings,
                              " times without posting)"));
    }
    const bool requests = posted > next_;
    if (requests) {
      const absl::Time now = MonotonicNow();
      hot_ = now - last_request_ <= back_to_back_;
      last_request_ = now;
    }
    std::string violation;
    if (!DispatchUpTo(posted, next_, violation)) return End(violation);
    if (MonotonicNow() >= next_check_) {
      if (absl::Status s = agent_->CheckMember(member_); !s.ok()) {
        // What the rank posted meanwhile gets the agent's own answer
        // (the job's failure, "left", ...) rather than "closed".
        std::string ignored;
        DispatchUpTo(slots_->posted(), next_, ignored);
        return End(absl::StrCat("is no longer a member (", s.message(), ")"));
      }
      next_check_ = MonotonicNow() + member_check_;
      empty_rings_ = 0;  // the 1 s wake-ups ring nothing either
    }
    return requests ? Look::kRequests : Look::kNothing;
  }

  Look End(std::string why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_) {
    ended_ = std::move(why);
    ended_step_ = true;
    return Look::kEnded;
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
    // The reply does not keep the file mapped: a channel closed (the rank
    // gone, or a new file opened) is unmapped at once, however long its
    // rounds may still wait (up to an hour each).
    std::weak_ptr<RoundSlots> answer_to = slots;
    agent_->AllGatherWords(
        request, [answer_to, ledger, sequence, round, observe = observe_,
                  taken_at = MonotonicNow()](
                     absl::StatusOr<v1::AllGatherWordsResponse> result) {
          ledger->Answered(sequence);
          if (std::shared_ptr<RoundSlots> slots = answer_to.lock()) {
            if (!result.ok()) {
              slots->Answer(sequence, round, 0, {}, result.status());
            } else {
              slots->Answer(sequence, result->round(), result->words_per_rank(),
                            result->words(), absl::OkStatus());
            }
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
  const std::shared_ptr<Poller> poller_;  // may be null
  const absl::Duration back_to_back_;
  const absl::Duration member_check_;
  const std::shared_ptr<Ledger> ledger_ =
      std::make_shared<Ledger>(slots_->geometry().slots);

  // The watcher's state, used by whichever thread looks at the file: the
  // watcher, or the poller while the watcher waits in Poller::Cover.
  absl::Mutex step_mu_;
  const absl::Time attach_by_ = MonotonicNow() + kAttachTimeout;
  absl::Time next_check_ ABSL_GUARDED_BY(step_mu_);
  uint64_t next_ ABSL_GUARDED_BY(step_mu_) = 0;  // the next request to take
  int empty_rings_ ABSL_GUARDED_BY(step_mu_) = 0;
  // Whether the last two requests came back to back (back_to_back_).
  bool hot_ ABSL_GUARDED_BY(step_mu_) = false;
  absl::Time last_request_ ABSL_GUARDED_BY(step_mu_) = absl::InfinitePast();
  bool ended_step_ ABSL_GUARDED_BY(step_mu_) = false;
  std::string ended_ ABSL_GUARDED_BY(step_mu_);  // why, when the rank's fault

  std::atomic<bool> stop_{false};
  std::atomic<bool> unlinked_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

void RoundSlotServer::Poller::Cover(Channel* channel) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  covered_.insert(channel);
  // Its watcher has just taken a request.
  last_cover_ = MonotonicNow();
  auto handed_back = [this, channel]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return covered_.count(channel) == 0;
  };
  mu_.Await(absl::Condition(&handed_back));
}

void RoundSlotServer::Poller::Run() {
  std::vector<Channel*> sweep;
  absl::Time last_took = MonotonicNow();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopped_ || !covered_.empty();
      };
      mu_.Await(absl::Condition(&work));
      if (stopped_) {
        covered_.clear();
        return;
      }
      sweep.assign(covered_.begin(), covered_.end());
      last_took = std::max(last_took, last_cover_);
    }
    bool took = false;
    for (Channel* channel : sweep) {
      // The channel's watcher waits in Cover until erased here, so the
      // channel outlives this look.
      const Channel::Look look = channel->LookAsPoller(taken_);
      if (look == Channel::Look::kRequests) took = true;
      if (look == Channel::Look::kEnded) {
        absl::MutexLock lock(&mu_);
        covered_.erase(channel);
      }
    }
    const absl::Time now = MonotonicNow();
    if (took) {
      last_took = now;
    } else if (now - last_took > idle_) {
      // Quiet on every channel: a rank whose round waits for another
      // rank's request posts nothing meanwhile, so channels are handed
      // back only together. Their watchers sleep until the next request.
      // (Not a channel covered during this sweep: it has not been looked
      // at yet.)
      absl::MutexLock lock(&mu_);
      last_took = std::max(last_took, last_cover_);
      if (now - last_took > idle_) covered_.clear();
    } else {
      // Yielding, not pausing: on a busy node the rank that will post
      // next may need this CPU.
      sched_yield();
    }
  }
}

RoundSlotServer::RoundSlotServer(NodeAgent* agent, std::string folder,
                                 mode_t mode, RoundObserver observe,
                                 Options options)
    : agent_(agent),
      folder_(std::move(folder)),
      mode_(mode),
      observe_(std::make_shared<const RoundObserver>(std::move(observe))),
      options_(options),
      poller_(options.spin > absl::ZeroDuration()
                  ? std::make_shared<Poller>(options.spin)
                  : nullptr) {}

RoundSlotServer::~RoundSlotServer() { Stop(); }

size_t RoundSlotServer::RemoveStaleFiles(const std::string& folder,
                                         absl::Duration older_than) {
  const int dir_fd =
      ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dir_fd < 0) return 0;
  DIR* dir = ::fdopendir(dir_fd);
  if (dir == nullptr) {
    ::close(dir_fd);
    return 0;
  }
  const absl::Time before = absl::Now() - older_than;
  size_t removed = 0;
  while (const struct dirent* entry = ::readdir(dir)) {
    if (!absl::StartsWith(entry->d_name, kFilePrefix)) continue;
    struct stat st;
    if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        absl::TimeFromTimespec(st.st_mtim) >= before) {
      continue;
    }
    if (::unlinkat(dir_fd, entry->d_name, 0) == 0) ++removed;
  }
  ::closedir(dir);  // closes dir_fd
  return removed;
}

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
  auto channel =
      std::make_shared<Channel>(agent_, observe_, request.member(), path,
                                std::move(*slots), poller_, options_);
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
  if (poller_ != nullptr) poller_->Stop();
  for (auto& [rank, channel] : channels) channel->Join();
}

uint64_t RoundSlotServer::polled_requests() const {
  return poller_ == nullptr ? 0 : poller_->taken();
}

size_t RoundSlotServer::open() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [rank, channel] : channels_) n += !channel->finished();
  return n;
}

}  // namespace rankd
