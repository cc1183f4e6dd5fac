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
    /// An image that cannot be decoded, resized or encoded, or an image option that is wrong.
    #[error("{0}")]
    Image(String),
    #[error("index.sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Attaches the path to an I/O error.
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}
