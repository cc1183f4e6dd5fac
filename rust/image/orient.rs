//! EXIF orientation: reading the tag, mapping boxes between the stored and the oriented frame,
//! and turning a (small, already resized) stored-frame image into the oriented one.
//!
//! Orientation is applied after resizing: the source box is mapped into the stored frame, the
//! stored pixels are resampled there, and only the target-size result is flipped or rotated.

use super::geometry::SourceBox;

/// An EXIF orientation, 1–8 (1 = as stored). Anything else reads as 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orientation(pub u8);

impl Orientation {
    pub const NORMAL: Orientation = Orientation(1);

    #[must_use]
    pub fn from_tag(value: u32) -> Orientation {
        match value {
            1..=8 => Orientation(value as u8),
            _ => Orientation::NORMAL,
        }
    }

    /// Whether width and height swap (5–8).
    #[must_use]
    pub fn transposes(self) -> bool {
        self.0 >= 5
    }

    /// Oriented (displayed) size of a stored `w`×`h` image.
    #[must_use]
    pub fn oriented_size(self, w: u32, h: u32) -> (u32, u32) {
        if self.transposes() {
            (h, w)
        } else {
            (w, h)
        }
    }

    /// Maps a continuous point of the oriented frame to the stored frame (stored size `w`×`h`).
    fn to_stored(self, x: f64, y: f64, w: f64, h: f64) -> (f64, f64) {
        match self.0 {
            2 => (w - x, y),
            3 => (w - x, h - y),
            4 => (x, h - y),
            5 => (y, x),
            6 => (y, h - x),
            7 => (w - y, h - x),
            8 => (w - y, x),
            _ => (x, y),
        }
    }

    /// The stored-frame box that shows as `b` in the oriented frame.
    #[must_use]
    pub fn box_to_stored(self, b: SourceBox, w: u32, h: u32) -> SourceBox {
        let (w, h) = (f64::from(w), f64::from(h));
        let (x0, y0) = self.to_stored(b.left, b.top, w, h);
        let (x1, y1) = self.to_stored(b.left + b.width, b.top + b.height, w, h);
        SourceBox {
            left: x0.min(x1),
            top: y0.min(y1),
            width: (x1 - x0).abs(),
            height: (y1 - y0).abs(),
        }
    }

    /// Orients a packed RGB image of stored size `w`×`h`; returns the oriented pixels.
    #[must_use]
    pub fn apply(self, rgb: Vec<u8>, w: usize, h: usize) -> Vec<u8> {
        if self.0 <= 1 || self.0 > 8 {
            return rgb;
        }
        let (ow, oh) = if self.transposes() { (h, w) } else { (w, h) };
        let mut out = vec![0u8; rgb.len()];
        for y in 0..oh {
            let row = &mut out[y * ow * 3..(y + 1) * ow * 3];
            for (x, px) in row.chunks_exact_mut(3).enumerate() {
                let (sx, sy) = match self.0 {
                    2 => (w - 1 - x, y),
                    3 => (w - 1 - x, h - 1 - y),
                    4 => (x, h - 1 - y),
                    5 => (y, x),
                    6 => (y, h - 1 - x),
                    7 => (w - 1 - y, h - 1 - x),
                    _ => (w - 1 - y, x), // 8
                };
                let i = (sy * w + sx) * 3;
                px.copy_from_slice(&rgb[i..i + 3]);
            }
        }
        out
    }
}

/// Reads the orientation tag (0x0112) from a TIFF-structured EXIF block (with or without the
/// "Exif\0\0" prefix). Bounded: reads only IFD0, never allocates.
#[must_use]
pub fn from_exif(data: &[u8]) -> Orientation {
    let data = data.strip_prefix(b"Exif\0\0").unwrap_or(data);
    let le = match data.get(0..4) {
        Some(b"II*\0") => true,
        Some(b"MM\0*") => false,
        _ => return Orientation::NORMAL,
    };
    let u16_at = |i: usize| -> Option<u16> {
        let b: [u8; 2] = data.get(i..i + 2)?.try_into().ok()?;
        Some(if le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    };
    let u32_at = |i: usize| -> Option<u32> {
        let b: [u8; 4] = data.get(i..i + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let find = || -> Option<Orientation> {
        let ifd = u32_at(4)? as usize;
        let count = u16_at(ifd)? as usize;
        for i in 0..count.min(1000) {
            let entry = ifd.checked_add(2 + 12 * i)?;
            if u16_at(entry)? == 0x0112 {
                let value = match u16_at(entry + 2)? {
                    3 => u32::from(u16_at(entry + 8)?), // SHORT
                    4 => u32_at(entry + 8)?,            // LONG
                    _ => return None,
                };
                return Some(Orientation::from_tag(value));
            }
        }
        None
    };
    find().unwrap_or(Orientation::NORMAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3×2 image whose pixels are numbered 0..6 (in the red channel).
    fn numbered() -> Vec<u8> {
        (0..6u8).flat_map(|i| [i, 0, 0]).collect()
    }

    fn reds(v: &[u8]) -> Vec<u8> {
        v.chunks(3).map(|p| p[0]).collect()
    }

    #[test]
    fn apply_matches_the_exif_definitions() {
        // stored:  0 1 2 / 3 4 5
        let cases: [(u8, [u8; 6]); 8] = [
            (1, [0, 1, 2, 3, 4, 5]),
            (2, [2, 1, 0, 5, 4, 3]),
            (3, [5, 4, 3, 2, 1, 0]),
            (4, [3, 4, 5, 0, 1, 2]),
            (5, [0, 3, 1, 4, 2, 5]),
            (6, [3, 0, 4, 1, 5, 2]), // rotate 90° clockwise
            (7, [5, 2, 4, 1, 3, 0]),
            (8, [2, 5, 1, 4, 0, 3]), // rotate 90° counter-clockwise
        ];
        for (o, want) in cases {
            let got = Orientation(o).apply(numbered(), 3, 2);
            assert_eq!(reds(&got), want, "orientation {o}");
        }
    }

    #[test]
    fn box_mapping_agrees_with_pixel_mapping() {
        // The oriented pixel (x', y') of every orientation comes from the stored box of the unit
        // square at (x', y').
        for o in 1..=8u8 {
            let o = Orientation(o);
            let out = o.apply(numbered(), 3, 2);
            let (ow, oh) = o.oriented_size(3, 2);
            for y in 0..oh {
                for x in 0..ow {
                    let b = SourceBox {
                        left: f64::from(x),
                        top: f64::from(y),
                        width: 1.0,
                        height: 1.0,
                    };
                    let s = o.box_to_stored(b, 3, 2);
                    let stored = (s.top as usize) * 3 + s.left as usize;
                    assert_eq!(out[((y * ow + x) * 3) as usize] as usize, stored);
                }
            }
        }
    }

    #[test]
    fn reads_orientation_from_both_byte_orders() {
        let le = b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x06\0\0\0\0\0\0\0";
        assert_eq!(from_exif(le), Orientation(6));
        let be = b"MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x08\0\0\0\0\0\0";
        assert_eq!(from_exif(be), Orientation(8));
        assert_eq!(from_exif(b"II*\0\xff\xff\xff\xff"), Orientation::NORMAL);
        assert_eq!(from_exif(b""), Orientation::NORMAL);
    }
}
