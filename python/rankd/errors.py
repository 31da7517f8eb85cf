"""Exceptions raised by the rankd package: one class per status code.

Every failure of the library arrives as a status code and a message owned by
the library (the C ABI's rankd_status); the package raises the class of that
code with the library's message unchanged. Each class also derives from the
built-in exception a Python caller would expect (InvalidArgumentError is a
ValueError, DeadlineExceededError a TimeoutError, ...), so generic handlers
work too.
"""

__all__ = [
    "RankdError",
    "CancelledError",
    "UnknownError",
    "InvalidArgumentError",
    "DeadlineExceededError",
    "WaitTimeoutError",
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "EpochFencedError",
    "AbortedError",
    "EpochEndedError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "UnavailableError",
    "DataLossError",
    "UnauthenticatedError",
    "code_of",
    "error_for",
]


class RankdError(Exception):
    """A failure reported by rankd. `code` is the status code's name
    ("INVALID_ARGUMENT", ...), `message` the library's message."""

    code = "UNKNOWN"

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return f"{self.code}: {self.message}"


class CancelledError(RankdError):
    code = "CANCELLED"


class UnknownError(RankdError):
    code = "UNKNOWN"


class InvalidArgumentError(RankdError, ValueError):
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(RankdError, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class WaitTimeoutError(DeadlineExceededError):
    """A bounded wait's own timeout (Work.wait(timeout=...) past its
    deadline, PendingWords.wait(timeout) before the round finished), as
    opposed to work that itself failed with DEADLINE_EXCEEDED (a rank that
    never submitted): the C ABI's rankd_status_is_wait_timeout."""


class NotFoundError(RankdError, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(RankdError):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(RankdError, PermissionError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(RankdError):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(RankdError):
    code = "FAILED_PRECONDITION"


class EpochFencedError(FailedPreconditionError):
    """A recovering job's fence between its epochs: the daemon refused this
    process, which joined an epoch the job has left behind ("rank R joined
    into epoch E but the job is at epoch F ..."). The daemon marks it (the
    C ABI's rankd_status_is_epoch_fence); the message is not read. The loss
    that ended the epoch reaches Rank.job_health() possibly a moment after
    such an answer."""


class AbortedError(RankdError):
    """The job failed (a lost rank or node, named in the message) or the
    work was aborted."""

    code = "ABORTED"


class EpochEndedError(AbortedError):
    """A loss the job recovers from in place (rankd --recovery=on or
    domain): it ended this rank's epoch, not the job ("job J epoch E ended
    (MEMBER_LOST, ...)", by domain "job J (DOMAIN_RECOVERING, ...)"), and
    Rank.rejoin() continues. The library marks it (the C ABI's
    rankd_status_ends_an_epoch); the message is not read."""


class OutOfRangeError(RankdError, IndexError):
    code = "OUT_OF_RANGE"


class UnimplementedError(RankdError, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(RankdError):
    code = "INTERNAL"


class UnavailableError(RankdError, ConnectionError):
    code = "UNAVAILABLE"


class DataLossError(RankdError):
    code = "DATA_LOSS"


class UnauthenticatedError(RankdError, PermissionError):
    code = "UNAUTHENTICATED"


# By the C ABI's rankd_code value (absl::StatusCode's).
_BY_CODE = {
    1: CancelledError,
    2: UnknownError,
    3: InvalidArgumentError,
    4: DeadlineExceededError,
    5: NotFoundError,
    6: AlreadyExistsError,
    7: PermissionDeniedError,
    8: ResourceExhaustedError,
    9: FailedPreconditionError,
    10: AbortedError,
    11: OutOfRangeError,
    12: UnimplementedError,
    13: InternalError,
    14: UnavailableError,
    15: DataLossError,
    16: UnauthenticatedError,
}


def code_of(cause):
    """The C ABI's rankd_code value of `cause`: a RankdError class or
    instance, a code's name ("ABORTED") or its value. InvalidArgumentError
    for anything else."""
    if isinstance(cause, RankdError) or (
            isinstance(cause, type) and issubclass(cause, RankdError)):
        cause = cause.code
    if isinstance(cause, str):
        for value, kind in _BY_CODE.items():
            if kind.code == cause:
                return value
        raise InvalidArgumentError(
            f"rankd: {cause!r} is not a status code's name; use one of "
            f"{', '.join(k.code for k in _BY_CODE.values())}")
    if isinstance(cause, int) and not isinstance(cause, bool):
        if not -2**31 <= cause < 2**31:
            raise InvalidArgumentError(
                f"rankd: code {cause} does not fit the C ABI's int32_t")
        return cause  # the library checks it is a rankd_code
    raise InvalidArgumentError(
        f"rankd: a cause's code must be a RankdError class or instance, a "
        f"code's name or its value, not {cause!r}")


def error_for(code, message, wait_timeout=False, epoch_fence=False,
              epoch_ended=False):
    """The exception for status `code` (an int) with `message`;
    WaitTimeoutError when `wait_timeout` marks a bounded wait's own
    timeout, EpochFencedError when `epoch_fence` marks an epoch's fence,
    EpochEndedError when `epoch_ended` marks a loss that ended an epoch."""
    if wait_timeout and code == 4:
        return WaitTimeoutError(message)
    if epoch_fence and code == 9:
        return EpochFencedError(message)
    if epoch_ended and code == 10:
        return EpochEndedError(message)
    return _BY_CODE.get(code, UnknownError)(message)
