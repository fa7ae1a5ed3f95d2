//! nuvec's error type. Ops never return it directly: an invalid op gives a failed array, and
//! the error comes out of whatever evaluates or reads that array. `Debug` prints the same
//! readable text as `Display`, so a `main` returning `nuvec::Result` shows the message, not a
//! struct.

use std::fmt;
use std::panic::Location;

/// Everything that can go wrong in nuvec's core.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An op was given inputs it cannot accept (shapes, axes, dtypes, values).
    #[error("[{op}] {reason} (at {location})")]
    InvalidArgument {
        /// MLX's name of the op.
        op: String,
        /// What was expected and what was given.
        reason: String,
        /// The caller's source location.
        location: SourceLocation,
    },
    /// A primitive failed while computing its result.
    #[error("[{op}] evaluation failed: {reason}")]
    Eval {
        /// The primitive's name.
        op: String,
        /// Why it failed.
        reason: String,
    },
    /// A result was read as a type other than its dtype.
    #[error("[{op}] array has dtype {actual}, read as {requested}")]
    DTypeMismatch {
        /// The reading function.
        op: &'static str,
        /// The array's dtype.
        actual: crate::DType,
        /// The type asked for.
        requested: crate::DType,
    },
    /// A transform (vjp, jvp, vmap, compile) cannot apply to the function or a primitive.
    #[error("[{transform}] {reason}")]
    Transform {
        /// The transform's name.
        transform: &'static str,
        /// Why.
        reason: String,
    },
    /// A collective or its group failed; names the peer rank when one is at fault.
    #[error("[{op}] {}{reason}", rank.map(|r| format!("rank {r}: ")).unwrap_or_default())]
    Distributed {
        /// The collective or group operation.
        op: String,
        /// The peer at fault, if known.
        rank: Option<usize>,
        /// What happened.
        reason: String,
    },
    /// Reading or writing files or sockets failed.
    #[error("[{op}] I/O error: {reason}")]
    Io {
        /// The operation.
        op: String,
        /// The system's message.
        reason: String,
    },
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// An invalid-argument error for `op`, located at `location`.
    pub fn invalid(
        op: impl Into<String>,
        reason: impl Into<String>,
        location: &'static Location<'static>,
    ) -> Error {
        Error::InvalidArgument {
            op: op.into(),
            reason: reason.into(),
            location: SourceLocation(location),
        }
    }

    /// An evaluation error for primitive `op`.
    pub fn eval(op: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Eval {
            op: op.into(),
            reason: reason.into(),
        }
    }
}

/// Where in the caller's code an op was built (`file:line:column`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SourceLocation(pub &'static Location<'static>);

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.0.file(), self.0.line(), self.0.column())
    }
}

impl fmt::Debug for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// nuvec's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
