//! Bytes to packed 8-bit RGB in the stored frame: format sniffing, header checks before any
//! pixel allocation, and one decoder per format (chosen by measurement, see the README).
//!
//! - JPEG: libjpeg-turbo (through `mozjpeg`, SIMD), with DCT-domain downscaling and decoding
//!   stopped after the last row the resize needs.
//! - PNG: the `png` crate. WebP: libwebp. GIF, BMP, TIFF: the `image` crate, first frame.

use std::io::Cursor;

use super::orient::{self, Orientation};
use crate::error::{Error, ImageKind, Result};

/// The container formats we recognise from their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
    Webp,
    Gif,
    Bmp,
    Tiff,
}

impl Format {
    #[must_use]
    pub fn sniff(data: &[u8]) -> Option<Format> {
        Some(match data {
            [0xFF, 0xD8, 0xFF, ..] => Format::Jpeg,
            [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, ..] => Format::Png,
            [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Format::Webp,
            [b'G', b'I', b'F', b'8', ..] => Format::Gif,
            [b'B', b'M', ..] => Format::Bmp,
            [b'I', b'I', 0x2A, 0x00, ..] | [b'M', b'M', 0x00, 0x2A, ..] => Format::Tiff,
            _ => return None,
        })
    }

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
            Format::Webp => "WebP",
            Format::Gif => "GIF",
            Format::Bmp => "BMP",
            Format::Tiff => "TIFF",
        }
    }
}

/// What the header says, before any pixel is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: Format,
    /// Stored (not oriented) size.
    pub width: u32,
    pub height: u32,
    pub orientation: Orientation,
}

/// What the caller wants decoded, decided from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Decode at 1/`denom` scale (1, 2, 4 or 8): JPEG in the DCT domain, opaque WebP with
    /// libwebp's rescaler; other formats decode whole.
    pub denom: u32,
    /// JPEG only: rows of the (scaled) image needed from the top; later rows are not decoded.
    pub rows: Option<u32>,
}

/// Packed RGB pixels in the stored frame, possibly downscaled and/or cut short at the bottom.
#[derive(Debug)]
pub struct Pixels {
    pub rgb: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// The size the whole image would have at this decode scale (`height` may be less).
    pub full_width: u32,
    pub full_height: u32,
}

fn err(format: Format, what: impl std::fmt::Display) -> Error {
    Error::image(
        ImageKind::DecodeError,
        format!("cannot decode {}: {what}", format.name()),
    )
}

/// Reads the header, lets `plan` check it and choose a [`Request`], then decodes.
///
/// # Errors
///
/// An `Error::Image` when the bytes are empty, not a known format or cannot be decoded, when
/// the image has more than `max_pixels` pixels, or the error `plan` returns.
pub fn decode(
    data: &[u8],
    max_pixels: u64,
    plan: impl FnOnce(&Header) -> Result<Request>,
) -> Result<(Header, Pixels)> {
    if data.is_empty() {
        return Err(Error::image(
            ImageKind::UnsupportedFormat,
            "empty input (0 bytes)",
        ));
    }
    let Some(format) = Format::sniff(data) else {
        return Err(Error::image(
            ImageKind::UnsupportedFormat,
            format!(
                "not an image: unrecognised format (first bytes {:02x?})",
                &data[..data.len().min(8)]
            ),
        ));
    };
    let check = |h: &Header| -> Result<()> {
        if h.width == 0 || h.height == 0 {
            return Err(err(
                h.format,
                format!("header says {}×{}", h.width, h.height),
            ));
        }
        if u64::from(h.width) * u64::from(h.height) > max_pixels {
            return Err(Error::image(
                ImageKind::TooLarge,
                format!(
                    "image too large: {}×{} (more than max_pixels={max_pixels})",
                    h.width, h.height
                ),
            ));
        }
        Ok(())
    };
    let plan = |h: &Header| -> Result<Request> {
        check(h)?;
        plan(h)
    };
    // PNG: the size sits at a fixed place in IHDR; refuse a giant before the decoder starts.
    if let (Format::Png, Some(ihdr)) = (format, data.get(12..24)) {
        if &ihdr[..4] == b"IHDR" {
            let w = u32::from_be_bytes([ihdr[4], ihdr[5], ihdr[6], ihdr[7]]);
            let h = u32::from_be_bytes([ihdr[8], ihdr[9], ihdr[10], ihdr[11]]);
            if w != 0 && h != 0 {
                check(&Header {
                    format,
                    width: w,
                    height: h,
                    orientation: Orientation::NORMAL,
                })?;
            }
        }
    }
    // Bytes a decoder may allocate: the pixels at 16 bits × 4 channels, plus slack.
    let max_alloc = max_pixels.saturating_mul(8).saturating_add(1 << 24);
    match format {
        Format::Jpeg => jpeg::decode(data, plan),
        Format::Png => decode_png(data, max_alloc, plan),
        Format::Webp => decode_webp(data, plan),
        Format::Gif | Format::Bmp | Format::Tiff => decode_other(data, format, max_alloc, plan),
    }
}

