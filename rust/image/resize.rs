//! Resampling a fractional source box to the target size (`fast_image_resize`: SIMD
//! convolution with Pillow's kernels and Pillow's box semantics).

use std::cell::RefCell;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::geometry::SourceBox;
use crate::error::{Error, ImageKind, Result};

/// The resampling filter, named as in the Python API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    Nearest,
    Box,
    Bilinear,
    Hamming,
    Bicubic,
    Mitchell,
    Lanczos3,
}

impl Filter {
    /// The filter of a name Python passes (`lanczos` is `lanczos3`).
    ///
    /// # Errors
    ///
    /// An `Error::Image` of kind `BadOption` for an unknown name.
    pub fn from_name(name: &str) -> Result<Filter> {
        Ok(match name {
            "nearest" => Filter::Nearest,
            "box" => Filter::Box,
            "bilinear" => Filter::Bilinear,
            "hamming" => Filter::Hamming,
            "bicubic" => Filter::Bicubic,
            "mitchell" => Filter::Mitchell,
            "lanczos3" | "lanczos" => Filter::Lanczos3,
            other => {
                return Err(Error::image(
                    ImageKind::BadOption,
                    format!(
                        "unknown filter {other:?}; use one of nearest, box, bilinear, hamming, \
                     bicubic, mitchell, lanczos3"
                    ),
                ))
            }
        })
    }

    /// Half-width of the kernel in source pixels at unit scale.
    #[must_use]
    pub fn support(self) -> f64 {
        match self {
            Filter::Nearest | Filter::Box => 0.5,
            Filter::Bilinear | Filter::Hamming => 1.0,
            Filter::Bicubic | Filter::Mitchell => 2.0,
            Filter::Lanczos3 => 3.0,
        }
    }

    fn alg(self) -> ResizeAlg {
        let f = match self {
            Filter::Nearest => return ResizeAlg::Nearest,
            Filter::Box => FilterType::Box,
            Filter::Bilinear => FilterType::Bilinear,
            Filter::Hamming => FilterType::Hamming,
            Filter::Bicubic => FilterType::CatmullRom,
            Filter::Mitchell => FilterType::Mitchell,
            Filter::Lanczos3 => FilterType::Lanczos3,
        };
        ResizeAlg::Convolution(f)
    }
}

thread_local! {
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// Resamples `source` of the packed RGB image `rgb` (`width`×`height`) to `tw`×`th`.
///
/// # Errors
///
/// An `Error::Image` when the buffers do not match the sizes or the output cannot be allocated.
pub fn resize(
    rgb: &[u8],
    width: u32,
    height: u32,
    source: SourceBox,
    tw: u32,
    th: u32,
    filter: Filter,
) -> Result<Vec<u8>> {
    let e = |what: String| Error::image(ImageKind::EncodeError, format!("cannot resize: {what}"));
    let src = ImageRef::new(width, height, rgb, PixelType::U8x3).map_err(|x| e(x.to_string()))?;
    let buffer = super::zeroed(tw as usize * th as usize * 3, "the resized image")?;
    let mut dst =
        Image::from_vec_u8(tw, th, buffer, PixelType::U8x3).map_err(|x| e(x.to_string()))?;
    // Clamp the box to the image (it may overshoot by rounding after a scaled decode).
    let left = source.left.clamp(0.0, f64::from(width));
    let top = source.top.clamp(0.0, f64::from(height));
    let bw = source
        .width
        .min(f64::from(width) - left)
        .max(f64::MIN_POSITIVE);
    let bh = source
        .height
        .min(f64::from(height) - top)
        .max(f64::MIN_POSITIVE);
    let options = ResizeOptions::new()
        .resize_alg(filter.alg())
        .crop(left, top, bw, bh);
    RESIZER
        .with(|r| r.borrow_mut().resize(&src, &mut dst, &options))
        .map_err(|x| e(x.to_string()))?;
    Ok(dst.into_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_colour_stays_flat_and_box_is_respected() {
        // Left half red, right half blue; resizing the right half gives pure blue.
        let (w, h) = (64u32, 32u32);
        let rgb: Vec<u8> = (0..w * h)
            .flat_map(|i| if i % w < 32 { [255, 0, 0] } else { [0, 0, 255] })
            .collect();
        let b = SourceBox {
            left: 40.0,
            top: 0.0,
            width: 24.0,
            height: 32.0,
        };
        let out = resize(&rgb, w, h, b, 8, 8, Filter::Lanczos3).unwrap();
        assert!(out.chunks(3).all(|p| p == [0, 0, 255]), "{out:?}");
        assert!(Filter::from_name("sinc").is_err());
    }
}
