//! One error type for the whole core. Every message names the file (and byte offset where one
//! applies) and says what to do, because it reaches users unchanged.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The bytes of a shard are not a tar we can read (truncated, corrupt, not a tar at all).
    #[error("{}: {reason} at byte {offset}", path.display())]
    Shard {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A key or part name that docs/FORMAT.md forbids.
    #[error("{0}")]
    InvalidName(String),
    /// The same sample key twice in one dataset.
    #[error("duplicate sample key {key:?}: in {first} and in {second}; keys must be unique across the dataset (rename or drop one)")]
    DuplicateKey {
        key: String,
        first: String,
        second: String,
    },
    /// A dataset-level problem that is not about one file's bytes (no shards, already indexed).
    #[error("{0}")]
    Dataset(String),
    /// An image that cannot be decoded, resized or encoded, or an image option that is wrong;
    /// `kind` says which, so callers never search the message.
    #[error("{message}")]
    Image { kind: ImageKind, message: String },
    /// An argument or option outside what the core accepts (a negative size, zero workers).
    #[error("{0}")]
    Config(String),
    /// Bytes of a tar that a `tar::Source` has not fetched yet: the caller fetches them and
    /// asks again.
    #[error("bytes {offset}..{} of the tar are not fetched", offset + len)]
    NotFetched { offset: u64, len: u64 },
    #[error("index.sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Why an image could not be used or made, as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// A mode, filter, size or other image option is wrong.
    BadOption,
    /// The input is neither bytes nor a path.
    BadInput,
    /// The input path cannot be read.
    Unreadable,
    /// The bytes are empty or not in a format the core decodes.
    UnsupportedFormat,
    /// The bytes are in a known format but cannot be decoded.
    DecodeError,
    /// The input or the requested output has more pixels than allowed.
    TooLarge,
    /// The image is too small for the mode.
    TooSmall,
    /// The pixels cannot be resized or encoded.
    EncodeError,
    /// A bug in the core (a caught panic, a thread pool that would not start).
    Internal,
}

impl ImageKind {
    /// The machine-readable name Python sees (`ImageError.kind`, `error_kind`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ImageKind::BadOption => "bad_option",
            ImageKind::BadInput => "bad_input",
            ImageKind::Unreadable => "unreadable",
            ImageKind::UnsupportedFormat => "unsupported_format",
            ImageKind::DecodeError => "decode_error",
            ImageKind::TooLarge => "too_large",
            ImageKind::TooSmall => "too_small",
            ImageKind::EncodeError => "encode_error",
            ImageKind::Internal => "internal",
        }
    }
}

impl Error {
    /// An image error of `kind`.
    pub fn image(kind: ImageKind, message: impl Into<String>) -> Error {
        Error::Image {
            kind,
            message: message.into(),
        }
    }

    /// The machine-readable kind of this error (`ShardcookError.kind` in Python).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Shard { .. } => "shard",
            Error::InvalidName(_) => "invalid_name",
            Error::DuplicateKey { .. } => "duplicate_key",
            Error::Dataset(_) => "dataset",
            Error::Image { kind, .. } => kind.name(),
            Error::Config(_) => "config",
            Error::NotFetched { .. } => "not_fetched",
            Error::Sqlite(_) => "sqlite",
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Attaches the path to an I/O error.
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}
