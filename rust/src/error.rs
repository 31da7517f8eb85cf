//! Errors: the C ABI's status (a `rankd_code` and the library's message)
//! as a Rust value. Codes are absl::StatusCode's (and gRPC's).

use std::error::Error as StdError;
use std::ffi::CStr;
use std::fmt;

use crate::ffi;

/// A rankd status code other than OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Cancelled,
    /// Also any value outside the C ABI's `rankd_code`.
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// The code of a C ABI value; `Unknown` for OK or anything unknown
    /// (an error is never OK).
    pub fn from_raw(code: i32) -> Code {
        match code {
            ffi::RANKD_CANCELLED => Code::Cancelled,
            ffi::RANKD_INVALID_ARGUMENT => Code::InvalidArgument,
            ffi::RANKD_DEADLINE_EXCEEDED => Code::DeadlineExceeded,
            ffi::RANKD_NOT_FOUND => Code::NotFound,
            ffi::RANKD_ALREADY_EXISTS => Code::AlreadyExists,
            ffi::RANKD_PERMISSION_DENIED => Code::PermissionDenied,
            ffi::RANKD_RESOURCE_EXHAUSTED => Code::ResourceExhausted,
            ffi::RANKD_FAILED_PRECONDITION => Code::FailedPrecondition,
            ffi::RANKD_ABORTED => Code::Aborted,
            ffi::RANKD_OUT_OF_RANGE => Code::OutOfRange,
            ffi::RANKD_UNIMPLEMENTED => Code::Unimplemented,
            ffi::RANKD_INTERNAL => Code::Internal,
            ffi::RANKD_UNAVAILABLE => Code::Unavailable,
            ffi::RANKD_DATA_LOSS => Code::DataLoss,
            ffi::RANKD_UNAUTHENTICATED => Code::Unauthenticated,
            _ => Code::Unknown,
        }
    }

    /// The C ABI's value.
    pub fn raw(self) -> i32 {
        match self {
            Code::Cancelled => ffi::RANKD_CANCELLED,
            Code::Unknown => ffi::RANKD_UNKNOWN,
            Code::InvalidArgument => ffi::RANKD_INVALID_ARGUMENT,
            Code::DeadlineExceeded => ffi::RANKD_DEADLINE_EXCEEDED,
            Code::NotFound => ffi::RANKD_NOT_FOUND,
            Code::AlreadyExists => ffi::RANKD_ALREADY_EXISTS,
            Code::PermissionDenied => ffi::RANKD_PERMISSION_DENIED,
            Code::ResourceExhausted => ffi::RANKD_RESOURCE_EXHAUSTED,
            Code::FailedPrecondition => ffi::RANKD_FAILED_PRECONDITION,
            Code::Aborted => ffi::RANKD_ABORTED,
            Code::OutOfRange => ffi::RANKD_OUT_OF_RANGE,
            Code::Unimplemented => ffi::RANKD_UNIMPLEMENTED,
            Code::Internal => ffi::RANKD_INTERNAL,
            Code::Unavailable => ffi::RANKD_UNAVAILABLE,
            Code::DataLoss => ffi::RANKD_DATA_LOSS,
            Code::Unauthenticated => ffi::RANKD_UNAUTHENTICATED,
        }
    }

    /// "INVALID_ARGUMENT", "ABORTED", ... (as `rankd_code_name`).
    pub fn name(self) -> &'static str {
        match self {
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error from rankd: its code and the message naming the operation and
/// the cause (for a lost peer, ABORTED naming the rank). Displays as
/// `CODE: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
    wait_timeout: bool,
    epoch_fence: bool,
    epoch_ended: bool,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            wait_timeout: false,
            epoch_fence: false,
            epoch_ended: false,
        }
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether this is a bounded wait's own timeout (`PendingWords::wait`
    /// before the round finished, `Work::wait_timeout` past its deadline)
    /// rather than a failure, which may carry the same DeadlineExceeded
    /// code (a rank that never submitted): rankd_status_is_wait_timeout.
    pub fn is_wait_timeout(&self) -> bool {
        self.wait_timeout
    }

    /// Whether this is a recovering job's fence between its epochs: the
    /// daemon refused this process, which joined an epoch the job has left
    /// behind (FailedPrecondition, "rank R joined into epoch E but the job
    /// is at epoch F ..."); the daemon marks it, the message is not read:
    /// rankd_status_is_epoch_fence. The loss that ended the epoch reaches
    /// `Rank::job_health` possibly a moment after such an answer.
    pub fn is_epoch_fence(&self) -> bool {
        self.epoch_fence
    }

    /// Whether this (`Rank::job_health`'s) is a loss the job recovers from
    /// in place: it ended this rank's epoch ("job J epoch E ended (...)",
    /// by domain "job J (DOMAIN_RECOVERING, ...)"), and `Rank::rejoin`
    /// continues; false for a failed job or a lost daemon connection. The
    /// library marks it, the message is not read:
    /// rankd_status_ends_an_epoch. (The failure callback's `Error` carries
    /// code and message only: ask `Rank::job_health` there.)
    pub fn ends_an_epoch(&self) -> bool {
        self.epoch_ended
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Code::InvalidArgument, message)
    }

    /// Takes ownership of a C status: `Ok` for NULL, else the error (the
    /// status is freed either way).
    ///
    /// # Safety
    /// `status` is NULL or a status the library returned and nobody freed.
    pub(crate) unsafe fn check(status: *mut ffi::rankd_status) -> Result<()> {
        if status.is_null() {
            return Ok(());
        }
        let code = Code::from_raw(ffi::rankd_status_code(status));
        let message = CStr::from_ptr(ffi::rankd_status_message(status))
            .to_string_lossy()
            .into_owned();
        let wait_timeout = ffi::rankd_status_is_wait_timeout(status) != 0;
        let epoch_fence = ffi::rankd_status_is_epoch_fence(status) != 0;
        let epoch_ended = ffi::rankd_status_ends_an_epoch(status) != 0;
        ffi::rankd_status_free(status);
        Err(Error {
            code,
            message,
            wait_timeout,
            epoch_fence,
            epoch_ended,
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl StdError for Error {}

impl From<crate::contract::DescriptorError> for Error {
    fn from(e: crate::contract::DescriptorError) -> Error {
        Error::invalid_argument(e.message())
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
