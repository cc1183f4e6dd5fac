//! `build_info()`: the native core's build (`crate::build_info`) as nested dicts.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::build_info::build_info as native_build;

/// The native core's build: versions, profile, target, and the JPEG SIMD and resizer CPU
/// extensions as they are on this machine.
#[pyfunction]
fn build_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let info = native_build();
    let jpeg = PyDict::new(py);
    jpeg.set_item("library", &info.jpeg.library)?;
    jpeg.set_item("simd_compiled", info.jpeg.simd_compiled)?;
    jpeg.set_item("simd_active", info.jpeg.simd_active)?;
    jpeg.set_item("nasm", &info.jpeg.nasm)?;
    let resize = PyDict::new(py);
    resize.set_item("library", &info.resizer)?;
    resize.set_item("cpu_extensions", &info.resizer_cpu_extensions)?;
    let out = PyDict::new(py);
    out.set_item("version", info.version)?;
    out.set_item("profile", info.profile)?;
    out.set_item("opt_level", info.opt_level)?;
    out.set_item("target", info.target)?;
    out.set_item("rustc", info.rustc)?;
    out.set_item("pyo3", info.pyo3)?;
    out.set_item("jpeg", jpeg)?;
    out.set_item("webp", &info.webp)?;
    out.set_item("png", &info.png)?;
    out.set_item("resize", resize)?;
    Ok(out)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(build_info, m)?)
}