/// Packs 1–4 channel 8- or 16-bit samples as RGB8, alpha composited over white.
fn to_rgb8(buf: &[u8], channels: usize, sixteen: bool, pixels: usize) -> Vec<u8> {
    let sample = |px: &[u8], c: usize| -> u32 {
        if sixteen {
            // round(v / 257): 16-bit scaled to 8-bit
            (u32::from(u16::from_be_bytes([px[2 * c], px[2 * c + 1]])) + 128) / 257
        } else {
            u32::from(px[c])
        }
    };
    let over_white = |c: u32, a: u32| ((c * a + 255 * (255 - a) + 127) / 255) as u8;
    let step = channels * if sixteen { 2 } else { 1 };
    let mut out = Vec::with_capacity(pixels * 3);
    for px in buf.chunks_exact(step).take(pixels) {
        let rgb = match channels {
            1 => {
                let g = sample(px, 0) as u8;
                [g, g, g]
            }
            2 => {
                let g = over_white(sample(px, 0), sample(px, 1));
                [g, g, g]
            }
            3 => [
                sample(px, 0) as u8,
                sample(px, 1) as u8,
                sample(px, 2) as u8,
            ],
            _ => {
                let a = sample(px, 3);
                [
                    over_white(sample(px, 0), a),
                    over_white(sample(px, 1), a),
                    over_white(sample(px, 2), a),
                ]
            }
        };
        out.extend_from_slice(&rgb);
    }
    out
}

fn whole(rgb: Vec<u8>, width: u32, height: u32) -> Pixels {
    Pixels {
        rgb,
        width,
        height,
        full_width: width,
        full_height: height,
    }
}

fn decode_png(
    data: &[u8],
    max_alloc: u64,
    plan: impl FnOnce(&Header) -> Result<Request>,
) -> Result<(Header, Pixels)> {
    let e = |what: png::DecodingError| err(Format::Png, what);
    let limits = png::Limits {
        bytes: usize::try_from(max_alloc).unwrap_or(usize::MAX),
    };
    let mut decoder = png::Decoder::new_with_limits(Cursor::new(data), limits);
    decoder.set_transformations(png::Transformations::EXPAND);
    decoder.set_ignore_text_chunk(true);
    let mut reader = decoder.read_info().map_err(e)?;
    let info = reader.info();
    let header = Header {
        format: Format::Png,
        width: info.width,
        height: info.height,
        orientation: info
            .exif_metadata
            .as_deref()
            .map_or(Orientation::NORMAL, orient::from_exif),
    };
    plan(&header)?;
    let size = reader.output_buffer_size().ok_or_else(|| {
        Error::image(
            ImageKind::TooLarge,
            "cannot decode png: image too large for this machine",
        )
    })?;
    let mut buf = super::zeroed(size, "the decoded png")?;
    let frame = reader.next_frame(&mut buf).map_err(e)?;
    let pixels = frame.width as usize * frame.height as usize;
    let sixteen = frame.bit_depth == png::BitDepth::Sixteen;
    let channels = frame.color_type.samples();
    let rgb = if channels == 3 && !sixteen {
        buf.truncate(pixels * 3);
        buf
    } else {
        to_rgb8(&buf, channels, sixteen, pixels)
    };
    Ok((header, whole(rgb, frame.width, frame.height)))
}

/// The payload of the first RIFF chunk named `fourcc` in a WebP file.
fn webp_chunk(data: &[u8], fourcc: [u8; 4]) -> Option<&[u8]> {
    let mut i = 12usize;
    while let Some(head) = data.get(i..i + 8) {
        let len = u32::from_le_bytes(head[4..8].try_into().ok()?) as usize;
        let body = data.get(i + 8..(i + 8).checked_add(len)?)?;
        if head[..4] == fourcc {
            return Some(body);
        }
        i = i + 8 + len + (len & 1);
    }
    None
}

