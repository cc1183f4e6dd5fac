//! A streaming tar reader that walks members the way Python's `tarfile` (and so Energon) does,
//! but refuses to paper over damage: a truncated or corrupt shard is an error naming the byte
//! offset, never a silently shorter shard.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::header::{self, Parsed};
use super::names;
use super::{padded, BLOCK};
use crate::error::{io, Error, Result};

/// Largest GNU long-name or PAX header we accept; real ones are a few hundred bytes.
const MAX_EXTENDED_HEADER: u64 = 1 << 20;

/// Bytes after the first zero block read at a time to check they are zeros.
const TAIL_PIECE: u64 = 1 << 20;

/// One member as Energon sees it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    /// Offset of the member's first header block (its long-name/PAX header when it has one).
    pub offset: u64,
    /// Offset of the member's data.
    pub data_offset: u64,
    pub size: u64,
    pub regular: bool,
}

/// Where a tar's bytes come from: a file, or the ranges of an object fetched so far.
pub trait Source {
    /// The tar's size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes at `offset` (within `size`).
    ///
    /// # Errors
    ///
    /// `Error::NotFetched` when the bytes are not at hand yet, or the source's own read error.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
}

/// A tar file on disk, read through a buffer that seeks only past what it holds.
pub struct FileSource {
    path: PathBuf,
    file: BufReader<File>,
    len: u64,
    pos: u64,
}

impl FileSource {
    /// The file at `path`, read from its start.
    ///
    /// # Errors
    ///
    /// `Error::Io` when the file cannot be opened or its size read.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(io(path))?;
        let len = file.metadata().map_err(io(path))?.len();
        Ok(Self {
            path: path.to_path_buf(),
            file: BufReader::with_capacity(1 << 16, file),
            len,
            pos: 0,
        })
    }
}

impl Source for FileSource {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if offset != self.pos {
            let delta = offset as i64 - self.pos as i64;
            self.file.seek_relative(delta).map_err(io(&self.path))?;
            self.pos = offset;
        }
        self.file.read_exact(buf).map_err(io(&self.path))?;
        self.pos += buf.len() as u64;
        Ok(())
    }
}

/// Reads the members of one tar in order.
pub struct TarReader<S = FileSource> {
    path: PathBuf,
    source: S,
    len: u64,
    /// Where the next header starts: just past the data of the last member returned.
    next_start: u64,
    end: Option<u64>,
    /// The first zero block where a header belongs: the end, once only zeros follow it.
    zero_block: Option<u64>,
    /// How far the bytes after `zero_block` are known to be zeros.
    zeros_to: u64,
}

impl TarReader {
    /// A reader of the tar file at `path`.
    ///
    /// # Errors
    ///
    /// `Error::Io` when the file cannot be opened.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self::new(path, FileSource::open(path)?))
    }
}

