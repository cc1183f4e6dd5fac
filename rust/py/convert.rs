//! Python values to Rust ones, written once for every binding: bytes-like inputs, bounded
//! integers, "a list, not a str", and the named tuples the module returns.

use pyo3::call::PyCallArgs;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyList, PyMemoryView, PyString};

/// Bytes handed over from Python: borrowed when immutable (bytes), copied once otherwise
/// (bytearray, memoryview, a numpy array or anything else with a byte buffer).
pub(super) type Bytes = PyBackedBytes;

/// The bytes of `value`, or None when it is not bytes-like (no buffer, or items wider than a
/// byte). Other buffers are read through `memoryview`: PyO3's `PyBuffer` is not in the stable
/// ABI before CPython 3.11, and the module is built for abi3 from 3.10.
pub(super) fn bytes_like(value: &Bound<'_, PyAny>) -> Option<Bytes> {
    if let Ok(b) = value.extract::<PyBackedBytes>() {
        return Some(b);
    }
    let view = PyMemoryView::from(value).ok()?;
    let format: String = view.getattr("format").ok()?.extract().ok()?;
    // struct-module codes for one unsigned byte, with any byte-order prefix.
    if !matches!(
        format.trim_start_matches(['@', '=', '<', '>', '!']),
        "B" | "c"
    ) {
        return None;
    }
    let copy = view.call_method0("tobytes").ok()?;
    copy.extract::<PyBackedBytes>().ok()
}

/// The Python type name of `value`, for messages.
pub(super) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// The largest value an integer argument may have when its parameter sets no bound of its own.
pub(super) const UNBOUNDED: u64 = i64::MAX as u64;

/// An integer argument as given; [`IntArg::check`] holds it to its parameter's range, so a wrong
/// value is one sentence of ours instead of pyo3's `TypeError` or `OverflowError`.
pub(super) enum IntArg {
    Value(i128),
    /// An int too large even for i128, as Python writes it.
    Huge(String),
    /// Not an integer (bool counts as not one): the type's name.
    NotInt(String),
}

impl<'a, 'py> FromPyObject<'a, 'py> for IntArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_instance_of::<PyBool>() {
            return Ok(IntArg::NotInt("bool".into()));
        }
        Ok(match obj.extract::<i128>() {
            Ok(n) => IntArg::Value(n),
            Err(_) if obj.is_instance_of::<PyInt>() => IntArg::Huge(obj.to_string()),
            Err(_) => IntArg::NotInt(type_name(&obj)),
        })
    }
}

impl IntArg {
    /// The value if it is an integer in `min..=max`, else one sentence naming `name`.
    pub(super) fn check(&self, name: &str, min: u64, max: u64) -> Result<u64, String> {
        let range = |v: &dyn std::fmt::Display| match max {
            UNBOUNDED => format!("{name} must be at least {min}, not {v}"),
            _ => format!("{name} must be from {min} to {max}, not {v}"),
        };
        match self {
            IntArg::Value(n) if *n >= i128::from(min) && *n <= i128::from(max) => Ok(*n as u64),
            IntArg::Value(n) => Err(range(n)),
            IntArg::Huge(text) => Err(range(text)),
            IntArg::NotInt(kind) => Err(format!("{name} must be an integer, not a {kind}")),
        }
    }
}

/// The items of `value`, refusing a str or bytes-like value where a list of items is expected
/// (iterating one would treat each character or byte as an item).
pub(super) fn list_arg<'py>(
    value: &Bound<'py, PyAny>,
    name: &str,
    of: &str,
) -> Result<Vec<Bound<'py, PyAny>>, String> {
    let single = value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
        || value.is_instance_of::<PyMemoryView>();
    let wrong = || format!("{name} must be a list of {of}, not a {}", type_name(value));
    if single {
        return Err(wrong());
    }
    let items = value.try_iter().map_err(|_| wrong())?;
    items
        .collect::<PyResult<Vec<_>>>()
        .map_err(|e| format!("{name}: {e}"))
}

/// A `collections.namedtuple` class of this module, made once.
pub(super) struct NamedTuple {
    cell: PyOnceLock<Py<PyAny>>,
    name: &'static str,
    fields: &'static [&'static str],
}

impl NamedTuple {
    pub(super) const fn new(name: &'static str, fields: &'static [&'static str]) -> Self {
        Self {
            cell: PyOnceLock::new(),
            name,
            fields,
        }
    }

    /// The class, created on first use with `__module__` set to `shardcook._native`.
    pub(super) fn class<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        let class = self.cell.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let fields = PyList::new(py, self.fields)?;
            let class = py
                .import("collections")?
                .getattr("namedtuple")?
                .call1((self.name, fields))?;
            class.setattr("__module__", "shardcook._native")?;
            Ok(class.unbind())
        })?;
        Ok(class.bind(py))
    }

    /// One instance holding `values`, in field order.
    pub(super) fn make<'py>(
        &self,
        py: Python<'py>,
        values: impl PyCallArgs<'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.class(py)?.call1(values)
    }
}
