//! What Pillow's `Image.open` reports of a JPEG, PNG or WebP file (width, height, format and
//! mode), read from the header alone, for Energon's media metadata.
//!
//! Each parser follows the Pillow plugin's `_open` on the files it is sure of, and answers None
//! for anything else (a marker or chunk Pillow treats specially, a multi-picture JPEG, an
//! animated WebP, a 16-bit grey PNG whose mode differs between Pillow versions, any damage): the
//! caller then asks Pillow itself, so an answer given here is always Pillow's.

/// Pillow's four facts of one image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PillowHeader {
    pub width: u32,
    pub height: u32,
    pub format: &'static str,
    pub mode: &'static str,
}

/// Pillow's facts of the image `data`, when its header settles them; None: ask Pillow.
#[must_use]
pub fn pillow_header(data: &[u8]) -> Option<PillowHeader> {
    if data.starts_with(b"\xff\xd8\xff") {
        jpeg(data)
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        png(data)
    } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        webp(data)
    } else {
        None
    }
}

fn be16(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(
        data.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn le16(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(
        data.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn le24(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at + 3)?;
    Some(u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16)
}

fn header(
    width: u32,
    height: u32,
    format: &'static str,
    mode: &'static str,
) -> Option<PillowHeader> {
    (width > 0 && height > 0).then_some(PillowHeader {
        width,
        height,
        format,
        mode,
    })
}

/// `JpegImagePlugin`: the segments up to the start of scan, one 8-bit frame of 1, 3 or 4
/// components (L, RGB, CMYK). An MPF APP2 segment (Pillow may open the file as MPO) and any
/// marker outside the usual header segments answer None.
fn jpeg(data: &[u8]) -> Option<PillowHeader> {
    let mut at = 2;
    let mut frame: Option<(u32, u32, &'static str)> = None;
    loop {
        if *data.get(at)? != 0xff {
            return None;
        }
        let marker = *data.get(at + 1)?;
        if marker == 0xff {
            at += 1; // a fill byte
            continue;
        }
        let length = be16(data, at + 2)? as usize;
        let body = data.get(at + 4..at + 2 + length)?;
        if marker == 0xda {
            // Pillow reads the start-of-scan segment whole before it stops
            let (width, height, mode) = frame?;
            return header(width, height, "JPEG", mode);
        }
        match marker {
            0xc0..=0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf => {
                // Pillow reads each component as 3 bytes and refuses other precisions
                if frame.is_some() || body.len() < 6 || (body.len() - 6) % 3 != 0 || body[0] != 8 {
                    return None;
                }
                let mode = match body[5] {
                    1 => "L",
                    3 => "RGB",
                    4 => "CMYK",
                    _ => return None,
                };
                frame = Some((be16(body, 3)?, be16(body, 1)?, mode));
            }
            0xe2 if body.starts_with(b"MPF\0") => return None,
            // the segments Pillow's APP handler reads fields of, too short for them
            0xe0 if body.starts_with(b"JFIF") && body.len() < 7 => return None,
            0xee if body.starts_with(b"Adobe") && body.len() < 7 => return None,
            0xe2 if body.starts_with(b"ICC_PROFILE\0") && body.len() < 14 => return None,
            0xdb if !quantization_tables(body) => return None,
            0xe0..=0xef | 0xc4 | 0xcc | 0xdb | 0xdd | 0xfe => {}
            _ => return None,
        }
        at += 2 + length;
    }
}

/// Whether a DQT segment's tables are whole, as Pillow's DQT handler requires.
fn quantization_tables(mut body: &[u8]) -> bool {
    while let Some(&v) = body.first() {
        let length = if v < 16 { 65 } else { 129 };
        let Some(rest) = body.get(length..) else {
            return false;
        };
        body = rest;
    }
    true
}

/// `PngImagePlugin`: IHDR's size and its (bit depth, colour type) mode, then the chunks before
/// the first IDAT, each with a sound CRC (Pillow checks them) and a length its handler takes;
/// a chunk Pillow has no handler for is skipped, as Pillow skips it. The chunks whose handlers
/// decompress or start an animation (iCCP, zTXt, iTXt, eXIf, acTL, fcTL) answer None.
fn png(data: &[u8]) -> Option<PillowHeader> {
    let mut at = 8;
    let mut found: Option<(u32, u32, &'static str)> = None;
    let mut text = 0;
    loop {
        let length = be32(data, at)? as usize;
        let kind = data.get(at + 4..at + 8)?;
        let body = data.get(at + 8..(at + 8).checked_add(length)?)?;
        if kind == b"IDAT" {
            let (width, height, mode) = found?;
            return header(width, height, "PNG", mode);
        }
        if be32(data, at + 8 + length)? != crc32fast::hash(&data[at + 4..at + 8 + length]) {
            return None;
        }
        let mode = found.map(|(_, _, mode)| mode);
        let sound = match kind {
            b"IHDR" => {
                if found.is_some() || length != 13 || body[11] != 0 {
                    return None;
                }
                let mode = match (body[8], body[9]) {
                    (1, 0) => "1",
                    (2 | 4 | 8, 0) => "L",
                    (8 | 16, 2) => "RGB",
                    (1 | 2 | 4 | 8, 3) => "P",
                    (8, 4) => "LA",
                    (16, 4) | (8 | 16, 6) => "RGBA",
                    _ => return None, // 16-bit grey: "I;16" or "I", by Pillow version
                };
                found = Some((be32(body, 0)?, be32(body, 4)?, mode));
                true
            }
            b"tRNS" => match mode {
                Some("1" | "L") => length >= 2,
                Some("RGB") => length >= 6,
                _ => true,
            },
            b"gAMA" => length >= 4,
            b"cHRM" => length >= 32,
            b"sRGB" => length >= 1,
            b"pHYs" => length >= 9,
            b"tEXt" => {
                text += length;
                text <= 1 << 20 // far below Pillow's limit on the text it keeps
            }
            b"IEND" | b"iCCP" | b"zTXt" | b"iTXt" | b"eXIf" | b"acTL" | b"fcTL" | b"fdAT" => false,
            _ => kind.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_'),
        };
        if !sound || found.is_none() {
            return None;
        }
        at += 12 + length;
    }
}

/// A VP8L bitstream header: (width, height, alpha is used).
fn vp8l(body: &[u8]) -> Option<(u32, u32, bool)> {
    if *body.first()? != 0x2f {
        return None;
    }
    let bits = le32(body, 1)?;
    if bits >> 29 != 0 {
        return None; // a version libwebp does not read
    }
    Some((
        (bits & 0x3fff) + 1,
        (bits >> 14 & 0x3fff) + 1,
        bits >> 28 & 1 == 1,
    ))
}

/// A VP8 key frame header: (width, height), with libwebp's `VP8GetInfo` checks of the frame
/// tag (a key frame, a known profile, shown, its first partition inside the chunk).
fn vp8(body: &[u8]) -> Option<(u32, u32)> {
    let tag = le24(body, 0)?;
    let known = tag & 1 == 0 && (tag >> 1) & 7 <= 3 && (tag >> 4) & 1 == 1;
    if !known || (tag >> 5) as usize >= body.len() || body.get(3..6)? != b"\x9d\x01\x2a" {
        return None;
    }
    Some((le16(body, 6)? & 0x3fff, le16(body, 8)? & 0x3fff))
}

/// `WebPImagePlugin`: the `WebPAnimDecoder`'s canvas, and RGBA when `WebPGetFeatures` says the
/// image has alpha (RGB otherwise). Only a still image whose RIFF chunks fit exactly is
/// answered; an animation answers None.
fn webp(data: &[u8]) -> Option<PillowHeader> {
    let riff_end = (le32(data, 4)? as usize).checked_add(8)?;
    if riff_end > data.len() || riff_end % 2 != 0 {
        return None;
    }
    let mut chunks = Vec::new();
    let mut at = 12;
    while at < riff_end {
        let length = le32(data, at + 4)? as usize;
        let end = (at + 8).checked_add(length)?;
        if end > riff_end {
            return None;
        }
        chunks.push((&data[at..at + 4], &data[at + 8..end]));
        at = end + length % 2;
    }
    if at != riff_end {
        return None;
    }
    let (&(first, body), rest) = chunks.split_first()?;
    let (width, height, alpha) = match first {
        b"VP8 " if rest.is_empty() => {
            let (w, h) = vp8(body)?;
            (w, h, false)
        }
        b"VP8L" if rest.is_empty() => vp8l(body)?,
        b"VP8X" => {
            let flags = *body.first()?;
            // animated (Pillow's decoder settles the frames), reserved bits or size: ask it
            if flags & 0x02 != 0 || flags & !0x3e != 0 || body.len() != 10 {
                return None;
            }
            let canvas = (le24(body, 4)? + 1, le24(body, 7)? + 1);
            let images: Vec<_> = rest
                .iter()
                .filter(|(k, _)| *k == b"VP8 " || *k == b"VP8L")
                .collect();
            let [&(kind, image)] = images.as_slice() else {
                return None;
            };
            let alph = rest.iter().any(|(k, _)| *k == b"ALPH");
            let (w, h, alpha) = if kind == b"VP8L" {
                let (w, h, used) = vp8l(image)?;
                (w, h, used || alph)
            } else {
                let (w, h) = vp8(image)?;
                (w, h, flags & 0x10 != 0 || alph)
            };
            if (w, h) != canvas {
                return None;
            }
            (w, h, alpha)
        }
        _ => return None,
    };
    header(width, height, "WEBP", if alpha { "RGBA" } else { "RGB" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_images_and_damage_answer_none() {
        assert_eq!(pillow_header(b""), None);
        assert_eq!(pillow_header(b"GIF89a"), None);
        assert_eq!(pillow_header(b"\xff\xd8\xff\xe0\x00"), None);
        assert_eq!(
            pillow_header(b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"),
            None
        );
        assert_eq!(pillow_header(b"RIFF\x04\x00\x00\x00WEBP"), None);
    }

    #[test]
    fn a_minimal_jpeg_header() {
        let mut jpeg = b"\xff\xd8".to_vec();
        // SOF0: length 11, 8 bits, height 3, width 5, 1 component
        jpeg.extend_from_slice(b"\xff\xc0\x00\x0b\x08\x00\x03\x00\x05\x01\x01\x11\x00");
        jpeg.extend_from_slice(b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00");
        let found = pillow_header(&jpeg).unwrap();
        assert_eq!(
            (found.width, found.height, found.format, found.mode),
            (5, 3, "JPEG", "L")
        );
        jpeg[6] = 12; // 12-bit samples: Pillow refuses them
        assert_eq!(pillow_header(&jpeg), None);
    }

    #[test]
    fn a_vp8_chunk_cut_inside_its_size_answers_none() {
        // key frame tag (shown, first partition 0 bytes), start code, then one byte of the width
        let body = b"\x10\x00\x00\x9d\x01\x2a\x05";
        let mut webp = b"RIFF".to_vec();
        webp.extend_from_slice(&(4 + 8 + 8u32).to_le_bytes());
        webp.extend_from_slice(b"WEBPVP8 ");
        webp.extend_from_slice(&7u32.to_le_bytes());
        webp.extend_from_slice(body);
        webp.push(0); // the odd chunk's padding
        assert_eq!(pillow_header(&webp), None);
    }
}