impl<S: Source> TarReader<S> {
    /// A reader of the tar `source` holds; `path` names it in errors.
    pub fn new(path: &Path, source: S) -> Self {
        Self {
            path: path.to_path_buf(),
            len: source.size(),
            source,
            next_start: 0,
            end: None,
            zero_block: None,
            zeros_to: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// Where the next member's first header starts (the end block, once reached).
    pub fn position(&self) -> u64 {
        self.next_start
    }

    /// Offset of the end-of-archive block, once the reader has reached it.
    pub fn end_offset(&self) -> Option<u64> {
        self.end
    }

    fn fail<T>(&self, offset: u64, reason: impl Into<String>) -> Result<T> {
        Err(Error::Shard {
            path: self.path.clone(),
            offset,
            reason: reason.into(),
        })
    }

    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.source.read_at(offset, buf)
    }

    fn read_block(&mut self, offset: u64) -> Result<[u8; 512]> {
        if offset >= self.len {
            return if offset == 0 {
                self.fail(0, "empty file, not a tar shard")
            } else {
                self.fail(
                    offset,
                    "file ends without the tar end-of-archive block (truncated?)",
                )
            };
        }
        let mut block = [0u8; 512];
        let available = (self.len - offset).min(BLOCK) as usize;
        self.read_exact_at(offset, &mut block[..available])?;
        if offset == 0 && block.starts_with(&[0x1f, 0x8b]) {
            return self.fail(
                0,
                "gzip-compressed tar shards are not supported; decompress them (gunzip)",
            );
        }
        if available < BLOCK as usize {
            return self.fail(offset, "truncated tar header");
        }
        Ok(block)
    }

    fn check_data(&self, entry_offset: u64, data_offset: u64, size: u64) -> Result<()> {
        if data_offset.saturating_add(size) > self.len {
            return self.fail(
                entry_offset,
                format!(
                    "member data of {size} bytes runs past the end of the file ({} bytes; truncated?)",
                    self.len
                ),
            );
        }
        Ok(())
    }

    fn extended_data(&mut self, offset: u64, data_offset: u64, size: u64) -> Result<Vec<u8>> {
        if size > MAX_EXTENDED_HEADER {
            return self.fail(
                offset,
                format!("extended header of {size} bytes is implausible"),
            );
        }
        self.check_data(offset, data_offset, size)?;
        let mut data = vec![0u8; size as usize];
        self.read_exact_at(data_offset, &mut data)?;
        Ok(data)
    }

    /// The next member, or `None` at the end-of-archive block. A source that lacks bytes
    /// fails with `Error::NotFetched` for every byte from the member's first header on (past
    /// the end block, for the bytes after it not checked yet), and leaves the reader where it
    /// was, so the call can be repeated once they are fetched.
    ///
    /// # Errors
    ///
    /// `Error::Shard` for bytes that are not a valid tar member, the source's `Error::Io`, and
    /// `Error::NotFetched` as above.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        if self.end.is_some() {
            return Ok(None);
        }
        if self.zero_block.is_none() {
            let start = self.next_start;
            let entry = self.entry_at(start).map_err(|e| match e {
                Error::NotFetched { offset, len } => Error::NotFetched {
                    offset: start,
                    len: offset + len - start,
                },
                e => e,
            })?;
            if entry.is_some() {
                return Ok(entry);
            }
        }
        self.check_tail()?;
        Ok(None)
    }

    /// Checks that only zeros follow the first zero block (the second end block and a
    /// writer's padding to a whole record): a header zeroed amid the members looks like the
    /// end too, and taking it for one would drop every sample after it.
    fn check_tail(&mut self) -> Result<()> {
        let zero = self.zero_block.expect("called once a zero block was found");
        let mut piece = Vec::new();
        while self.zeros_to < self.len {
            let n = (self.len - self.zeros_to).min(TAIL_PIECE);
            piece.resize(n as usize, 0);
            self.read_exact_at(self.zeros_to, &mut piece)?;
            if let Some(i) = piece.iter().position(|&b| b != 0) {
                let data = self.zeros_to + i as u64;
                return self.fail(
                    zero,
                    format!(
                        "zeroed or damaged tar header (a zero block, but data follows from \
                         byte {data} on)"
                    ),
                );
            }
            self.zeros_to += n;
        }
        self.end = Some(zero);
        Ok(())
    }

    fn entry_at(&mut self, start: u64) -> Result<Option<Entry>> {
        let mut offset = start;
        let mut long_name: Option<Vec<u8>> = None;
        let mut pax_size: Option<u64> = None;
        loop {
            let block = self.read_block(offset)?;
            let raw = match header::parse(&block) {
                Ok(Parsed::End) => {
                    if offset != start {
                        return self.fail(offset, "extended header is not followed by a member");
                    }
                    self.zero_block = Some(offset);
                    self.zeros_to = offset + BLOCK;
                    return Ok(None);
                }
                Ok(Parsed::Header(raw)) => raw,
                Err(reason) if offset == 0 => {
                    return self.fail(0, format!("not a tar file ({reason})"))
                }
                Err(reason) => return self.fail(offset, reason),
            };
            let data_offset = offset + BLOCK;
            match raw.typeflag {
                header::GNU_LONGNAME | header::GNU_LONGLINK => {
                    let data = self.extended_data(offset, data_offset, raw.size)?;
                    if raw.typeflag == header::GNU_LONGNAME {
                        let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                        long_name = Some(data[..end].to_vec());
                    }
                    offset = data_offset + padded(raw.size);
                }
                header::PAX_LOCAL | header::PAX_SOLARIS => {
                    let data = self.extended_data(offset, data_offset, raw.size)?;
                    let (path, size) =
                        header::parse_pax(&data).or_else(|reason| self.fail(offset, reason))?;
                    if path.is_some() {
                        long_name = path;
                    }
                    pax_size = size.or(pax_size);
                    offset = data_offset + padded(raw.size);
                }
                header::PAX_GLOBAL => {
                    // Global records hold defaults such as comments; they name no member.
                    self.check_data(offset, data_offset, raw.size)?;
                    offset = data_offset + padded(raw.size);
                }
                header::GNU_SPARSE => {
                    return self.fail(offset, "GNU sparse members are not supported")
                }
                _ => {
                    let size = pax_size.unwrap_or(raw.size);
                    let has_data = raw.has_data();
                    let regular = header::is_regular(raw.typeflag);
                    let name_bytes = match long_name {
                        Some(n) => n,
                        None if !raw.prefix.is_empty() => {
                            [raw.prefix.as_slice(), b"/", raw.name.as_slice()].concat()
                        }
                        None => raw.name,
                    };
                    let Ok(mut name) = String::from_utf8(name_bytes) else {
                        return self.fail(start, "member name is not valid UTF-8");
                    };
                    if raw.typeflag == b'5' {
                        name.truncate(name.trim_end_matches('/').len());
                    }
                    let data_size = if has_data { size } else { 0 };
                    self.check_data(start, data_offset, data_size)?;
                    self.next_start = data_offset + padded(data_size);
                    return Ok(Some(Entry {
                        name,
                        offset: start,
                        data_offset,
                        size: data_size,
                        regular,
                    }));
                }
            }
        }
    }

    /// Reads the data of the entry just returned by `next_entry`.
    ///
    /// # Errors
    ///
    /// The source's error when the bytes cannot be read (or are not fetched), and
    /// `Error::Shard` for a member larger than this machine's address space.
    pub fn read_data(&mut self, entry: &Entry) -> Result<Vec<u8>> {
        let Ok(size) = usize::try_from(entry.size) else {
            return self.fail(
                entry.offset,
                format!("member of {} bytes does not fit in memory", entry.size),
            );
        };
        let mut data = vec![0u8; size];
        self.read_exact_at(entry.data_offset, &mut data)?;
        Ok(data)
    }
}

