//! The image core: bytes in, oriented RGB pixels of a training size out.
//!
//! One image goes: sniff → header (size, EXIF orientation; `max_pixels` checked before any
//! pixel is allocated) → geometry of the mode in the oriented frame → the source box mapped to
//! the stored frame → decode (JPEG: DCT-domain 1/2–1/8 scale, rows below the box never decoded)
//! → resample the box to the target → orient the small result. Plain Rust; the Python face is
//! `rust/py/imaging.rs` and `python/shardcook/imaging.py`.

pub mod decode;
pub mod encode;
pub mod geometry;
pub mod orient;
pub mod pillow;
pub mod resize;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use decode::{Format, Header};
pub use encode::encode;
pub use geometry::{default_buckets, geometry, Geometry, Mode, SourceBox};
pub use resize::Filter;

use crate::error::{Error, ImageKind, Result};

/// Pillow's default decompression-bomb limit.
pub const DEFAULT_MAX_PIXELS: u64 = 178_956_970;

/// Everything `preprocess` needs besides the bytes.
#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    pub filter: Filter,
    pub max_pixels: u64,
}

impl Options {
    /// The most pixels one output may have: `max_pixels`, but never below the default, so a
    /// strict input limit does not forbid upscaling small images to a usual training size.
    #[must_use]
    pub fn output_limit(&self) -> u64 {
        self.max_pixels.max(DEFAULT_MAX_PIXELS)
    }

    /// Refuses a mode whose output alone would exceed [`Options::output_limit`], so a huge size
    /// is one clear error before any work instead of a failed allocation per image.
    ///
    /// # Errors
    ///
    /// An `Error::Image` of kind `BadOption` when the output would exceed the limit.
    ///
    /// # Panics
    ///
    /// For a `Mode::Bucket` without buckets, which [`Mode::from_name`] never makes.
    pub fn check(&self) -> Result<()> {
        let side = |s: u32| u64::from(s) * u64::from(s);
        let (what, pixels) = match &self.mode {
            Mode::Crop { size } | Mode::Stretch { size } => (format!("size {size}"), side(*size)),
            Mode::Bucket { buckets } => {
                let (w, h) = *buckets
                    .iter()
                    .max_by_key(|(w, h)| u64::from(*w) * u64::from(*h))
                    .expect("buckets checked non-empty");
                (format!("bucket {w}x{h}"), u64::from(w) * u64::from(h))
            }
            Mode::Variable { .. } => return Ok(()), // never larger than the input
        };
        if pixels > self.output_limit() {
            return Err(Error::image(
                ImageKind::BadOption,
                format!(
                    "{what} asks for {pixels} output pixels, more than the limit of {} \
                     (max_pixels, at least {DEFAULT_MAX_PIXELS}); choose a smaller size",
                    self.output_limit()
                ),
            ));
        }
        Ok(())
    }
}

/// A zeroed buffer of `len` bytes for `what`, or an error (never an abort) when memory is short.
///
/// # Errors
///
/// An `Error::Image` of kind `TooLarge` when the allocation fails.
pub fn zeroed(len: usize, what: &str) -> Result<Vec<u8>> {
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len).map_err(|_| {
        Error::image(
            ImageKind::TooLarge,
            format!("cannot allocate {len} bytes for {what}: not enough memory"),
        )
    })?;
    buffer.resize(len, 0);
    Ok(buffer)
}

/// One preprocessed image.
#[derive(Debug, Clone)]
pub struct Processed {
    /// Packed RGB8, `height` rows of `width` pixels.
    pub pixels: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// (h, w) after orientation.
    pub orig_size: (u32, u32),
    /// (top, left) of the source box in target coordinates.
    pub crop: (u32, u32),
}

/// The largest decode scale denominator (1, 2, 4, 8) that still leaves at least twice the
/// target resolution inside the box (`bw`×`bh` source pixels to `tw`×`th`).
#[must_use]
pub fn decode_denom(bw: f64, bh: f64, tw: u32, th: u32) -> u32 {
    [8u32, 4, 2]
        .into_iter()
        .find(|&k| {
            bw / f64::from(k) >= 2.0 * f64::from(tw) && bh / f64::from(k) >= 2.0 * f64::from(th)
        })
        .unwrap_or(1)
}