fn decode_webp(
    data: &[u8],
    plan: impl FnOnce(&Header) -> Result<Request>,
) -> Result<(Header, Pixels)> {
    use libwebp_sys as w;
    let mut features = std::mem::MaybeUninit::<w::WebPBitstreamFeatures>::zeroed();
    // SAFETY: libwebp reads at most `data.len()` bytes and fills `features`.
    let status = unsafe { w::WebPGetFeatures(data.as_ptr(), data.len(), features.as_mut_ptr()) };
    if status != w::VP8StatusCode::VP8_STATUS_OK {
        return Err(err(
            Format::Webp,
            format!("bad or truncated header ({status:?})"),
        ));
    }
    // SAFETY: initialised by the successful call above.
    let features = unsafe { features.assume_init() };
    if features.has_animation != 0 {
        return Err(err(Format::Webp, "animated WebP is not supported"));
    }
    let header = Header {
        format: Format::Webp,
        width: features.width as u32,
        height: features.height as u32,
        orientation: webp_chunk(data, *b"EXIF").map_or(Orientation::NORMAL, orient::from_exif),
    };
    let request = plan(&header)?;
    if request.denom > 1 && features.has_alpha == 0 {
        return decode_webp_scaled(data, header, request.denom);
    }
    let (wd, ht) = (header.width as usize, header.height as usize);
    let channels = if features.has_alpha != 0 { 4 } else { 3 };
    let mut buf = super::zeroed(wd * ht * channels, "the decoded webp")?;
    let stride = (wd * channels) as i32;
    // SAFETY: `buf` holds exactly height × stride bytes, which libwebp checks against.
    let out = unsafe {
        if channels == 4 {
            w::WebPDecodeRGBAInto(
                data.as_ptr(),
                data.len(),
                buf.as_mut_ptr(),
                buf.len(),
                stride,
            )
        } else {
            w::WebPDecodeRGBInto(
                data.as_ptr(),
                data.len(),
                buf.as_mut_ptr(),
                buf.len(),
                stride,
            )
        }
    };
    if out.is_null() {
        return Err(err(Format::Webp, "corrupt or truncated data"));
    }
    let rgb = if channels == 4 {
        to_rgb8(&buf, 4, false, wd * ht)
    } else {
        buf
    };
    Ok((header, whole(rgb, header.width, header.height)))
}

/// An opaque WebP decoded at 1/`denom` size by libwebp's own area-averaging rescaler, which
/// works on the decoded rows as they come: no full-size RGB image is ever made. (With alpha the
/// rescaler would average colour and alpha apart, so those decode whole and are composited first.)
fn decode_webp_scaled(data: &[u8], header: Header, denom: u32) -> Result<(Header, Pixels)> {
    use libwebp_sys as w;
    let width = header.width.div_ceil(denom);
    let height = header.height.div_ceil(denom);
    let stride = width as usize * 3;
    let mut buf = super::zeroed(stride * height as usize, "the decoded webp")?;
    let mut config = std::mem::MaybeUninit::<w::WebPDecoderConfig>::zeroed();
    // SAFETY: initialises the zeroed config for this libwebp's ABI version.
    if !unsafe { w::WebPInitDecoderConfig(config.as_mut_ptr()) } {
        return Err(err(
            Format::Webp,
            "libwebp's decoder version does not match",
        ));
    }
    // SAFETY: initialised by the successful call above.
    let mut config = unsafe { config.assume_init() };
    config.options.use_scaling = 1;
    config.options.scaled_width = width as i32;
    config.options.scaled_height = height as i32;
    config.output.colorspace = w::WEBP_CSP_MODE::MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA = w::WebPRGBABuffer {
        rgba: buf.as_mut_ptr(),
        stride: stride as i32,
        size: buf.len(),
    };
    // SAFETY: libwebp reads at most `data.len()` bytes and writes into `buf` only, whose size
    // and stride it was given; with external memory it allocates no output to free.
    let status = unsafe { w::WebPDecode(data.as_ptr(), data.len(), &raw mut config) };
    if status != w::VP8StatusCode::VP8_STATUS_OK {
        return Err(err(
            Format::Webp,
            format!("corrupt or truncated data ({status:?})"),
        ));
    }
    Ok((header, whole(buf, width, height)))
}