/// A member that belongs to a sample.
#[derive(Debug, Clone)]
pub struct Part {
    pub name: String,
    pub data_offset: u64,
    pub size: u64,
    /// The member's bytes, when the reader was asked for them.
    pub data: Option<Vec<u8>>,
}

/// Contiguous members that share a key (Energon's grouping).
#[derive(Debug, Clone)]
pub struct Sample {
    pub key: String,
    /// Offset of the first header of the sample's first member: the `.tar.idx` entry.
    pub offset: u64,
    pub parts: Vec<Part>,
}

/// Groups the members of a tar into samples exactly as `energon prepare` does: regular files
/// only, `__…__` metadata skipped, names split by `split_name`, a new sample whenever the key
/// changes. Member names that could escape their folder are refused.
pub struct SampleReader<S = FileSource> {
    tar: TarReader<S>,
    with_data: bool,
    pending: Option<(String, Part, u64)>,
}

impl SampleReader {
    /// A reader of the shard at `path`; `with_data` reads each part's bytes too.
    ///
    /// # Errors
    ///
    /// `Error::Io` when the file cannot be opened.
    pub fn open(path: &Path, with_data: bool) -> Result<Self> {
        Ok(Self::new(TarReader::open(path)?, with_data))
    }
}

impl<S: Source> SampleReader<S> {
    pub fn new(tar: TarReader<S>, with_data: bool) -> Self {
        Self {
            tar,
            with_data,
            pending: None,
        }
    }

    pub fn tar(&self) -> &TarReader<S> {
        &self.tar
    }

    pub fn tar_mut(&mut self) -> &mut TarReader<S> {
        &mut self.tar
    }

    /// Offset of the end-of-archive block, once every sample has been read.
    pub fn end_offset(&self) -> Option<u64> {
        self.tar.end_offset()
    }

