#include "dataplane/gloo/internal/gloo_abort.h"

#include <memory>

#include "gloo/context.h"
#include "gloo/transport/context.h"
#include "gloo/transport/tcp/context.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// Both members are protected. A class derived from the declaring class may
// form a pointer to such a member through its own name; the pointer then
// applies to any object of the declaring class. Nothing is instantiated.
struct ContextAccess : ::gloo::Context {
  static std::shared_ptr<::gloo::transport::Context>& Transport(
      ::gloo::Context& context) {
    return context.*(&ContextAccess::transportContext_);
  }
};

struct TcpContextAccess : ::gloo::transport::tcp::Context {
  static void SignalException(::gloo::transport::tcp::Context& context,
                              const std::string& message) {
    (context.*(&TcpContextAccess::signalException))(message);
  }
};

}  // namespace

bool AbortGlooContext(::gloo::Context& context, const std::string& reason) {
  std::shared_ptr<::gloo::transport::Context>& transport =
      ContextAccess::Transport(context);
  auto* tcp = dynamic_cast<::gloo::transport::tcp::Context*>(transport.get());
  if (tcp == nullptr) return false;
  TcpContextAccess::SignalException(*tcp, reason);
  return true;
}

void SetTransportTimeout(::gloo::Context& context,
                         std::chrono::milliseconds timeout) {
  context.setTimeout(timeout);
  std::shared_ptr<::gloo::transport::Context>& transport =
      ContextAccess::Transport(context);
  if (transport != nullptr) transport->setTimeout(timeout);
}

}  // namespace rankd::dataplane::gloo::internal
