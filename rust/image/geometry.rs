//! Where each resize mode samples from and what size it produces.
//!
//! Every mode is a source box in the oriented image (fractional coordinates allowed) resampled
//! to a target size, so no pixel is decoded and resized only to be thrown away, and the Python
//! side (`shardcook.imaging.geometry`) gets exactly the same numbers from this one function.

use crate::error::{Error, ImageKind, Result};

/// How an image of any shape becomes a training-size image.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// The centred square of side min(w, h), to size×size.
    Crop { size: u32 },
    /// The whole image to size×size (the aspect ratio is not kept).
    Stretch { size: u32 },
    /// Scale so the longer side is at most `max_size`, sides floored to multiples of 16.
    Variable { max_size: u32 },
    /// The bucket (width, height) nearest in log aspect ratio, filled and centre-cropped.
    Bucket { buckets: Vec<(u32, u32)> },
}

/// A fractional rectangle in source pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceBox {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
}

/// What a mode does to one image: the target size, the box it samples and the crop offset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    pub width: u32,
    pub height: u32,
    pub source: SourceBox,
    /// The box's (top, left) scaled into target coordinates (SDXL-style crop conditioning).
    pub crop: (u32, u32),
}

impl Mode {
    /// Parses a mode name with its parameters; `buckets` of None means the default set.
    ///
    /// # Errors
    ///
    /// An `Error::Image` of kind `BadOption` for an unknown name or a size the mode cannot use.
    pub fn from_name(
        name: &str,
        size: u32,
        max_size: u32,
        buckets: Option<Vec<(u32, u32)>>,
    ) -> Result<Mode> {
        let bad = |m: String| Err(Error::image(ImageKind::BadOption, m));
        match name {
            "crop" | "stretch" if size == 0 => bad(format!("size must be at least 1, got {size}")),
            "crop" => Ok(Mode::Crop { size }),
            "stretch" => Ok(Mode::Stretch { size }),
            "variable" if max_size < 16 => bad(format!(
                "max_size must be at least 16 for mode 'variable', got {max_size}"
            )),
            "variable" => Ok(Mode::Variable { max_size }),
            "bucket" => {
                let buckets = match buckets {
                    Some(b) => b,
                    None if size == 0 => return bad("size must be at least 1".into()),
                    None => default_buckets(size),
                };
                if buckets.is_empty() {
                    return bad("buckets is empty; give at least one (width, height)".into());
                }
                if let Some(b) = buckets.iter().find(|(w, h)| *w == 0 || *h == 0) {
                    return bad(format!("bucket {}x{} has a zero side", b.0, b.1));
                }
                Ok(Mode::Bucket { buckets })
            }
            other => bad(format!(
                "unknown resize mode {other:?}; use one of crop, stretch, variable, bucket"
            )),
        }
    }
}

/// The built-in buckets for `size`: sides multiples of 64, area close to size², aspect ≤ 2.
///
/// For every width w = 64k (k ≥ 1) up to 2·size, h = the multiple of 64 nearest size²/w (at
/// least 64); pairs with h ≤ w and w/h ≤ 2 are kept together with their transposes. Sorted by
/// aspect ratio (tallest first).
#[must_use]
pub fn default_buckets(size: u32) -> Vec<(u32, u32)> {
    let area = f64::from(size) * f64::from(size);
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut w = 64u32;
    while w <= size.max(64).saturating_mul(2) {
        let h = ((area / f64::from(w) / 64.0).round() as u32).max(1) * 64;
        if h <= w && w <= 2 * h {
            for b in [(w, h), (h, w)] {
                if !out.contains(&b) {
                    out.push(b);
                }
            }
        }
        w += 64;
    }
    if out.is_empty() {
        out.push((64, 64));
    }
    out.sort_by(|a, b| {
        (f64::from(a.0) / f64::from(a.1)).total_cmp(&(f64::from(b.0) / f64::from(b.1)))
    });
    out
}