/// Decodes, orients, and resamples one image.
///
/// # Errors
///
/// An `Error::Image` that says why the image cannot be decoded, fitted or resampled.
#[expect(
    clippy::missing_panics_doc,
    reason = "its one expect is decode's contract: pixels come only after the plan ran"
)]
pub fn preprocess_one(data: &[u8], options: &Options) -> Result<Processed> {
    let mut plan_out = None;
    let plan = |h: &Header| -> Result<decode::Request> {
        let (ow, oh) = h.orientation.oriented_size(h.width, h.height);
        let g = geometry(ow, oh, &options.mode)?;
        if u64::from(g.width) * u64::from(g.height) > options.output_limit() {
            return Err(Error::image(
                ImageKind::TooLarge,
                format!(
                    "output too large: {}×{} (more than {} pixels)",
                    g.width,
                    g.height,
                    options.output_limit()
                ),
            ));
        }
        let stored = h.orientation.box_to_stored(g.source, h.width, h.height);
        let (tw, th) = h.orientation.oriented_size(g.width, g.height); // target, stored frame
        let mut request = decode::Request {
            denom: 1,
            rows: None,
        };
        if matches!(h.format, Format::Jpeg | Format::Webp) {
            request.denom = decode_denom(stored.width, stored.height, tw, th);
        }
        if h.format == Format::Jpeg {
            // Rows below the box plus the kernel's reach are never needed.
            let scaled_h = (f64::from(h.height) / f64::from(request.denom)).ceil();
            let fy = scaled_h / f64::from(h.height);
            let reach = options.filter.support() * (stored.height * fy / f64::from(th)).max(1.0);
            let bottom = ((stored.top + stored.height) * fy + reach).ceil() + 1.0;
            if bottom < scaled_h {
                request.rows = Some(bottom as u32);
            }
        }
        plan_out = Some((g, stored, tw, th, (ow, oh)));
        Ok(request)
    };
    let (header, px) = decode::decode(data, options.max_pixels, plan)?;
    let (g, stored, tw, th, (ow, oh)) = plan_out.expect("plan ran before decoding");
    // The box in decoded pixels (the decode may be scaled by 1/2..1/8).
    let fx = f64::from(px.full_width) / f64::from(header.width);
    let fy = f64::from(px.full_height) / f64::from(header.height);
    let scaled = SourceBox {
        left: stored.left * fx,
        top: stored.top * fy,
        width: stored.width * fx,
        height: stored.height * fy,
    };
    let out = resize::resize(&px.rgb, px.width, px.height, scaled, tw, th, options.filter)?;
    drop(px);
    let pixels = header.orientation.apply(out, tw as usize, th as usize);
    Ok(Processed {
        pixels,
        width: g.width,
        height: g.height,
        orig_size: (oh, ow),
        crop: g.crop,
    })
}

/// [`preprocess_one`] that turns a panic anywhere below into an error value.
///
/// # Errors
///
/// As [`preprocess_one`], and one of kind `Internal` for a panic.
pub fn preprocess_guarded(data: &[u8], options: &Options) -> Result<Processed> {
    match catch_unwind(AssertUnwindSafe(|| preprocess_one(data, options))) {
        Ok(r) => r,
        Err(_) => Err(Error::image(
            ImageKind::Internal,
            "internal error while decoding this image (please report it)",
        )),
    }
}

