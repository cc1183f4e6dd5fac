//! Bindings for shard IO, indexing and verification.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyMapping};

use super::convert::{bytes_like, type_name, Bytes, IntArg, NamedTuple, UNBOUNDED};
use super::to_py;
use crate::error::Error;
use crate::tar::writer::{remove_partial_shards as remove_partials, shard_file_name as file_name};
use crate::tar::{SampleReader, ShardWriter};
use crate::{check, index};

/// `(name, samples)`: a shard and its sample count.
static SHARD_COUNT: NamedTuple = NamedTuple::new("ShardCount", &["name", "samples"]);
/// `(key, parts)`: one sample of a shard, parts mapping names to bytes.
static SAMPLE: NamedTuple = NamedTuple::new("Sample", &["key", "parts"]);

fn shard_counts<'py>(
    py: Python<'py>,
    counts: &[(String, u64)],
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    counts
        .iter()
        .map(|(name, count)| SHARD_COUNT.make(py, (name, *count)))
        .collect()
}

fn config_error(py: Python<'_>, message: String) -> PyErr {
    to_py(py, Error::Config(message))
}

fn part_bytes(key: &str, part: &str, value: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    bytes_like(value).ok_or_else(|| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "part {part:?} of sample {key:?} is a {}, not bytes; encode it first (e.g. text.encode())",
            type_name(value)
        ))
    })
}

/// Writes samples into numbered, deterministic tar shards.
#[pyclass(name = "ShardWriter", module = "shardcook._native")]
struct PyShardWriter {
    inner: Option<ShardWriter>,
    directory: PathBuf,
    /// What `close` returned, so a second `close` (or one after `with`) says the same.
    closed: Vec<(String, u64)>,
}

impl PyShardWriter {
    fn writer(&mut self) -> PyResult<&mut ShardWriter> {
        self.inner.as_mut().ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err("this ShardWriter is closed; open a new one")
        })
    }
}

#[pymethods]
impl PyShardWriter {
    #[new]
    #[pyo3(signature = (directory, *, shard_size = IntArg::Value(1000), prefix = "",
        first_shard = IntArg::Value(0)),
        text_signature = "(directory, *, shard_size=1000, prefix='', first_shard=0)")]
    fn new(
        py: Python<'_>,
        directory: PathBuf,
        shard_size: IntArg,
        prefix: &str,
        first_shard: IntArg,
    ) -> PyResult<Self> {
        let check = |arg: &IntArg, name: &str, min: u64| {
            arg.check(name, min, UNBOUNDED)
                .map_err(|m| config_error(py, m))
        };
        let (shard_size, first_shard) = (
            check(&shard_size, "shard_size", 1)?,
            check(&first_shard, "first_shard", 0)?,
        );
        let inner = ShardWriter::new(&directory, shard_size, prefix, first_shard)
            .map_err(|e| to_py(py, e))?;
        Ok(Self {
            inner: Some(inner),
            directory,
            closed: Vec::new(),
        })
    }

    /// Appends one sample: `parts` maps part names to bytes-like values, written in order.
    fn write(&mut self, py: Python<'_>, key: &str, parts: &Bound<'_, PyAny>) -> PyResult<()> {
        let items = match parts.cast::<PyMapping>() {
            Ok(mapping) => mapping.items()?.into_any(),
            Err(_) => parts.clone(),
        };
        let mut owned: Vec<(String, Bytes)> = Vec::new();
        for item in items.try_iter()? {
            let (name, value): (String, Bound<'_, PyAny>) = item?.extract()?;
            let data = part_bytes(key, &name, &value)?;
            owned.push((name, data));
        }
        let refs: Vec<(&str, &Bytes)> = owned.iter().map(|(n, d)| (n.as_str(), d)).collect();
        let writer = self.writer()?;
        py.detach(|| writer.write(key, &refs))
            .map_err(|e| to_py(py, e))
    }

    /// Completes the open shard; returns every shard written as `ShardCount(name, samples)`.
    fn close<'py>(&mut self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if let Some(mut w) = self.inner.take() {
            self.closed = py.detach(|| w.close()).map_err(|e| to_py(py, e))?;
        }
        shard_counts(py, &self.closed)
    }

    /// Drops the shard being written; finished shards stay.
    fn abort(&mut self) {
        if let Some(mut w) = self.inner.take() {
            w.abort();
        }
    }

    #[getter]
    fn directory(&self) -> PathBuf {
        self.directory.clone()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc_value=None, _traceback=None))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abort();
        } else {
            self.close(py)?;
        }
        Ok(false)
    }
}

/// Streams `Sample(key, {part: bytes})` from one shard.
#[pyclass(name = "ShardReader", module = "shardcook._native")]
struct PyShardReader {
    inner: SampleReader,
}

