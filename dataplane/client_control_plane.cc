// ClientControlPlane: the data plane's ControlPlane (control_plane.h) over a
// joined rankd::Client. all_gather_words rounds, the key-value broker and job
// health go straight to the client; one failure callback added to the
// client is fanned out to every OnJobFailure registration
// (internal/failure_fanout.h). Depends on the client library,
// dataplane/control_plane.h and absl.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "dataplane/control_plane.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/internal/failure_fanout.h"

namespace rankd::dataplane {
namespace {

// A Client::PendingWords seen as a dataplane::PendingWords.
class ClientPendingWords final : public PendingWords {
 public:
  explicit ClientPendingWords(std::unique_ptr<Client::PendingWords> pending)
      : pending_(std::move(pending)) {}

  bool IsComplete() const override { return pending_->IsReady(); }

  absl::Status Wait() override { return Result().status(); }

  absl::StatusOr<std::vector<uint32_t>> Result() override {
    // The round's own round_timeout bounds an infinite wait.
    return pending_->Wait(absl::InfiniteDuration());
  }

  // Both modes are real: Cancel() cancels the RPC and returns once gRPC has
  // finished with it; the round's shared state owns every resource it uses
  // until gRPC finishes, so leaving it in flight is a quarantine.
  bool SupportsCancellation(CancellationMode) const override { return true; }

  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override {
    if (absl::Status s = CheckBoundedWait(*this, timeout, mode, "rankd client");
        !s.ok()) {
      return s;
    }
    auto result = pending_->Wait(timeout);
    if (result.ok()) return WaitOutcome::Completed();
    if (pending_->IsReady()) return result.status();  // the round's error
    if (mode == CancellationMode::kNativeCancel) pending_->Cancel();
    return WaitOutcome::DeadlineExceeded(mode);
  }

 private:
  const std::unique_ptr<Client::PendingWords> pending_;
};

class ClientControlPlane final : public ControlPlane {
 public:
  // The fan-out is shared with the client's failure callback, which may
  // outlive this object; Close() waits for callbacks already running on
  // other threads, so that nothing a registration captured (a C caller's
  // user_data) is used after the control plane is gone.
  explicit ClientControlPlane(Client* client)
      : client_(client),
        fanout_(std::make_shared<internal::FailureFanout>(
            std::max<uint64_t>(1, client->epoch()))) {
    std::weak_ptr<internal::FailureFanout> weak = fanout_;
    failure_callback_ =
        client_->AddFailureCallback([weak](const absl::Status& status) {
          if (auto fanout = weak.lock()) fanout->Fire(status);
        });
  }

  ~ClientControlPlane() override {
    client_->RemoveFailureCallback(failure_callback_);
    fanout_->Close();
  }

  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    return client_->AllGatherWords(local, timeout);
  }

  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override {
    auto pending = client_->SubmitAllGatherWords(local, timeout);
    if (!pending.ok()) return pending.status();
    return std::unique_ptr<PendingWords>(
        std::make_unique<ClientPendingWords>(*std::move(pending)));
  }

  absl::Status KvSet(absl::string_view key, absl::string_view value) override {
    return client_->KvSet(key, value);
  }

  absl::StatusOr<std::string> KvGet(absl::string_view key,
                                    absl::Duration timeout) override {
    return client_->KvGet(key, timeout);
  }

  absl::StatusOr<int64_t> KvAdd(absl::string_view key, int64_t delta) override {
    return client_->KvAdd(key, delta);
  }

  absl::Status JobHealth() const override { return client_->JobHealth(); }

  void OnJobFailure(
      std::function<void(const absl::Status&)> callback) override {
    fanout_->Register(std::move(callback));
  }

  void OnJobFailureWhileAlive(std::function<void(const absl::Status&)> callback,
                              std::weak_ptr<const void> owner) override {
    fanout_->RegisterOwned(std::move(callback), std::move(owner));
  }

  // Client::Rejoin, then the new epoch's failure starts afresh: the ended
  // epoch's registrations ran with its failure and are dropped; the
  // client's callback fires again for a failure of the new epoch. A second
  // call for the same ended epoch (another session re-forming) finds the
  // fan-out already moved on and keeps what was registered since.
  absl::StatusOr<DistributedSessionDescriptor> Rejoin(
      uint64_t ended_epoch, absl::Duration timeout) override {
    absl::StatusOr<v1::SessionDescriptor> joined =
        client_->Rejoin(ended_epoch, timeout);
    if (!joined.ok()) return joined.status();
    fanout_->StartEpoch(joined->epoch());
    // A loss of the new epoch that reached the client before the reset
    // above (Client::Rejoin tells its callback at once) was dropped by the
    // fan-out, still failed for the ended epoch: tell it now.
    if (absl::Status health = client_->JobHealth(); !health.ok()) {
      fanout_->Fire(health);
    }
    return DescriptorFromProto(*joined);
  }

  uint64_t JoinedEpoch() const override { return fanout_->epoch(); }

  std::string Namespace() const override {
    const v1::SessionDescriptor& d = client_->descriptor();
    return absl::StrCat(d.job_id(), "@", d.job_incarnation());
  }

 private:
  Client* const client_;
  const std::shared_ptr<internal::FailureFanout> fanout_;
  uint64_t failure_callback_ = 0;  // Client::AddFailureCallback's id
};

}  // namespace

std::unique_ptr<ControlPlane> MakeClientControlPlane(Client* client) {
  return std::make_unique<ClientControlPlane>(client);
}

}  // namespace rankd::dataplane