/// A rayon pool with `workers` threads, built once per distinct count.
///
/// # Errors
///
/// An `Error::Image` of kind `Internal` when the threads cannot be started.
pub fn pool(workers: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let workers = workers.max(1);
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = pools.get(&workers) {
        return Ok(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("shardcook-image-{i}"))
        .build()
        .map_err(|e| {
            Error::image(
                ImageKind::Internal,
                format!("cannot start {workers} image threads: {e}"),
            )
        })?;
    let p = Arc::new(p);
    pools.insert(workers, p.clone());
    Ok(p)
}

/// Where an input's bytes come from.
pub enum Input<'a> {
    Bytes(&'a [u8]),
    Path(std::path::PathBuf),
}

impl Input<'_> {
    /// The input's size in bytes (0 for an unreadable path): a cheap guess at its decode cost.
    fn byte_len(&self) -> u64 {
        match self {
            Input::Bytes(b) => b.len() as u64,
            Input::Path(p) => std::fs::metadata(p).map_or(0, |m| m.len()),
        }
    }
}

/// Preprocesses a batch in parallel on `workers` threads, one result per input, in order.
///
/// # Errors
///
/// The error of [`Options::check`] or [`pool`]; each input's own failure is its item's `Err`.
pub fn preprocess_batch(
    inputs: &[Input<'_>],
    options: &Options,
    workers: usize,
) -> Result<Vec<Result<Processed>>> {
    options.check()?;
    let run = |input: &Input<'_>| match input {
        Input::Bytes(b) => preprocess_guarded(b, options),
        Input::Path(p) => match std::fs::read(p) {
            Ok(b) => preprocess_guarded(&b, options),
            Err(e) => Err(Error::image(
                ImageKind::Unreadable,
                format!("cannot read {}: {e}", p.display()),
            )),
        },
    };
    if workers <= 1 || inputs.len() <= 1 {
        return Ok(inputs.iter().map(run).collect());
    }
    // Largest first, each thread taking the next input when it is free: every thread ends the
    // batch on small images, instead of one thread finishing a big one while the others idle.
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].byte_len()));
    let next = AtomicUsize::new(0);
    let per_thread = pool(workers)?.broadcast(|_| {
        let mut done = Vec::new();
        while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
            done.push((i, run(&inputs[i])));
        }
        done
    });
    let mut all: Vec<_> = per_thread.into_iter().flatten().collect();
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: Mode) -> Options {
        Options {
            mode,
            filter: Filter::Lanczos3,
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }

    /// A smooth gradient image, width×height, as packed RGB.
    fn gradient(w: u32, h: u32) -> Vec<u8> {
        (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| [(x * 255 / w) as u8, (y * 255 / h) as u8, 128]))
            .collect()
    }

    fn psnr(a: &[u8], b: &[u8]) -> f64 {
        let mse = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
            .sum::<f64>()
            / a.len() as f64;
        10.0 * (255.0f64 * 255.0 / mse.max(1e-10)).log10()
    }

    #[test]
    fn round_trips_every_encoder_through_every_mode() {
        let (w, h) = (640, 480);
        let rgb = gradient(w, h);
        for format in ["jpg", "png", "webp"] {
            let bytes = encode(&rgb, w, h, format, 95).unwrap();
            for mode in [
                Mode::Crop { size: 128 },
                Mode::Stretch { size: 64 },
                Mode::Variable { max_size: 256 },
                Mode::Bucket {
                    buckets: default_buckets(256),
                },
            ] {
                let p = preprocess_one(&bytes, &options(mode.clone())).unwrap();
                let g = geometry(w, h, &mode).unwrap();
                assert_eq!((p.width, p.height), (g.width, g.height));
                assert_eq!(p.pixels.len(), (p.width * p.height * 3) as usize);
                assert_eq!(p.orig_size, (h, w));
                // Compare with resizing the undecoded pixels directly.
                let want =
                    resize::resize(&rgb, w, h, g.source, g.width, g.height, Filter::Lanczos3)
                        .unwrap();
                let q = psnr(&p.pixels, &want);
                assert!(q > 38.0, "{format} {mode:?}: {q:.1} dB");
            }
        }
    }

    #[test]
    fn large_jpeg_decodes_scaled_and_stays_faithful() {
        let (w, h) = (2048, 1536);
        let rgb = gradient(w, h);
        let jpg = encode(&rgb, w, h, "jpg", 95).unwrap();
        assert_eq!(decode_denom(1536.0, 1536.0, 128, 128), 4);
        assert_eq!(decode_denom(1536.0, 1536.0, 1024, 1024), 1);
        let p = preprocess_one(&jpg, &options(Mode::Crop { size: 128 })).unwrap();
        let g = geometry(w, h, &Mode::Crop { size: 128 }).unwrap();
        let want = resize::resize(&rgb, w, h, g.source, 128, 128, Filter::Lanczos3).unwrap();
        assert!(psnr(&p.pixels, &want) > 38.0);
    }

    #[test]
    fn parallel_batches_match_one_thread_whatever_the_input_sizes() {
        // sizes out of order, so largest-first scheduling reorders the work
        let encoded: Vec<Vec<u8>> = [(40, 24), (200, 120), (16, 16), (96, 160), (64, 64)]
            .iter()
            .map(|&(w, h)| encode(&gradient(w, h), w, h, "png", 90).unwrap())
            .collect();
        let inputs: Vec<Input> = encoded.iter().map(|b| Input::Bytes(b)).collect();
        let opts = options(Mode::Crop { size: 16 });
        let want: Vec<_> = preprocess_batch(&inputs, &opts, 1).unwrap();
        for workers in [2, 3, 8] {
            let got = preprocess_batch(&inputs, &opts, workers).unwrap();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                let (g, w) = (g.as_ref().unwrap(), w.as_ref().unwrap());
                assert_eq!((g.orig_size, &g.pixels), (w.orig_size, &w.pixels));
            }
        }
    }

    #[test]
    fn errors_never_panic_and_batches_keep_order() {
        let good = encode(&gradient(32, 32), 32, 32, "png", 90).unwrap();
        let truncated = &good[..good.len() / 2];
        let inputs = [
            Input::Bytes(&good),
            Input::Bytes(b""),
            Input::Bytes(truncated),
            Input::Path("/nonexistent/x.jpg".into()),
        ];
        let out = preprocess_batch(&inputs, &options(Mode::Crop { size: 16 }), 2).unwrap();
        assert!(out[0].is_ok());
        assert!(out[1].as_ref().unwrap_err().to_string().contains("empty"));
        assert!(out[2].is_err());
        assert!(out[3]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        let tight = Options {
            max_pixels: 1000,
            ..options(Mode::Crop { size: 16 })
        };
        let e = preprocess_one(&good, &tight).unwrap_err();
        assert_eq!(
            e.to_string(),
            "image too large: 32×32 (more than max_pixels=1000)"
        );
        assert_eq!(e.kind(), "too_large");
        assert_eq!(out[1].as_ref().unwrap_err().kind(), "unsupported_format");
        assert_eq!(out[2].as_ref().unwrap_err().kind(), "decode_error");
        assert_eq!(out[3].as_ref().unwrap_err().kind(), "unreadable");
    }

    #[test]
    fn huge_outputs_are_errors_before_any_allocation() {
        let good = encode(&gradient(32, 32), 32, 32, "png", 90).unwrap();
        let huge = options(Mode::Crop { size: 100_000 });
        // The batch refuses the option once, before decoding anything.
        let e = preprocess_batch(&[Input::Bytes(&good)], &huge, 1).unwrap_err();
        assert_eq!(e.kind(), "bad_option");
        assert!(
            e.to_string()
                .contains("size 100000 asks for 10000000000 output pixels"),
            "{e}"
        );
        // One image on its own gets a per-image verdict instead of a 30 GB allocation.
        let e = preprocess_one(&good, &huge).unwrap_err();
        assert_eq!(e.kind(), "too_large");
        assert!(
            e.to_string().starts_with("output too large: 100000×100000"),
            "{e}"
        );
        let buckets = options(Mode::Bucket {
            buckets: vec![(64, 64), (60_000, 60_000)],
        });
        assert_eq!(buckets.check().unwrap_err().kind(), "bad_option");
        // An allocation the machine cannot make is an error value, not an abort.
        let e = zeroed(usize::MAX, "a test").unwrap_err();
        assert_eq!(e.kind(), "too_large");
        assert_eq!(zeroed(12, "a test").unwrap(), vec![0u8; 12]);
    }
}