    /// The next member that belongs to a sample: (key, part, header offset). Repeatable after
    /// `Error::NotFetched`, as `TarReader::next_entry`.
    ///
    /// # Errors
    ///
    /// As [`TarReader::next_entry`], and `Error::Shard` for a member name that escapes the shard.
    pub fn next_part(&mut self) -> Result<Option<(String, Part, u64)>> {
        while let Some(entry) = self.tar.next_entry()? {
            if !entry.regular {
                continue;
            }
            if names::escapes(&entry.name) {
                return Err(Error::Shard {
                    path: self.tar.path().to_path_buf(),
                    offset: entry.offset,
                    reason: format!(
                        "member name {:?} is absolute or contains '..'; refusing it",
                        entry.name
                    ),
                });
            }
            if names::is_meta(&entry.name) {
                continue;
            }
            let Some((key, part)) = names::split_name(&entry.name) else {
                continue;
            };
            let data = if self.with_data {
                Some(self.tar.read_data(&entry)?)
            } else {
                None
            };
            let part = Part {
                name: part.to_string(),
                data_offset: entry.data_offset,
                size: entry.size,
                data,
            };
            return Ok(Some((key.to_string(), part, entry.offset)));
        }
        Ok(None)
    }

    /// The next sample: the run of parts that share a key, or `None` after the last.
    ///
    /// # Errors
    ///
    /// As [`SampleReader::next_part`].
    pub fn next_sample(&mut self) -> Result<Option<Sample>> {
        let first = match self.pending.take() {
            Some(p) => p,
            None => match self.next_part()? {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let (key, part, offset) = first;
        let mut sample = Sample {
            key,
            offset,
            parts: vec![part],
        };
        while let Some((key, part, offset)) = self.next_part()? {
            if key != sample.key {
                self.pending = Some((key, part, offset));
                break;
            }
            sample.parts.push(part);
        }
        Ok(Some(sample))
    }
}

impl<S: Source> Iterator for SampleReader<S> {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_sample().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar::ShardWriter;

    /// A shard of three samples of one 600-byte part each (header + 2 blocks: 1536 bytes).
    fn shard(dir: &Path) -> Vec<u8> {
        let mut w = ShardWriter::new(dir, 10, "", 0).unwrap();
        for i in 0..3 {
            w.write(&format!("{i:04}"), &[("txt", vec![b'x'; 600])])
                .unwrap();
        }
        w.close().unwrap();
        std::fs::read(dir.join("000000.tar")).unwrap()
    }

    fn keys(path: &Path) -> Result<Vec<String>> {
        SampleReader::open(path, false)?
            .map(|s| s.map(|s| s.key))
            .collect()
    }

    #[test]
    fn a_zeroed_header_amid_members_is_corruption_not_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = shard(dir.path());
        bytes[1536..2048].fill(0); // the second sample's header
        let path = dir.path().join("cut.tar");
        std::fs::write(&path, &bytes).unwrap();
        let err = keys(&path).unwrap_err().to_string();
        assert!(
            err.contains("zeroed or damaged tar header")
                && err.contains("from byte 2048 on")
                && err.ends_with("at byte 1536"),
            "{err}"
        );
    }

    #[test]
    fn zeros_after_the_end_block_are_padding() {
        let dir = tempfile::tempdir().unwrap();
        let whole = shard(dir.path());
        let path = dir.path().join("t.tar");
        // the end as writers leave it: one zero block, two, or two plus a record's padding
        // (tarfile and GNU tar pad to 10240 bytes), even an odd tail of zeros
        for cut in [512, 1024] {
            for pad in [0, 10240 - 4608 - cut, 3] {
                let mut bytes = whole[..4608 + cut].to_vec();
                bytes.resize(bytes.len() + pad, 0);
                std::fs::write(&path, &bytes).unwrap();
                assert_eq!(keys(&path).unwrap(), ["0000", "0001", "0002"]);
            }
        }
        // one stray byte anywhere after the end block is not padding
        for at in [4608 + 512, 4608 + 1023, 4608 + 1024 + (2 << 20)] {
            let mut bytes = whole.clone();
            bytes.resize(bytes.len().max(at + 1), 0);
            bytes[at] = 1;
            std::fs::write(&path, &bytes).unwrap();
            let err = keys(&path).unwrap_err().to_string();
            assert!(err.contains(&format!("from byte {at} on")), "{err}");
        }
    }
}
