//! `TarWalk` and `write_walks`: indexing tars in object storage from ranged reads of their
//! headers (`crate::walk`); the caller fetches, the core parses and writes.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use super::to_py;
use crate::error::Error;
use crate::index::write_scans;
use crate::walk::HeaderWalk;

/// One tar's header walk: `needed` names the next range to fetch, `feed` hands it over.
#[pyclass(name = "TarWalk", module = "shardcook._native")]
struct PyTarWalk {
    inner: HeaderWalk,
}

#[pymethods]
impl PyTarWalk {
    #[new]
    fn new(py: Python<'_>, name: &str, size: u64) -> PyResult<Self> {
        let inner = HeaderWalk::new(name, size).map_err(|e| to_py(py, e))?;
        Ok(Self { inner })
    }

    /// `(offset, length)` of the bytes to fetch next; None once the walk is complete.
    fn needed(&self) -> Option<(u64, u64)> {
        self.inner.needed()
    }

    /// The bytes at `offset` (what `needed` named, and any read ahead); walks on.
    fn feed(&mut self, py: Python<'_>, offset: u64, data: PyBackedBytes) -> PyResult<()> {
        // held as given, not copied: a streamed piece is megabytes
        let inner = &mut self.inner;
        py.detach(|| inner.feed(offset, data))
            .map_err(|e| to_py(py, e))
    }

    /// The `.tar.idx` offsets (each sample's, then the end block's) once the walk is complete.
    #[getter]
    fn offsets(&self) -> Option<Vec<u64>> {
        let scan = self.inner.scan()?;
        let mut out: Vec<u64> = scan.samples.iter().map(|s| s.offset).collect();
        out.push(scan.end);
        Some(out)
    }

    /// Where the second sample starts (the first one's end), once the walk has read one of
    /// its headers; None before, and for a tar of one sample.
    #[getter]
    fn second_sample(&self) -> Option<u64> {
        self.inner.second_sample()
    }

    /// Samples whose first header the walk has read.
    #[getter]
    fn samples(&self) -> usize {
        self.inner.samples()
    }

    /// Bytes of the tar walked so far.
    #[getter]
    fn position(&self) -> u64 {
        self.inner.position()
    }
}

/// Writes `<root>/<shard>.idx` of each complete walk and the rows of all of them, `tar_file_id`
/// 0, 1, ... in the order given, into a new sqlite database `sqlite_path`.
#[pyfunction]
fn write_walks(
    py: Python<'_>,
    root: PathBuf,
    walks: Vec<(String, PyRef<'_, PyTarWalk>)>,
    sqlite_path: PathBuf,
) -> PyResult<()> {
    let mut scans = Vec::with_capacity(walks.len());
    for (name, walk) in &walks {
        let scan = walk.inner.scan().ok_or_else(|| {
            to_py(
                py,
                Error::Dataset(format!("the header walk of {name} is not complete")),
            )
        })?;
        scans.push((name.clone(), scan));
    }
    py.detach(|| write_scans(&root, &scans, &sqlite_path))
        .map_err(|e| to_py(py, e))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTarWalk>()?;
    m.add_function(wrap_pyfunction!(write_walks, m)?)
}
