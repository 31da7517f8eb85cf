// AbortGlooContext: Gloo has no public abort, so this reaches the one it
// uses internally when an operation times out: tcp::Context's
// signalException, which sets an IoException on every pair of the context,
// wakes every thread waiting on a pending send or receive of those pairs
// with that exception, and closes the pairs' sockets (so the peers' pending
// operations fail as well, with "Connection closed by peer"). Later
// operations on the context throw at once. Safe to call from any thread,
// concurrently with operations running on the context, any number of times.
//
// SetTransportTimeout reaches into the same place for the timeout of waits
// that carry none of their own (those of Gloo's bcube allreduce): Gloo
// copies the context's timeout into its transport context once, when it
// connects, so a later ::gloo::Context::setTimeout does not reach them.
//
// Internal to the Gloo backend. Depends on Gloo (including its tcp transport
// headers, via //third_party:gloo_tcp).
#ifndef RANKD_DATAPLANE_GLOO_GLOO_ABORT_H_
#define RANKD_DATAPLANE_GLOO_GLOO_ABORT_H_

#include <chrono>
#include <string>

namespace gloo {
class Context;
}

namespace rankd::dataplane::gloo::internal {

// Returns false (and does nothing) when `context` has no connected tcp
// transport (not yet connected, or another transport).
bool AbortGlooContext(::gloo::Context& context, const std::string& reason);

// Sets the timeout of `context`'s transport (connected or not) and of the
// context itself. Call before operations run on the context.
void SetTransportTimeout(::gloo::Context& context,
                         std::chrono::milliseconds timeout);

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_GLOO_ABORT_H_
