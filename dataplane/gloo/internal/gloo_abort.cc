#include "dataplane/gloo/internal/gloo_abort.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <system_error>
#include <thread>

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
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < pairs.size();
         i = next.fetch_add(1)) {
      TcpPairAccess::SignalException(*pairs[i], reason);
    }
  };
  std::vector<std::thread> threads;
  const size_t wanted = std::min(pairs.size(), kAbortThreads);
  for (size_t t = 1; t < wanted; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // out of threads: the ones started and this one do it all
    }
  }
  work();
  for (std::thread& thread : threads) thread.join();
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
