//! Bindings for the image core: batch preprocess, geometry, default buckets, encode. Every
//! argument is checked here, so a wrong one is an `ImageError` (kind `bad_option`) in one
//! sentence, never an `OverflowError` or a failed allocation.

use std::path::PathBuf;

use numpy::{PyArray1, PyArray3, PyArrayMethods, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::convert::{bytes_like, list_arg, type_name, Bytes, IntArg, UNBOUNDED};
use super::to_py;
use crate::error::{Error, ImageKind};
use crate::image::{self, Filter, Input, Mode, Options};

/// The longest side `size`, `max_size` and buckets may ask for.
const MAX_SIDE: u64 = 1 << 16;
/// The most image threads one call may start.
const MAX_WORKERS: u64 = 1024;

fn bad_option(py: Python<'_>, message: String) -> PyErr {
    to_py(py, Error::image(ImageKind::BadOption, message))
}

/// An integer image argument in `min..=max`.
fn int_option(py: Python<'_>, value: &IntArg, name: &str, min: u64, max: u64) -> PyResult<u64> {
    value.check(name, min, max).map_err(|m| bad_option(py, m))
}

fn side(py: Python<'_>, value: &IntArg, name: &str) -> PyResult<u32> {
    Ok(int_option(py, value, name, 1, MAX_SIDE)? as u32)
}

/// `buckets` as (width, height) pairs with sides in `1..=MAX_SIDE`.
fn bucket_list(py: Python<'_>, buckets: &Bound<'_, PyAny>) -> PyResult<Vec<(u32, u32)>> {
    let items =
        list_arg(buckets, "buckets", "(width, height) pairs").map_err(|m| bad_option(py, m))?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let pair = list_arg(&item, "each bucket", "two sides").map_err(|m| bad_option(py, m))?;
        let [w, h] = pair.as_slice() else {
            return Err(bad_option(
                py,
                format!("bucket {item} is not a (width, height) pair"),
            ));
        };
        let (w, h) = (w.extract::<IntArg>()?, h.extract::<IntArg>()?);
        out.push((
            side(py, &w, "a bucket width")?,
            side(py, &h, "a bucket height")?,
        ));
    }
    Ok(out)
}

fn mode(
    py: Python<'_>,
    name: &str,
    size: &IntArg,
    max_size: &IntArg,
    buckets: Option<&Bound<'_, PyAny>>,
) -> PyResult<Mode> {
    let buckets = buckets
        .filter(|b| !b.is_none())
        .map(|b| bucket_list(py, b))
        .transpose()?;
    let (size, max_size) = (side(py, size, "size")?, side(py, max_size, "max_size")?);
    Mode::from_name(name, size, max_size, buckets).map_err(|e| to_py(py, e))
}

/// One input as handed over: its bytes, a path, or why it is unusable.
enum Held {
    Data(Bytes),
    Path(PathBuf),
    Bad(String),
}

fn hold(value: &Bound<'_, PyAny>, index: usize) -> Held {
    if let Some(data) = bytes_like(value) {
        return Held::Data(data);
    }
    if let Ok(p) = value.extract::<PathBuf>() {
        return Held::Path(p);
    }
    Held::Bad(format!(
        "input {index} is a {}, not bytes or a path",
        type_name(value)
    ))
}

/// The outcome for one input of `preprocess_batch`.
#[pyclass(frozen, get_all, module = "shardcook._native")]
struct PreprocessedImage {
    /// H×W×3 uint8 RGB, or None when the input could not be used.
    pixels: Option<Py<PyArray3<u8>>>,
    /// Why the input could not be used, in one sentence.
    error: Option<String>,
    /// The machine-readable reason (`too_large`, `decode_error`, ...).
    error_kind: Option<&'static str>,
    /// (h, w) after EXIF orientation.
    orig_size: Option<(u32, u32)>,
    /// (top, left) of the source box in target coordinates.
    crop: Option<(u32, u32)>,
}

impl PreprocessedImage {
    fn failed(kind: ImageKind, message: String) -> Self {
        Self {
            pixels: None,
            error: Some(message),
            error_kind: Some(kind.name()),
            orig_size: None,
            crop: None,
        }
    }
}

/// Decodes, orients and resizes a batch in parallel with the GIL released.
#[pyfunction]
#[pyo3(signature = (inputs, *, size = IntArg::Value(1024), mode_name = "crop",
    max_size = IntArg::Value(1024), buckets = None, filter = "lanczos3",
    max_pixels = IntArg::Value(i128::from(image::DEFAULT_MAX_PIXELS)), workers = None),
    text_signature = "(inputs, *, size=1024, mode_name='crop', max_size=1024, buckets=None, \
    filter='lanczos3', max_pixels=178956970, workers=None)")]