#[pymethods]
impl PyShardReader {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let reader = &mut self.inner;
        let Some(sample) = py
            .detach(|| reader.next_sample())
            .map_err(|e| to_py(py, e))?
        else {
            return Ok(None);
        };
        let parts = PyDict::new(py);
        for part in sample.parts {
            let data = part.data.unwrap_or_default();
            parts.set_item(part.name, PyBytes::new(py, &data))?;
        }
        Ok(Some(SAMPLE.make(py, (sample.key, parts))?))
    }
}

#[pyfunction]
fn read_shard(py: Python<'_>, path: PathBuf) -> PyResult<PyShardReader> {
    let inner = SampleReader::open(&path, true).map_err(|e| to_py(py, e))?;
    Ok(PyShardReader { inner })
}

#[pyfunction]
fn count_samples(py: Python<'_>, path: PathBuf) -> PyResult<u64> {
    py.detach(|| check::count_samples(&path))
        .map_err(|e| to_py(py, e))
}

/// What `index_shards` wrote.
#[pyclass(frozen, module = "shardcook._native")]
struct IndexSummary {
    counts: Vec<(String, u64)>,
    /// Every part name seen, sorted.
    #[pyo3(get)]
    part_names: Vec<String>,
}

#[pymethods]
impl IndexSummary {
    /// Each shard indexed, in the order given, as `ShardCount(name, samples)`.
    #[getter]
    fn shards<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        shard_counts(py, &self.counts)
    }
}

/// Writes `.tar.idx` files (and the sqlite index when a path is given) for `shards`, relative
/// to `root`.
#[pyfunction]
#[pyo3(signature = (root, shards, sqlite_path=None))]
fn index_shards(
    py: Python<'_>,
    root: PathBuf,
    shards: Vec<String>,
    sqlite_path: Option<PathBuf>,
) -> PyResult<IndexSummary> {
    let summary = py
        .detach(|| index::build_index(&root, &shards, sqlite_path.as_deref()))
        .map_err(|e| to_py(py, e))?;
    Ok(IndexSummary {
        counts: summary.shards,
        part_names: summary.part_names.into_iter().collect(),
    })
}

/// One shard as `verify_shards` found it.
#[pyclass(frozen, get_all, module = "shardcook._native")]
#[derive(Clone)]
struct ShardCheck {
    name: String,
    /// Samples counted, or None when the shard could not be read to the end.
    count: Option<u64>,
    /// What is wrong with this shard, one sentence each; empty when whole.
    problems: Vec<String>,
}

/// What `verify_shards` found.
#[pyclass(frozen, get_all, module = "shardcook._native")]
struct ShardVerification {
    shards: Vec<ShardCheck>,
    /// Problems of the dataset as a whole (a key in two shards, ...).
    problems: Vec<String>,
}

/// Verifies shards against their `.tar.idx` files and expected counts.
#[pyfunction]
fn verify_shards(
    py: Python<'_>,
    root: PathBuf,
    shards: Vec<(String, Option<u64>)>,
) -> ShardVerification {
    let (reports, problems) = py.detach(|| check::verify_shards(&root, &shards));
    let shards = reports
        .into_iter()
        .map(|r| ShardCheck {
            name: r.name,
            count: r.count,
            problems: r.problems,
        })
        .collect();
    ShardVerification { shards, problems }
}

/// The file name the writer gives shard `number` with `prefix`.
#[pyfunction]
#[pyo3(signature = (number, *, prefix = ""), text_signature = "(number, *, prefix='')")]
fn shard_file_name(py: Python<'_>, number: IntArg, prefix: &str) -> PyResult<String> {
    let number = number
        .check("number", 0, UNBOUNDED)
        .map_err(|m| config_error(py, m))?;
    Ok(file_name(prefix, number))
}

/// Removes the partial shards a killed run left in `directory`; returns how many. Only for a
/// folder no writer is using.
#[pyfunction]
fn remove_partial_shards(py: Python<'_>, directory: PathBuf) -> PyResult<u64> {
    py.detach(|| remove_partials(&directory))
        .map_err(|e| to_py(py, e))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyShardWriter>()?;
    m.add_class::<PyShardReader>()?;
    m.add_class::<IndexSummary>()?;
    m.add_class::<ShardCheck>()?;
    m.add_class::<ShardVerification>()?;
    m.add("ShardCount", SHARD_COUNT.class(m.py())?)?;
    m.add("Sample", SAMPLE.class(m.py())?)?;
    m.add_function(wrap_pyfunction!(shard_file_name, m)?)?;
    m.add_function(wrap_pyfunction!(remove_partial_shards, m)?)?;
    m.add_function(wrap_pyfunction!(read_shard, m)?)?;
    m.add_function(wrap_pyfunction!(count_samples, m)?)?;
    m.add_function(wrap_pyfunction!(index_shards, m)?)?;
    m.add_function(wrap_pyfunction!(verify_shards, m)?)?;
    Ok(())
}
