//! The PyO3 layer: argument conversion and GIL release only. Errors become the Python classes
//! of `shardcook.errors`, so Python code catches one hierarchy rooted at `ShardcookError`, and
//! each carries the core's machine-readable `kind`.
#![expect(
    clippy::needless_pass_by_value,
    reason = "PyO3 extracts a function's arguments as owned values (PathBuf, Vec, IntArg)"
)]

use pyo3::prelude::*;

use crate::error::Error;

mod build_info;
mod convert;
mod imaging;
mod shards;
mod walk;

/// Raises `e` as the matching `shardcook.errors` class, with `kind` set to `e.kind()`.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::Io { .. } => "ShardcookIOError",
        Error::Shard { .. } => "ShardError",
        Error::InvalidName(_) => "InvalidNameError",
        Error::DuplicateKey { .. } => "DuplicateKeyError",
        Error::Dataset(_) => "DatasetError",
        Error::Image { .. } => "ImageError",
        Error::Config(_) => "ConfigError",
        Error::Sqlite(_) | Error::NotFetched { .. } => "ShardcookError",
    };
    let message = e.to_string();
    let instance = py
        .import("shardcook.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((message.clone(),)))
        .and_then(|i| i.setattr("kind", e.kind()).map(|()| i));
    match instance {
        Ok(instance) => PyErr::from_value(instance),
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    shards::register(m)?;
    imaging::register(m)?;
    build_info::register(m)?;
    walk::register(m)?;
    Ok(())
}
