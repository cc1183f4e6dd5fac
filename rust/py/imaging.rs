//! Bindings for the image core: batch preprocess, geometry, default buckets, encode.

use std::path::PathBuf;

use numpy::{PyArray1, PyArray3, PyArrayMethods, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use super::to_py;
use crate::error::Error;
use crate::image::{self, Filter, Input, Mode, Options};

/// One input as handed over: borrowed bytes, copied buffer, a path, or why it is unusable.
enum Held {
    Backed(PyBackedBytes),
    Owned(Vec<u8>),
    Path(PathBuf),
    Bad(String),
}

fn hold(value: &Bound<'_, PyAny>, index: usize) -> Held {
    if let Ok(b) = value.extract::<PyBackedBytes>() {
        return Held::Backed(b);
    }
    if let Ok(buffer) = pyo3::buffer::PyBuffer::<u8>::get(value) {
        if let Ok(v) = buffer.to_vec(value.py()) {
            return Held::Owned(v);
        }
    }
    if let Ok(p) = value.extract::<PathBuf>() {
        return Held::Path(p);
    }
    let kind = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Held::Bad(format!("input {index} is a {kind}, not bytes or a path"))
}

fn mode(
    name: &str,
    size: u32,
    max_size: u32,
    buckets: Option<Vec<(u32, u32)>>,
) -> Result<Mode, Error> {
    Mode::from_name(name, size, max_size, buckets)
}

type Row<'py> = (
    Option<Bound<'py, PyArray3<u8>>>,
    Option<String>,
    Option<(u32, u32)>,
    Option<(u32, u32)>,
);

/// Decodes, orients and resizes a batch in parallel with the GIL released.
#[pyfunction]
#[pyo3(signature = (inputs, *, size = 1024, mode_name = "crop", max_size = 1024, buckets = None,
    filter = "lanczos3", max_pixels = image::DEFAULT_MAX_PIXELS, workers = None))]
#[allow(clippy::too_many_arguments)]
fn preprocess_batch<'py>(
    py: Python<'py>,
    inputs: Vec<Bound<'py, PyAny>>,
    size: u32,
    mode_name: &str,
    max_size: u32,
    buckets: Option<Vec<(u32, u32)>>,
    filter: &str,
    max_pixels: u64,
    workers: Option<usize>,
) -> PyResult<Vec<Row<'py>>> {
    let options = Options {
        mode: mode(mode_name, size, max_size, buckets).map_err(|e| to_py(py, e))?,
        filter: Filter::from_name(filter).map_err(|e| to_py(py, e))?,
        max_pixels,
    };
    let workers = workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let held: Vec<Held> = inputs.iter().enumerate().map(|(i, v)| hold(v, i)).collect();
    let mut bad = Vec::new();
    let batch: Vec<Input<'_>> = held
        .iter()
        .map(|h| match h {
            Held::Backed(b) => Input::Bytes(b.as_ref()),
            Held::Owned(v) => Input::Bytes(v),
            Held::Path(p) => Input::Path(p.clone()),
            Held::Bad(_) => Input::Bytes(&[]),
        })
        .collect();
    for (i, h) in held.iter().enumerate() {
        if let Held::Bad(m) = h {
            bad.push((i, m.clone()));
        }
    }
    let results = py
        .detach(|| image::preprocess_batch(&batch, &options, workers))
        .map_err(|e| to_py(py, e))?;
    let mut out = Vec::with_capacity(results.len());
    for (i, r) in results.into_iter().enumerate() {
        if let Some((_, m)) = bad.iter().find(|(j, _)| *j == i) {
            out.push((None, Some(m.clone()), None, None));
            continue;
        }
        out.push(match r {
            Ok(p) => {
                let (h, w) = (p.height as usize, p.width as usize);
                let array = PyArray1::from_vec(py, p.pixels).reshape([h, w, 3])?;
                (Some(array), None, Some(p.orig_size), Some(p.crop))
            }
            Err(e) => (None, Some(e.to_string()), None, None),
        });
    }
    Ok(out)
}

/// The geometry of a mode: ((width, height), (left, top, right, bottom), (crop_top, crop_left)).
#[pyfunction]
#[pyo3(signature = (width, height, *, size = 1024, mode_name = "crop", max_size = 1024, buckets = None))]
#[allow(clippy::type_complexity)]
fn image_geometry(
    py: Python<'_>,
    width: u32,
    height: u32,
    size: u32,
    mode_name: &str,
    max_size: u32,
    buckets: Option<Vec<(u32, u32)>>,
) -> PyResult<((u32, u32), (f64, f64, f64, f64), (u32, u32))> {
    let m = mode(mode_name, size, max_size, buckets).map_err(|e| to_py(py, e))?;
    let g = image::geometry(width, height, &m).map_err(|e| to_py(py, e))?;
    let s = g.source;
    Ok((
        (g.width, g.height),
        (s.left, s.top, s.left + s.width, s.top + s.height),
        g.crop,
    ))
}

/// The built-in buckets for `size`, as (width, height).
#[pyfunction]
fn default_buckets(size: u32) -> Vec<(u32, u32)> {
    image::default_buckets(size)
}

/// Encodes an H×W×3 uint8 array as jpg, png or webp, with the GIL released.
#[pyfunction]
#[pyo3(signature = (pixels, format = "jpg", quality = 95))]
fn encode_image<'py>(
    py: Python<'py>,
    pixels: PyReadonlyArray3<'py, u8>,
    format: &str,
    quality: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let shape = pixels.shape().to_vec();
    if shape[2] != 3 {
        return Err(to_py(
            py,
            Error::Image(format!(
                "pixels must be H×W×3 uint8 (RGB), got shape {shape:?}"
            )),
        ));
    }
    let (h, w) = (shape[0] as u32, shape[1] as u32);
    let owned;
    let data: &[u8] = match pixels.as_slice() {
        Ok(s) => s,
        Err(_) => {
            owned = pixels.as_array().iter().copied().collect::<Vec<u8>>();
            &owned
        }
    };
    let bytes = py
        .detach(|| image::encode(data, w, h, format, quality))
        .map_err(|e| to_py(py, e))?;
    Ok(PyBytes::new(py, &bytes))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(preprocess_batch, m)?)?;
    m.add_function(wrap_pyfunction!(image_geometry, m)?)?;
    m.add_function(wrap_pyfunction!(default_buckets, m)?)?;
    m.add_function(wrap_pyfunction!(encode_image, m)?)?;
    Ok(())
}
