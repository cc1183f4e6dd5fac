//! Reading and writing single 512-byte tar header blocks (ustar layout, as Python's `tarfile`
//! reads them).

pub const REGULAR: u8 = b'0';
pub const REGULAR_OLD: u8 = 0;
pub const CONTIGUOUS: u8 = b'7';
pub const GNU_LONGNAME: u8 = b'L';
pub const GNU_LONGLINK: u8 = b'K';
pub const GNU_SPARSE: u8 = b'S';
pub const PAX_LOCAL: u8 = b'x';
pub const PAX_GLOBAL: u8 = b'g';
pub const PAX_SOLARIS: u8 = b'X';

/// Types whose data blocks `tarfile` does not skip when they are not regular files.
const BUILTIN_TYPES: &[u8] = b"0\x0012345674LKSxgX";

/// The fields of one header block that shard indexing needs.
pub struct RawHeader {
    pub name: Vec<u8>,
    pub size: u64,
    pub typeflag: u8,
    pub prefix: Vec<u8>,
}

impl RawHeader {
    /// Whether the data blocks that follow belong to this header (`tarfile._proc_builtin`).
    pub fn has_data(&self) -> bool {
        is_regular(self.typeflag) || !BUILTIN_TYPES.contains(&self.typeflag)
    }
}

pub fn is_regular(typeflag: u8) -> bool {
    matches!(typeflag, REGULAR | REGULAR_OLD | CONTIGUOUS | GNU_SPARSE)
}

/// Bytes up to the first NUL.
fn nts(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// A numeric field: octal text, or GNU base-256 when the high bit of the first byte is set.
fn number(field: &[u8]) -> Option<u64> {
    if field[0] & 0x80 != 0 {
        if field[0] == 0xff {
            return None; // negative
        }
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            n = n.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(n);
    }
    let text = nts(field);
    let text = std::str::from_utf8(text).ok()?.trim_matches(|c| c == ' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// Whether `stored` is one of the two checksums `tarfile` accepts: the unsigned or the signed
/// byte sum, with the checksum field counted as spaces. Written as plain sums so they vectorize:
/// this runs once per member and dominates header parsing.
fn checksum_matches(block: &[u8; 512], stored: u64) -> bool {
    let field = &block[148..156];
    let unsigned: i64 = block.iter().map(|&b| i64::from(b)).sum::<i64>()
        - field.iter().map(|&b| i64::from(b)).sum::<i64>()
        + 8 * 32;
    if stored as i64 == unsigned {
        return true;
    }
    let signed: i64 = block.iter().map(|&b| i64::from(b as i8)).sum::<i64>()
        - field.iter().map(|&b| i64::from(b as i8)).sum::<i64>()
        + 8 * 32;
    stored as i64 == signed
}

pub enum Parsed {
    /// An all-zero block: the end-of-archive marker.
    End,
    Header(RawHeader),
}

/// Parses a header block; `Err` carries the reason in a few words.
pub fn parse(block: &[u8; 512]) -> Result<Parsed, &'static str> {
    if block.iter().all(|&b| b == 0) {
        return Ok(Parsed::End);
    }
    let stored = number(&block[148..156]).ok_or("header checksum field is not a number")?;
    if !checksum_matches(block, stored) {
        return Err("bad tar header checksum");
    }
    let size = number(&block[124..136]).ok_or("header size field is not a number")?;
    let mut typeflag = block[156];
    let name = nts(&block[0..100]).to_vec();
    if typeflag == REGULAR_OLD && name.ends_with(b"/") {
        typeflag = b'5'; // old V7 directory
    }
    Ok(Parsed::Header(RawHeader {
        name,
        size,
        typeflag,
        prefix: nts(&block[345..500]).to_vec(),
    }))
}

/// Writes `value` as a zero-padded octal field of `field.len() - 1` digits and a NUL.
fn put_octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
}

/// The largest value the size field's 11 octal digits hold.
const MAX_OCTAL_SIZE: u64 = (1 << 33) - 1;

/// A deterministic ustar header: mode 0644, uid/gid 0, empty owner names, mtime 0.
/// `name` must fit in 100 bytes; longer names get a PAX record first (see `pax_path`).
pub fn build(name: &[u8], size: u64, typeflag: u8) -> [u8; 512] {
    debug_assert!(name.len() <= 100);
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    put_octal(&mut h[100..108], 0o644);
    put_octal(&mut h[108..116], 0);
    put_octal(&mut h[116..124], 0);
    if size < MAX_OCTAL_SIZE {
        put_octal(&mut h[124..136], size);
    } else {
        // GNU base-256 for members of 8 GiB and more.
        h[124] = 0x80;
        h[128..136].copy_from_slice(&size.to_be_bytes());
    }
    put_octal(&mut h[136..148], 0);
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u64 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| u64::from(if (148..156).contains(&i) { b' ' } else { b }))
        .sum();
    h[148..154].copy_from_slice(format!("{sum:06o}").as_bytes());
    h[154] = 0;
    h[155] = b' ';
    h
}

/// The data of a PAX extended header carrying a long `path`, as `tarfile` writes it.
pub fn pax_path(name: &str) -> Vec<u8> {
    let body = format!(" path={name}\n");
    // The record starts with its own total length in decimal, which counts its own digits.
    let mut len = body.len() + 1;
    while len.to_string().len() + body.len() != len {
        len = len.to_string().len() + body.len();
    }
    format!("{len}{body}").into_bytes()
}

/// Reads `path` and `size` from PAX extended header records.
pub fn parse_pax(data: &[u8]) -> Result<(Option<Vec<u8>>, Option<u64>), &'static str> {
    let (mut path, mut size) = (None, None);
    let mut rest = data;
    while !rest.is_empty() && rest[0] != 0 {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or("malformed PAX record")?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("malformed PAX record length")?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err("malformed PAX record");
        }
        let record = &rest[space + 1..len - 1];
        let eq = record
            .iter()
            .position(|&b| b == b'=')
            .ok_or("malformed PAX record")?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => path = Some(value.to_vec()),
            b"size" => {
                size = Some(
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or("malformed PAX size")?,
                );
            }
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok((path, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = build(b"0000000001.jpg", 1234, REGULAR);
        match parse(&h).unwrap() {
            Parsed::Header(r) => {
                assert_eq!(r.name, b"0000000001.jpg");
                assert_eq!(r.size, 1234);
                assert_eq!(r.typeflag, REGULAR);
            }
            Parsed::End => panic!("not an end block"),
        }
    }

    #[test]
    fn base256_size() {
        let h = build(b"big.bin", 1 << 40, REGULAR);
        let Parsed::Header(r) = parse(&h).unwrap() else {
            panic!()
        };
        assert_eq!(r.size, 1 << 40);
    }

    #[test]
    fn corrupt_checksum_is_an_error() {
        let mut h = build(b"a.txt", 1, REGULAR);
        h[0] = b'b';
        assert!(parse(&h).is_err());
    }

    #[test]
    fn pax_record_length_counts_itself() {
        for n in [1, 5, 90, 95, 96, 97, 1000] {
            let name = "x".repeat(n);
            let rec = pax_path(&name);
            let (path, _) = parse_pax(&rec).unwrap();
            assert_eq!(path.unwrap(), name.as_bytes());
        }
    }
}