/// The geometry of `mode` for an oriented image of `w`×`h` pixels.
///
/// # Errors
///
/// An `Error::Image` when the image has no pixels or is too small for the mode.
///
/// # Panics
///
/// For a `Mode::Bucket` without buckets, which [`Mode::from_name`] never makes.
pub fn geometry(w: u32, h: u32, mode: &Mode) -> Result<Geometry> {
    if w == 0 || h == 0 {
        return Err(Error::image(
            ImageKind::BadOption,
            format!("image has no pixels: {w}×{h}"),
        ));
    }
    let (wf, hf) = (f64::from(w), f64::from(h));
    let centred = |bw: f64, bh: f64| SourceBox {
        left: ((wf - bw) / 2.0).max(0.0),
        top: ((hf - bh) / 2.0).max(0.0),
        width: bw.min(wf),
        height: bh.min(hf),
    };
    let (tw, th, source) = match mode {
        Mode::Crop { size } => {
            let side = f64::from(w.min(h));
            (*size, *size, centred(side, side))
        }
        Mode::Stretch { size } => (*size, *size, centred(wf, hf)),
        Mode::Variable { max_size } => {
            let m = u64::from(w.max(h));
            let max_size = u64::from(*max_size);
            // floor(w·s/16)·16 with s = min(1, max_size/m), in exact integer arithmetic.
            let (tw, th, s) = if m <= max_size {
                (u64::from(w) / 16 * 16, u64::from(h) / 16 * 16, 1.0)
            } else {
                (
                    u64::from(w) * max_size / m / 16 * 16,
                    u64::from(h) * max_size / m / 16 * 16,
                    max_size as f64 / m as f64,
                )
            };
            if tw == 0 || th == 0 {
                return Err(Error::image(
                    ImageKind::TooSmall,
                    format!("image too small for mode 'variable': {w}×{h} leaves no 16×16 block"),
                ));
            }
            (tw as u32, th as u32, centred(tw as f64 / s, th as f64 / s))
        }
        Mode::Bucket { buckets } => {
            let aspect = (wf / hf).ln();
            let (bw, bh) = *buckets
                .iter()
                .min_by(|a, b| {
                    let da = ((f64::from(a.0) / f64::from(a.1)).ln() - aspect).abs();
                    let db = ((f64::from(b.0) / f64::from(b.1)).ln() - aspect).abs();
                    da.total_cmp(&db)
                })
                .expect("buckets checked non-empty");
            let s = (f64::from(bw) / wf).max(f64::from(bh) / hf);
            (bw, bh, centred(f64::from(bw) / s, f64::from(bh) / s))
        }
    };
    let crop = (
        (source.top * f64::from(th) / source.height).round() as u32,
        (source.left * f64::from(tw) / source.width).round() as u32,
    );
    Ok(Geometry {
        width: tw,
        height: th,
        source,
        crop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inside(g: &Geometry, w: u32, h: u32) -> bool {
        let s = g.source;
        s.left >= 0.0
            && s.top >= 0.0
            && s.left + s.width <= f64::from(w) + 1e-9
            && s.top + s.height <= f64::from(h) + 1e-9
    }

    #[test]
    fn crop_takes_the_centred_square() {
        let g = geometry(400, 300, &Mode::Crop { size: 256 }).unwrap();
        assert_eq!((g.width, g.height), (256, 256));
        assert_eq!(
            g.source,
            SourceBox {
                left: 50.0,
                top: 0.0,
                width: 300.0,
                height: 300.0
            }
        );
        assert_eq!(g.crop, (0, 43)); // 50 * 256 / 300 = 42.67
    }

    #[test]
    fn variable_never_upscales_and_floors_to_16() {
        let g = geometry(1000, 700, &Mode::Variable { max_size: 1024 }).unwrap();
        assert_eq!((g.width, g.height), (992, 688));
        let centred = SourceBox {
            left: 4.0,
            top: 6.0,
            width: 992.0,
            height: 688.0,
        };
        assert_eq!(g.source, centred);
        let g = geometry(3000, 2000, &Mode::Variable { max_size: 1024 }).unwrap();
        assert_eq!((g.width, g.height), (1024, 672));
        assert!(inside(&g, 3000, 2000));
        assert!(geometry(10, 500, &Mode::Variable { max_size: 1024 }).is_err());
    }

    #[test]
    fn bucket_picks_nearest_aspect() {
        let buckets = default_buckets(1024);
        assert!(buckets.contains(&(1024, 1024)));
        assert!(buckets.contains(&(1216, 832)) && buckets.contains(&(832, 1216)));
        for (w, h) in &buckets {
            assert!(w % 64 == 0 && h % 64 == 0);
            let area = f64::from(*w * *h) / (1024.0 * 1024.0);
            assert!((0.85..1.15).contains(&area), "{w}x{h}");
        }
        let g = geometry(3000, 2000, &Mode::Bucket { buckets }).unwrap();
        assert_eq!((g.width, g.height), (1280, 832)); // 1.538 is nearer 1.5 than 1.462
        assert!(inside(&g, 3000, 2000));
    }

    #[test]
    fn bad_options_are_errors() {
        assert!(Mode::from_name("zoom", 256, 1024, None).is_err());
        assert!(Mode::from_name("bucket", 256, 1024, Some(vec![])).is_err());
        assert!(Mode::from_name("crop", 0, 1024, None).is_err());
        assert!(geometry(0, 10, &Mode::Crop { size: 8 }).is_err());
    }
}