fn decode_other(
    data: &[u8],
    format: Format,
    max_alloc: u64,
    plan: impl FnOnce(&Header) -> Result<Request>,
) -> Result<(Header, Pixels)> {
    use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};
    let e = |what: image::ImageError| err(format, what);
    let mut reader = ImageReader::new(Cursor::new(data));
    reader.set_format(match format {
        Format::Gif => ImageFormat::Gif,
        Format::Bmp => ImageFormat::Bmp,
        _ => ImageFormat::Tiff,
    });
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_alloc);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(e)?;
    let (width, height) = decoder.dimensions();
    let orientation = decoder.orientation().map_or(Orientation::NORMAL, |o| {
        Orientation::from_tag(u32::from(o.to_exif()))
    });
    let header = Header {
        format,
        width,
        height,
        orientation,
    };
    plan(&header)?;
    let image = DynamicImage::from_decoder(decoder).map_err(e)?;
    let (width, height) = (image.width(), image.height());
    let rgb = if image.color().has_alpha() {
        let rgba = image.into_rgba8();
        to_rgb8(rgba.as_raw(), 4, false, (width * height) as usize)
    } else {
        image.into_rgb8().into_raw()
    };
    Ok((header, whole(rgb, width, height)))
}

mod jpeg {
    use super::{err, orient, Format, Header, Orientation, Pixels, Request, Result};
    use mozjpeg::{ColorSpace, Decompress};
    use mozjpeg_sys as ffi;
    use std::os::raw::c_int;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// Reads the frame size and the EXIF orientation by walking the marker segments up to the
    /// first scan; bounded by the data, allocates nothing.
    pub(super) fn header(data: &[u8]) -> Result<Header> {
        let mut i = 2usize;
        let mut size = None;
        let mut orientation = Orientation::NORMAL;
        let mut seen_exif = false;
        loop {
            // Skip to the next marker (0xFF followed by a non-0xFF, non-zero byte).
            while data.get(i) == Some(&0xFF) && data.get(i + 1) == Some(&0xFF) {
                i += 1;
            }
            let (Some(&0xFF), Some(&marker)) = (data.get(i), data.get(i + 1)) else {
                break;
            };
            if marker == 0xD8 || marker == 0x01 || (0xD0..=0xD7).contains(&marker) {
                i += 2;
                continue;
            }
            if marker == 0xDA || marker == 0xD9 {
                break;
            }
            let Some(len) = data.get(i + 2..i + 4) else {
                break;
            };
            let len = u16::from_be_bytes([len[0], len[1]]) as usize;
            let body = data
                .get(i + 4..(i + 2 + len).min(data.len()))
                .unwrap_or(&[]);
            let is_sof = (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker);
            if is_sof && body.len() >= 5 && size.is_none() {
                let h = u32::from(u16::from_be_bytes([body[1], body[2]]));
                let w = u32::from(u16::from_be_bytes([body[3], body[4]]));
                size = Some((w, h));
            }
            if marker == 0xE1 && !seen_exif && body.starts_with(b"Exif\0\0") {
                seen_exif = true;
                orientation = orient::from_exif(body);
            }
            if len < 2 {
                break;
            }
            i += 2 + len;
        }
        let (width, height) =
            size.ok_or_else(|| err(Format::Jpeg, "no frame header (truncated or corrupt)"))?;
        Ok(Header {
            format: Format::Jpeg,
            width,
            height,
            orientation,
        })
    }

    fn message(cinfo: &mut ffi::jpeg_common_struct) -> String {
        // SAFETY: `err` is the error manager libjpeg is calling us from; the buffer is the
        // 80 bytes (JMSG_LENGTH_MAX) that format_message writes into.
        unsafe {
            let err = &*cinfo.err;
            match err.format_message {
                Some(f) => {
                    let buffer = [0u8; 80];
                    f(cinfo, &buffer);
                    let end = buffer.iter().position(|&c| c == 0).unwrap_or(80);
                    String::from_utf8_lossy(&buffer[..end]).into_owned()
                }
                None => format!("libjpeg error {}", err.msg_code),
            }
        }
    }

    struct Fatal(String);

    extern "C-unwind" fn error_exit(cinfo: &mut ffi::jpeg_common_struct) {
        let m = message(cinfo);
        std::panic::resume_unwind(Box::new(Fatal(m)));
    }

    extern "C-unwind" fn emit_message(cinfo: &mut ffi::jpeg_common_struct, level: c_int) {
        // SAFETY: as above.
        let code = unsafe { (*cinfo.err).msg_code };
        // A premature end of data is a truncated file: an error, not a grey bottom.
        if level < 0 && code == ffi::JWRN_JPEG_EOF as c_int {
            std::panic::resume_unwind(Box::new(Fatal("truncated data".into())));
        }
    }

    fn error_mgr() -> ffi::jpeg_error_mgr {
        // SAFETY: jpeg_std_error fills every field of a zeroed manager.
        unsafe {
            let mut e: ffi::jpeg_error_mgr = std::mem::zeroed();
            ffi::jpeg_std_error(&mut e);
            e.error_exit = Some(error_exit);
            e.emit_message = Some(emit_message);
            e
        }
    }

