//! Bindings for shard IO, indexing and verification.

use std::path::PathBuf;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyMapping};

use super::to_py;
use crate::tar::{SampleReader, ShardWriter};
use crate::{check, index};

/// Bytes handed over from Python: borrowed when immutable, copied otherwise.
enum Data {
    Backed(PyBackedBytes),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for Data {
    fn as_ref(&self) -> &[u8] {
        match self {
            Data::Backed(b) => b.as_ref(),
            Data::Owned(v) => v,
        }
    }
}

fn bytes_like(key: &str, part: &str, value: &Bound<'_, PyAny>) -> PyResult<Data> {
    if let Ok(b) = value.extract::<PyBackedBytes>() {
        return Ok(Data::Backed(b));
    }
    match PyBuffer::<u8>::get(value) {
        Ok(buffer) => Ok(Data::Owned(buffer.to_vec(value.py())?)),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "part {part:?} of sample {key:?} is a {}, not bytes; encode it first (e.g. text.encode())",
            value.get_type().name()?
        ))),
    }
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
    #[pyo3(signature = (directory, *, shard_size = 1000, prefix = "", first_shard = 0))]
    fn new(
        py: Python<'_>,
        directory: PathBuf,
        shard_size: u64,
        prefix: &str,
        first_shard: u64,
    ) -> PyResult<Self> {
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
        let mut owned: Vec<(String, Data)> = Vec::new();
        for item in items.try_iter()? {
            let (name, value): (String, Bound<'_, PyAny>) = item?.extract()?;
            let data = bytes_like(key, &name, &value)?;
            owned.push((name, data));
        }
        let refs: Vec<(&str, &Data)> = owned.iter().map(|(n, d)| (n.as_str(), d)).collect();
        let writer = self.writer()?;
        py.detach(|| writer.write(key, &refs))
            .map_err(|e| to_py(py, e))
    }

    /// Completes the open shard; returns `[(shard_name, sample_count), ...]`.
    fn close(&mut self, py: Python<'_>) -> PyResult<Vec<(String, u64)>> {
        if let Some(mut w) = self.inner.take() {
            self.closed = py.detach(|| w.close()).map_err(|e| to_py(py, e))?;
        }
        Ok(self.closed.clone())
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

/// Streams `(key, {part: bytes})` from one shard.
#[pyclass(name = "ShardReader", module = "shardcook._native")]
struct PyShardReader {
    inner: SampleReader,
}

#[pymethods]
impl PyShardReader {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<(String, Bound<'py, PyDict>)>> {
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
        Ok(Some((sample.key, parts)))
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

/// Writes `.tar.idx` files (and the sqlite index when a path is given) for `shards`, relative
/// to `root`. Returns `([(shard, count), ...], [part names])`.
#[pyfunction]
#[pyo3(signature = (root, shards, sqlite_path=None))]
fn index_shards(
    py: Python<'_>,
    root: PathBuf,
    shards: Vec<String>,
    sqlite_path: Option<PathBuf>,
) -> PyResult<(Vec<(String, u64)>, Vec<String>)> {
    let summary = py
        .detach(|| index::build_index(&root, &shards, sqlite_path.as_deref()))
        .map_err(|e| to_py(py, e))?;
    Ok((summary.shards, summary.part_names.into_iter().collect()))
}

type ShardReport = (String, Option<u64>, Vec<String>);

/// Verifies shards against their `.tar.idx` files and expected counts.
/// Returns `([(shard, count or None, [problems])], [dataset problems])`.
#[pyfunction]
fn verify_shards(
    py: Python<'_>,
    root: PathBuf,
    shards: Vec<(String, Option<u64>)>,
) -> (Vec<ShardReport>, Vec<String>) {
    let (reports, problems) = py.detach(|| check::verify_shards(&root, &shards));
    let reports = reports
        .into_iter()
        .map(|r| (r.name, r.count, r.problems))
        .collect();
    (reports, problems)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyShardWriter>()?;
    m.add_class::<PyShardReader>()?;
    m.add_function(wrap_pyfunction!(read_shard, m)?)?;
    m.add_function(wrap_pyfunction!(count_samples, m)?)?;
    m.add_function(wrap_pyfunction!(index_shards, m)?)?;
    m.add_function(wrap_pyfunction!(verify_shards, m)?)?;
    Ok(())
}
