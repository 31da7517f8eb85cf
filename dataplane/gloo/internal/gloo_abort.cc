#include "dataplane/gloo/internal/gloo_abort.h"

#include <sys/socket.h>

#include <memory>
#include <mutex>

#include "gloo/context.h"
#include "gloo/transport/context.h"
#include "gloo/transport/tcp/context.h"
#include "gloo/transport/tcp/pair.h"

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

struct TcpPairAccess : ::gloo::transport::tcp::Pair {
  static void SignalException(::gloo::transport::tcp::Pair& pair,
                              const std::string& message) {
    (pair.*(&TcpPairAccess::signalExceptionExternal))(message);
  }
  // Shuts the pair's connected socket down (both ways), under the pair's
  // lock, so its descriptor cannot be closed and reused meanwhile.
  static void ShutDownSocket(::gloo::transport::tcp::Pair& pair) {
    std::lock_guard<std::mutex> lock(pair.*(&TcpPairAccess::m_));
    if (pair.*(&TcpPairAccess::state_) == CONNECTED) {
      ::shutdown(pair.*(&TcpPairAccess::fd_), SHUT_RDWR);
    }
  }
};

// The context's tcp transport, or null.
::gloo::transport::tcp::Context* TcpTransport(::gloo::Context& context) {
  std::shared_ptr<::gloo::transport::Context>& transport =
      ContextAccess::Transport(context);
  return dynamic_cast<::gloo::transport::tcp::Context*>(transport.get());
}

}  // namespace

bool AbortGlooContext(::gloo::Context& context, const std::string& reason) {
  std::shared_ptr<::gloo::transport::Context>& transport =
      ContextAccess::Transport(context);
  auto* tcp = dynamic_cast<::gloo::transport::tcp::Context*>(transport.get());
  if (tcp == nullptr) return false;
  TcpContextAccess::SignalException(*tcp, reason);
  return true;
}

size_t AbortGlooContexts(const std::vector<::gloo::Context*>& contexts,
                         const std::string& reason) {
  size_t aborted = 0;
  std::vector<::gloo::transport::tcp::Pair*> pairs;
  for (::gloo::Context* context : contexts) {
    if (context == nullptr) continue;
    ::gloo::transport::tcp::Context* tcp = TcpTransport(*context);
    if (tcp == nullptr) continue;
    ++aborted;
    for (int rank = 0; rank < context->size; ++rank) {
      if (rank == context->rank) continue;
      // The pairs vector is fixed once the context is connected (Gloo's
      // own signalException relies on the same).
      std::unique_ptr<::gloo::transport::Pair>& pair = tcp->getPair(rank);
      if (pair != nullptr) {
        pairs.push_back(static_cast<::gloo::transport::tcp::Pair*>(pair.get()));
      }
    }
  }
  // Every socket shut down first: each then has an event pending, so the
  // event loop ticks at once and again until every pair is closed (a close
  // waits for a tick), and handles most of the failures itself.
  for (::gloo::transport::tcp::Pair* pair : pairs) {
    TcpPairAccess::ShutDownSocket(*pair);
  }
  for (::gloo::transport::tcp::Pair* pair : pairs) {
    TcpPairAccess::SignalException(*pair, reason);
  }
  return aborted;
}

void SetTransportTimeout(::gloo::Context& context,
                         std::chrono::milliseconds timeout) {
  context.setTimeout(timeout);
  std::shared_ptr<::gloo::transport::Context>& transport =
      ContextAccess::Transport(context);
  if (transport != nullptr) transport->setTimeout(timeout);
}

}  // namespace rankd::dataplane::gloo::internal
