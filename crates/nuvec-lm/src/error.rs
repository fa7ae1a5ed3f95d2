//! nuvec-lm's error: what failed (loading a folder, tokenizing, a chat template, the model's
//! computation) and why, printed as readable text by both `Display` and `Debug` (so that a
//! `main` returning it shows the message, not a struct).

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong in nuvec-lm.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model folder or one of its files cannot be used.
    #[error("[load] {}: {reason}", path.display())]
    Load {
        /// The folder or file at fault.
        path: PathBuf,
        /// What was expected and what was found.
        reason: String,
    },
    /// The tokenizer failed to encode or decode.
    #[error("[tokenizer] {0}")]
    Tokenizer(String),
    /// The chat template failed to render.
    #[error("[chat template] {0}")]
    Template(String),
    /// Generation was asked for something it cannot do.
    #[error("[generate] {0}")]
    Generate(String),
    /// An array operation failed.
    #[error(transparent)]
    Core(#[from] nuvec_core::Error),
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// A loading error for `path`.
    pub(crate) fn load(path: impl Into<PathBuf>, reason: impl Into<String>) -> Error {
        Error::Load {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// nuvec-lm's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
