//! Indexing a tar that is not at hand (an object in a bucket) from its headers alone:
//! `HeaderWalk` says which bytes it needs next, is fed them, and walks on, so the caller fetches
//! a 512-byte header, skips the member's data by its size, and asks for the next header. Member
//! names, GNU long names and PAX headers are read by the same `tar::TarReader` as a local shard,
//! so the scan is the one `index::scan_shard` makes of the same bytes.

use std::path::Path;

use crate::error::{Error, Result};
use crate::index::{ScanBuilder, ShardScan};
use crate::tar::reader::Source;
use crate::tar::{SampleReader, TarReader};

/// The range of an object fetched last (held as it was handed over: a streamed piece is not
/// copied).
struct Fetched {
    len: u64,
    start: u64,
    data: Box<dyn AsRef<[u8]> + Send + Sync>,
}

impl Source for Fetched {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let want = buf.len() as u64;
        let data = (*self.data).as_ref();
        let Some(at) = offset.checked_sub(self.start) else {
            return Err(Error::NotFetched { offset, len: want });
        };
        if at + want > data.len() as u64 {
            return Err(Error::NotFetched { offset, len: want });
        }
        buf.copy_from_slice(&data[at as usize..(at + want) as usize]);
        Ok(())
    }
}

/// One tar's header walk (see the module).
pub struct HeaderWalk {
    reader: SampleReader<Fetched>,
    scan: Option<ScanBuilder>,
    need: Option<(u64, u64)>,
    done: Option<ShardScan>,
}

impl HeaderWalk {
    /// A walk of the tar `name` (for errors) of `len` bytes; `needed` says what to fetch first.
    ///
    /// # Errors
    ///
    /// `Error::Shard` when the first bytes (none are fetched yet) already cannot be a tar.
    pub fn new(name: &str, len: u64) -> Result<Self> {
        let source = Fetched {
            len,
            start: 0,
            data: Box::new(Vec::new()),
        };
        let mut walk = Self {
            reader: SampleReader::new(TarReader::new(Path::new(name), source), false),
            scan: Some(ScanBuilder::default()),
            need: None,
            done: None,
        };
        walk.advance()?;
        Ok(walk)
    }

    /// The range `(offset, length)` to fetch next, or None once the end block was reached.
    #[must_use]
    pub fn needed(&self) -> Option<(u64, u64)> {
        self.need
    }

    /// Gives the walk the bytes at `offset` (at least the range `needed` named, any more
    /// read ahead) and walks on as far as they reach.
    ///
    /// # Errors
    /// The tar is damaged (as `scan_shard` says of the same bytes).
    pub fn feed(
        &mut self,
        offset: u64,
        data: impl AsRef<[u8]> + Send + Sync + 'static,
    ) -> Result<()> {
        let source = self.reader.tar_mut().source_mut();
        source.start = offset;
        source.data = Box::new(data);
        self.advance()
    }

