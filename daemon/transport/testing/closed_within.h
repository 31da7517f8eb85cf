// ClosedWithin: for tests of the daemon's listeners, whether the daemon's end
// of a connected socket closed it. Test-only; depends on POSIX and absl.
#ifndef RANKD_DAEMON_TRANSPORT_TESTING_CLOSED_WITHIN_H_
#define RANKD_DAEMON_TRANSPORT_TESTING_CLOSED_WITHIN_H_

#include "absl/time/time.h"

namespace rankd::testing {

// True when the far end closed or reset `fd` within `timeout`; false when it
// is still open then. Reads and discards whatever arrives meanwhile, and
// sets a 50 ms receive timeout on `fd`, which the caller still owns.
bool ClosedWithin(int fd, absl::Duration timeout);

}  // namespace rankd::testing

#endif  // RANKD_DAEMON_TRANSPORT_TESTING_CLOSED_WITHIN_H_