#[allow(clippy::too_many_arguments)]
fn preprocess_batch(
    py: Python<'_>,
    inputs: &Bound<'_, PyAny>,
    size: IntArg,
    mode_name: &str,
    max_size: IntArg,
    buckets: Option<&Bound<'_, PyAny>>,
    filter: &str,
    max_pixels: IntArg,
    workers: Option<IntArg>,
) -> PyResult<Vec<PreprocessedImage>> {
    let inputs =
        list_arg(inputs, "inputs", "images (bytes or paths)").map_err(|m| bad_option(py, m))?;
    let options = Options {
        mode: mode(py, mode_name, &size, &max_size, buckets)?,
        filter: Filter::from_name(filter).map_err(|e| to_py(py, e))?,
        max_pixels: int_option(py, &max_pixels, "max_pixels", 1, UNBOUNDED)?,
    };
    let workers = match workers {
        Some(w) => int_option(py, &w, "workers", 1, MAX_WORKERS)? as usize,
        None => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
    };
    let held: Vec<Held> = inputs.iter().enumerate().map(|(i, v)| hold(v, i)).collect();
    let batch: Vec<Input<'_>> = held
        .iter()
        .map(|h| match h {
            Held::Data(d) => Input::Bytes(d.as_ref()),
            Held::Path(p) => Input::Path(p.clone()),
            Held::Bad(_) => Input::Bytes(&[]),
        })
        .collect();
    let results = py
        .detach(|| image::preprocess_batch(&batch, &options, workers))
        .map_err(|e| to_py(py, e))?;
    let mut out = Vec::with_capacity(results.len());
    for (h, r) in held.iter().zip(results) {
        out.push(match (h, r) {
            (Held::Bad(m), _) => PreprocessedImage::failed(ImageKind::BadInput, m.clone()),
            (_, Ok(p)) => {
                let (h, w) = (p.height as usize, p.width as usize);
                let array = PyArray1::from_vec(py, p.pixels).reshape([h, w, 3])?;
                PreprocessedImage {
                    pixels: Some(array.unbind()),
                    error: None,
                    error_kind: None,
                    orig_size: Some(p.orig_size),
                    crop: Some(p.crop),
                }
            }
            (_, Err(e)) => {
                let kind = match &e {
                    Error::Image { kind, .. } => *kind,
                    _ => ImageKind::DecodeError,
                };
                PreprocessedImage::failed(kind, e.to_string())
            }
        });
    }
    Ok(out)
}

/// What a mode does to an image of a given (oriented) size.
#[pyclass(frozen, get_all, module = "shardcook._native")]
struct ImageGeometry {
    /// (width, height) of the result.
    size: (u32, u32),
    /// The source box (left, top, right, bottom) in input pixels; fractional.
    #[pyo3(name = "box")]
    source_box: (f64, f64, f64, f64),
    /// (top, left) of the box scaled into target coordinates.
    crop: (u32, u32),
}

/// The geometry of a mode for an oriented `width`×`height` image.
#[pyfunction]
#[pyo3(signature = (width, height, *, size = IntArg::Value(1024), mode_name = "crop",
    max_size = IntArg::Value(1024), buckets = None),
    text_signature = "(width, height, *, size=1024, mode_name='crop', max_size=1024, buckets=None)")]
fn image_geometry(
    py: Python<'_>,
    width: IntArg,
    height: IntArg,
    size: IntArg,
    mode_name: &str,
    max_size: IntArg,
    buckets: Option<&Bound<'_, PyAny>>,
) -> PyResult<ImageGeometry> {
    let width = int_option(py, &width, "width", 0, u64::from(u32::MAX))? as u32;
    let height = int_option(py, &height, "height", 0, u64::from(u32::MAX))? as u32;
    let m = mode(py, mode_name, &size, &max_size, buckets)?;
    let g = image::geometry(width, height, &m).map_err(|e| to_py(py, e))?;
    let s = g.source;
    Ok(ImageGeometry {
        size: (g.width, g.height),
        source_box: (s.left, s.top, s.left + s.width, s.top + s.height),
        crop: g.crop,
    })
}

/// The built-in buckets for `size`, as (width, height).
#[pyfunction]
fn default_buckets(py: Python<'_>, size: IntArg) -> PyResult<Vec<(u32, u32)>> {
    Ok(image::default_buckets(side(py, &size, "size")?))
}

/// Encodes an H×W×3 uint8 array as jpg, png or webp, with the GIL released.
#[pyfunction]
#[pyo3(signature = (pixels, format = "jpg", quality = IntArg::Value(95)),
    text_signature = "(pixels, format='jpg', quality=95)")]
fn encode_image<'py>(
    py: Python<'py>,
    pixels: PyReadonlyArray3<'py, u8>,
    format: &str,
    quality: IntArg,
) -> PyResult<Bound<'py, PyBytes>> {
    let quality = int_option(py, &quality, "quality", 1, 100)? as u8;
    let shape = pixels.shape().to_vec();
    if shape[2] != 3 {
        return Err(bad_option(
            py,
            format!("pixels must be H×W×3 uint8 (RGB), got shape {shape:?}"),
        ));
    }
    let side = |n: usize| {
        u32::try_from(n).map_err(|_| {
            bad_option(
                py,
                format!("pixels of shape {shape:?} are too large to encode"),
            )
        })
    };
    let (h, w) = (side(shape[0])?, side(shape[1])?);
    let owned;
    let data: &[u8] = if let Ok(s) = pixels.as_slice() {
        s
    } else {
        owned = pixels.as_array().iter().copied().collect::<Vec<u8>>();
        &owned
    };
    let bytes = py
        .detach(|| image::encode(data, w, h, format, quality))
        .map_err(|e| to_py(py, e))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Pillow's (width, height, format, mode) of a JPEG, PNG or WebP file, from its header alone;
/// None when the header does not settle them (the caller asks Pillow).
#[pyfunction]
fn pillow_header(data: &[u8]) -> Option<(u32, u32, &'static str, &'static str)> {
    image::pillow::pillow_header(data).map(|h| (h.width, h.height, h.format, h.mode))
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PreprocessedImage>()?;
    m.add_class::<ImageGeometry>()?;
    m.add_function(wrap_pyfunction!(preprocess_batch, m)?)?;
    m.add_function(wrap_pyfunction!(image_geometry, m)?)?;
    m.add_function(wrap_pyfunction!(default_buckets, m)?)?;
    m.add_function(wrap_pyfunction!(encode_image, m)?)?;
    m.add_function(wrap_pyfunction!(pillow_header, m)?)?;
    Ok(())
}