    fn advance(&mut self) -> Result<()> {
        let Some(scan) = self.scan.as_mut() else {
            return Ok(());
        };
        loop {
            match self.reader.next_part() {
                Ok(Some((key, part, offset))) => scan.add(key, part, offset),
                Ok(None) => {
                    let end = self.reader.end_offset().expect("stops only at the end");
                    self.done = self.scan.take().map(|scan| scan.finish(end));
                    self.need = None;
                    return Ok(());
                }
                Err(Error::NotFetched { offset, len }) => {
                    self.need = Some((offset, len));
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Bytes of the tar walked so far (where the next header starts).
    #[must_use]
    pub fn position(&self) -> u64 {
        self.reader.tar().position()
    }

    /// Where the second sample starts, once the walk has read one of its headers (the first
    /// sample's end: what a reader of the first sample alone needs).
    #[must_use]
    pub fn second_sample(&self) -> Option<u64> {
        match (&self.scan, &self.done) {
            (Some(scan), _) => scan.second_sample(),
            (None, Some(done)) => done.samples.get(1).map(|s| s.offset),
            (None, None) => None,
        }
    }

    /// Samples whose first header the walk has read.
    #[must_use]
    pub fn samples(&self) -> usize {
        match (&self.scan, &self.done) {
            (Some(scan), _) => scan.sample_count(),
            (None, Some(done)) => done.samples.len(),
            (None, None) => 0,
        }
    }

    /// The scan, once the walk reached the end block.
    #[must_use]
    pub fn scan(&self) -> Option<&ShardScan> {
        self.done.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::scan_shard;
    use crate::tar::ShardWriter;

    /// Walks `bytes` fetching `ahead` bytes (at least what is needed) per request.
    fn walk(bytes: &[u8], ahead: u64) -> (ShardScan, usize) {
        let mut walk = HeaderWalk::new("t.tar", bytes.len() as u64).unwrap();
        let mut requests = 0;
        while let Some((offset, len)) = walk.needed() {
            let end = (offset + len.max(ahead)).min(bytes.len() as u64);
            walk.feed(offset, bytes[offset as usize..end as usize].to_vec())
                .unwrap();
            requests += 1;
        }
        let scan = walk.done.take().unwrap();
        (scan, requests)
    }

    /// A sample's key, offset and size, and its parts' names, data offsets and sizes.
    type Row = (String, u64, u64, Vec<(String, u64, u64)>);

    fn rows(scan: &ShardScan) -> Vec<Row> {
        scan.samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let parts = scan
                    .parts
                    .iter()
                    .filter(|p| p.sample_index == i as u64)
                    .map(|p| (p.name.clone(), p.data_offset, p.size))
                    .collect();
                (s.key.clone(), s.offset, s.size, parts)
            })
            .collect()
    }

    #[test]
    fn a_walk_finds_what_a_file_scan_finds_reading_only_headers() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(dir.path(), 10, "", 0).unwrap();
        let long = "p".repeat(120); // a PAX path record
        for i in 0..5 {
            w.write(
                &format!("{i:04}"),
                &[("jpg", vec![7u8; 20_000]), (long.as_str(), b"{}".to_vec())],
            )
            .unwrap();
        }
        w.close().unwrap();
        let path = dir.path().join("000000.tar");
        let bytes = std::fs::read(&path).unwrap();
        let local = scan_shard(&path).unwrap();
        for ahead in [512, 4096, 1 << 20] {
            let (scan, requests) = walk(&bytes, ahead);
            assert_eq!(rows(&scan), rows(&local));
            assert_eq!(scan.idx_bytes(), local.idx_bytes());
            // exact reads: the jpg's header, then the PAX header, its record and the header
            // after it (3 reads, each asking again from the PAX header), for each of 5 samples,
            // then the end block and the zeros after it; reading ahead 4 KiB takes a sample's
            // small members and the next sample's header in one read; 1 MiB takes the whole tar
            let expected = match ahead {
                512 => 22,
                4096 => 6,
                _ => 1,
            };
            assert_eq!(requests, expected, "reading ahead {ahead}");
        }
        // the first sample's end is known as soon as a header of the second was read
        let mut partial = HeaderWalk::new("t.tar", bytes.len() as u64).unwrap();
        let mut reads = 0;
        while partial.second_sample().is_none() {
            let (offset, len) = partial.needed().unwrap();
            let end = (offset + len).min(bytes.len() as u64);
            partial
                .feed(offset, bytes[offset as usize..end as usize].to_vec())
                .unwrap();
            reads += 1;
        }
        assert_eq!(partial.second_sample(), Some(local.samples[1].offset));
        assert_eq!(partial.samples(), 2);
        assert!(partial.needed().is_some() && reads < 22, "{reads}");
    }

    #[test]
    fn a_damaged_tar_fails_as_a_file_scan_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(dir.path(), 10, "", 0).unwrap();
        w.write("a", &[("txt", vec![1u8; 3000])]).unwrap();
        w.close().unwrap();
        let bytes = std::fs::read(dir.path().join("000000.tar")).unwrap();
        let cut = &bytes[..2048];
        let mut walk = HeaderWalk::new("t.tar", cut.len() as u64).unwrap();
        let (offset, len) = walk.needed().unwrap();
        walk.feed(offset, cut[..len as usize].to_vec()).unwrap_err();
        assert!(HeaderWalk::new("t.tar", 0).is_err());
    }

    /// Walks `bytes` as `walk` does; the error the walk stops with.
    fn walk_error(bytes: &[u8], ahead: u64) -> String {
        let mut walk = HeaderWalk::new("t.tar", bytes.len() as u64).unwrap();
        while let Some((offset, len)) = walk.needed() {
            let end = (offset + len.max(ahead)).min(bytes.len() as u64);
            if let Err(e) = walk.feed(offset, bytes[offset as usize..end as usize].to_vec()) {
                return e.to_string();
            }
        }
        panic!("the walk ended without an error");
    }

    #[test]
    fn a_zeroed_header_amid_members_fails_the_walk_as_a_file_scan() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(dir.path(), 10, "", 0).unwrap();
        for i in 0..3 {
            w.write(&format!("{i:04}"), &[("txt", vec![1u8; 3000])])
                .unwrap();
        }
        w.close().unwrap();
        let path = dir.path().join("000000.tar");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3584..4096].fill(0); // the second sample's header
        std::fs::write(&path, &bytes).unwrap();
        let local = scan_shard(&path).err().unwrap().to_string();
        assert!(
            local.ends_with("from byte 4096 on) at byte 3584"),
            "{local}"
        );
        for ahead in [512, 4096, 1 << 20] {
            let walked = walk_error(&bytes, ahead);
            assert_eq!(
                walked.replace("t.tar", ""),
                local.replace(&*path.to_string_lossy(), "")
            );
        }
    }
}
