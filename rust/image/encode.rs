//! Packed RGB8 to JPEG (libjpeg-turbo defaults, 4:2:0, baseline), PNG or lossy WebP (libwebp).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, ImageKind, Result};

/// Encodes `rgb` (`width`×`height`, packed RGB8) as "jpg"/"jpeg", "png" or "webp".
///
/// # Errors
///
/// An `Error::Image` when `rgb` is not `width`×`height` RGB, `quality` is outside 1..=100,
/// `format` is unknown, or the encoder fails.
pub fn encode(rgb: &[u8], width: u32, height: u32, format: &str, quality: u8) -> Result<Vec<u8>> {
    let e = |what: String| {
        Error::image(
            ImageKind::EncodeError,
            format!("cannot encode {format}: {what}"),
        )
    };
    if width == 0 || height == 0 || rgb.len() != width as usize * height as usize * 3 {
        return Err(e(format!(
            "expected {width}×{height}×3 bytes of RGB, got {}",
            rgb.len()
        )));
    }
    if !(1..=100).contains(&quality) {
        return Err(Error::image(
            ImageKind::BadOption,
            format!("cannot encode {format}: quality must be 1..100, got {quality}"),
        ));
    }
    match format {
        "jpg" | "jpeg" => {
            if width > 65_500 || height > 65_500 {
                return Err(e("JPEG sides are limited to 65500".into()));
            }
            let run = || -> std::io::Result<Vec<u8>> {
                let mut c = mozjpeg::Compress::new(mozjpeg::ColorSpace::JCS_RGB);
                c.set_fastest_defaults();
                c.set_size(width as usize, height as usize);
                c.set_quality(f32::from(quality));
                let mut s = c.start_compress(Vec::new())?;
                s.write_scanlines(rgb)?;
                s.finish()
            };
            match catch_unwind(AssertUnwindSafe(run)) {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(x)) => Err(e(x.to_string())),
                Err(_) => Err(e("libjpeg failed".into())),
            }
        }
        "png" => {
            let mut out = Vec::new();
            let mut enc = png::Encoder::new(&mut out, width, height);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            enc.set_compression(png::Compression::Fast);
            let mut w = enc.write_header().map_err(|x| e(x.to_string()))?;
            w.write_image_data(rgb).map_err(|x| e(x.to_string()))?;
            w.finish().map_err(|x| e(x.to_string()))?;
            Ok(out)
        }
        "webp" => {
            if width > 16383 || height > 16383 {
                return Err(e("WebP sides are limited to 16383".into()));
            }
            let mut ptr: *mut u8 = std::ptr::null_mut();
            // SAFETY: `rgb` holds height rows of width×3 bytes (checked above); libwebp
            // allocates the output, which we copy and free.
            unsafe {
                let n = libwebp_sys::WebPEncodeRGB(
                    rgb.as_ptr(),
                    width as i32,
                    height as i32,
                    width as i32 * 3,
                    f32::from(quality),
                    &raw mut ptr,
                );
                if ptr.is_null() || n == 0 {
                    return Err(e("libwebp failed".into()));
                }
                let v = std::slice::from_raw_parts(ptr, n).to_vec();
                libwebp_sys::WebPFree(ptr.cast());
                Ok(v)
            }
        }
        other => Err(Error::image(
            ImageKind::BadOption,
            format!("unknown image format {other:?}; use jpg, png or webp"),
        )),
    }
}