    pub(super) fn decode(
        data: &[u8],
        plan: impl FnOnce(&Header) -> Result<Request>,
    ) -> Result<(Header, Pixels)> {
        let header = header(data)?;
        let request = plan(&header)?;
        let run = || -> std::io::Result<Pixels> {
            let mut d = Decompress::builder().with_err(error_mgr()).from_mem(data)?;
            let (w, h) = d.size();
            if (w as u32, h as u32) != (header.width, header.height) {
                return Err(std::io::Error::other("frame header changed size"));
            }
            d.scale((8 / request.denom.clamp(1, 8)) as u8);
            let cmyk = matches!(d.color_space(), ColorSpace::JCS_CMYK | ColorSpace::JCS_YCCK);
            let mut s = if cmyk {
                d.to_colorspace(ColorSpace::JCS_CMYK)?
            } else {
                d.rgb()?
            };
            let (fw, fh) = (s.width(), s.height());
            let rows = request.rows.map_or(fh, |r| (r as usize).clamp(1, fh));
            let channels = if cmyk { 4 } else { 3 };
            let mut buf = crate::image::zeroed(fw * rows * channels, "the decoded jpeg")
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            s.read_scanlines_into(&mut buf)?;
            if rows == fh {
                s.finish()?;
            } // else: dropping the decoder abandons the rows nobody needs
            if cmyk {
                // Adobe CMYK is stored inverted (as Pillow's "CMYK;I" assumes): R = C'·K'/255.
                buf = buf
                    .chunks_exact(4)
                    .flat_map(|p| {
                        let k = u32::from(p[3]);
                        [0, 1, 2].map(|c| ((u32::from(p[c]) * k + 127) / 255) as u8)
                    })
                    .collect();
            }
            Ok(Pixels {
                rgb: buf,
                width: fw as u32,
                height: rows as u32,
                full_width: fw as u32,
                full_height: fh as u32,
            })
        };
        match catch_unwind(AssertUnwindSafe(run)) {
            Ok(Ok(p)) => Ok((header, p)),
            Ok(Err(e)) => Err(err(Format::Jpeg, e)),
            Err(payload) => {
                let m = if let Some(Fatal(m)) = payload.downcast_ref::<Fatal>() {
                    m.clone()
                } else if let Some(m) = payload.downcast_ref::<String>() {
                    m.clone()
                } else {
                    "corrupt data".to_string()
                };
                Err(err(Format::Jpeg, m))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[expect(
        clippy::unnecessary_wraps,
        reason = "a plan returns a Result: the real ones may refuse the header"
    )]
    fn any(_: &Header) -> Result<Request> {
        Ok(Request {
            denom: 1,
            rows: None,
        })
    }

    #[test]
    fn bad_inputs_are_errors() {
        for data in [
            &b""[..],
            b"hello world",
            b"\xFF\xD8\xFF",
            b"\xFF\xD8\xFF\xE0\x00\x10JFIF",
            b"\x89PNG\r\n\x1a\n\0\0",
            b"RIFF\0\0\0\0WEBPVP8 ",
            b"GIF89a",
            b"BM",
            b"II*\0",
        ] {
            assert!(decode(data, 1 << 30, any).is_err(), "{data:?}");
        }
    }

    #[test]
    fn lying_jpeg_header_is_refused_before_allocating() {
        // SOF0 claiming 65535×65535 followed by nothing.
        let mut data = vec![0xFF, 0xD8, 0xFF, 0xC0, 0, 17, 8, 0xFF, 0xFF, 0xFF, 0xFF, 3];
        data.extend([1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        let e = decode(&data, 178_956_970, any).unwrap_err().to_string();
        assert!(e.contains("image too large: 65535×65535"), "{e}");
    }

    #[test]
    fn sixteen_bit_and_alpha_pack_to_rgb8() {
        // 16-bit gray 0xFFFF, then 16-bit gray+alpha (0, alpha 0) → white
        assert_eq!(to_rgb8(&[0xFF, 0xFF], 1, true, 1), vec![255, 255, 255]);
        assert_eq!(to_rgb8(&[0, 0, 0, 0], 2, true, 1), vec![255, 255, 255]);
        assert_eq!(to_rgb8(&[10, 20, 30, 255], 4, false, 1), vec![10, 20, 30]);
        assert_eq!(to_rgb8(&[0, 0, 0, 128], 4, false, 1), vec![127, 127, 127]);
    }
}
