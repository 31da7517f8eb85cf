// AbortGlooContext: Gloo has no public abort, so this reaches the one it
// uses internally when an operation times out: tcp::Context's
// signalException, which sets an IoException on every pair of the context,
// wakes every thread waiting on a pending send or receive of those pairs
// with that exception, and closes the pairs' sockets (so the peers' pending
// operations fail as well, with "Connection closed by peer"). Later
// operations on the context throw at once. Safe to call from any thread,
// concurrently with operations running on the context, any number of times.
//
// Closing one pair waits for a tick of its device's event loop (Gloo's tcp
// Loop::unregisterDescriptor; an idle loop ticks every 10 ms), and
// signalException closes a context's pairs one after another: aborting P
// pairs in turn took up to P ticks, and an operation blocked on the last of
// them waited for all (measured: 30-60 ms from the job's failure notice to
// a survivor's failed operation at 8 ranks, tp2 pp2 ep2). AbortGlooContexts
// therefore shuts every pair's socket down first: each then has an event
// pending, so the loop ticks at once and keeps ticking until every pair is
// closed, and mostly closes them itself as it handles those events.
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
#include <cstddef>
#include <string>
#include <vector>

namespace gloo {
class Context;
}

namespace rankd::dataplane::gloo::internal {

// Returns false (and does nothing) when `context` has no connected tcp
// transport (not yet connected, or another transport).
bool AbortGlooContext(::gloo::Context& context, const std::string& reason);

// What AbortGlooContext does to each of `contexts` (null entries and
// contexts without a connected tcp transport are skipped), to all of their
// pairs together: every connected socket shut down (both ways) first, then
// each pair failed with `reason` where the event loop has not failed it
// already (its exception then says what the socket saw). Returns how many
// contexts had a tcp transport.
size_t AbortGlooContexts(const std::vector<::gloo::Context*>& contexts,
                         const std::string& reason);

// Sets the timeout of `context`'s transport (connected or not) and of the
// context itself. Call before operations run on the context.
void SetTransportTimeout(::gloo::Context& context,
                         std::chrono::milliseconds timeout);

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_GLOO_ABORT_H_
