//! Energon's index for a folder of shards (docs/FORMAT.md §5): a `.tar.idx` next to every shard and
//! `.nv-meta/index.sqlite`, byte-for-byte and row-for-row what `energon prepare` writes.
//!
//! Shards are scanned in parallel (headers only, seeking over data); one thread writes the
//! sqlite rows in shard order while the next shards are scanned. Everything is written under a
//! temporary name and renamed only when every shard was read and every key is unique, so a
//! failure leaves no index behind.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rayon::prelude::*;
use rusqlite::{Connection, ErrorCode, OptionalExtension};
use xxhash_rust::xxh3::xxh3_128;

use crate::error::{io, Error, Result};
use crate::tar::reader::Part;
use crate::tar::SampleReader;

/// Part names reported for a dataset, at most (as Energon's `prepare`).
const MAX_PART_NAMES: usize = 50;

/// One sample's row in `samples`.
pub struct SampleRow {
    pub key: String,
    pub offset: u64,
    pub size: u64,
}

/// One member's row in `sample_parts`.
pub struct PartRow {
    pub sample_index: u64,
    pub name: String,
    pub data_offset: u64,
    pub size: u64,
}

/// Everything the index needs from one shard.
pub struct ShardScan {
    pub samples: Vec<SampleRow>,
    pub parts: Vec<PartRow>,
    /// Offset of the end-of-archive block: the last `.tar.idx` entry.
    pub end: u64,
}

impl ShardScan {
    /// The `.tar.idx` contents: sample offsets and the end offset, native-endian u64.
    #[must_use]
    pub fn idx_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity((self.samples.len() + 1) * 8);
        for s in &self.samples {
            out.extend_from_slice(&s.offset.to_ne_bytes());
        }
        out.extend_from_slice(&self.end.to_ne_bytes());
        out
    }
}

/// A shard's scan built from its sample members in order, grouped as Energon groups them: a
/// new sample whenever the key changes.
#[derive(Default)]
pub struct ScanBuilder {
    samples: Vec<SampleRow>,
    parts: Vec<PartRow>,
}

impl ScanBuilder {
    /// Adds the member `part` of sample `key`, whose first header is at `offset`.
    pub fn add(&mut self, key: String, part: Part, offset: u64) {
        if self.samples.last().is_none_or(|s| s.key != key) {
            if let Some(prev) = self.samples.last_mut() {
                prev.size = offset - prev.offset;
            }
            self.samples.push(SampleRow {
                key,
                offset,
                size: 0,
            });
        }
        self.parts.push(PartRow {
            sample_index: self.samples.len() as u64 - 1,
            name: part.name,
            data_offset: part.data_offset,
            size: part.size,
        });
    }

    /// Where the second sample starts (the first one's end), once a member of it was added.
    #[must_use]
    pub fn second_sample(&self) -> Option<u64> {
        self.samples.get(1).map(|s| s.offset)
    }

    /// Samples with a member added so far.
    #[must_use]
    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    /// The scan, once the end-of-archive block was found at `end`.
    #[must_use]
    pub fn finish(mut self, end: u64) -> ShardScan {
        if let Some(last) = self.samples.last_mut() {
            last.size = end - last.offset;
        }
        ShardScan {
            samples: self.samples,
            parts: self.parts,
            end,
        }
    }
}

/// Reads the headers of one shard.
///
/// # Errors
///
/// `Error::Io` when the file cannot be read, `Error::Shard` when its bytes are not a tar.
#[expect(
    clippy::missing_panics_doc,
    reason = "its one expect is the reader's contract: it stops only at the end block"
)]
pub fn scan_shard(path: &Path) -> Result<ShardScan> {
    let mut reader = SampleReader::open(path, false)?;
    let mut scan = ScanBuilder::default();
    while let Some((key, part, offset)) = reader.next_part()? {
        scan.add(key, part, offset);
    }
    let end = reader
        .end_offset()
        .expect("reader stops only at the end block");
    Ok(scan.finish(end))
}

/// A 128-bit fingerprint of a key (XXH3-128): collisions are out of reach even for billions of
/// keys, and it costs far less memory than the keys.
#[must_use]
pub fn fingerprint(key: &str) -> u128 {
    xxh3_128(key.as_bytes())
}

/// The 96 top bits of a fingerprint, the registry's key: 12 bytes, so an entry with its shard
/// number takes 16. The chance that two of a billion distinct keys share them is about 1e-11.
#[derive(PartialEq, Eq, Clone, Copy)]
struct Print([u32; 3]);

impl Print {
    fn of(fingerprint: u128) -> Self {
        Self([
            (fingerprint >> 96) as u32,
            (fingerprint >> 64) as u32,
            (fingerprint >> 32) as u32,
        ])
    }
}

impl Hash for Print {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Already a hash: its bits are the table's hash.
        state.write_u64((u64::from(self.0[0]) << 32) | u64::from(self.0[1]));
    }
}

/// Hands on the u64 a `Print` writes: it is already a hash.
#[derive(Default)]
pub struct PrintHasher(u64);

impl Hasher for PrintHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Finds keys seen in more than one place, naming both shards. Holds 16 bytes per key in a
/// hash table (17 per slot; slots are 1.14 to 2.3 times the keys), so it is only used where no
/// sample table's UNIQUE index does the check.
#[derive(Default)]
pub struct KeyRegistry {
    seen: HashMap<Print, u32, BuildHasherDefault<PrintHasher>>,
}

impl KeyRegistry {
    /// Records `key` as seen in `shard` (an index into `names`, which the error quotes).
    ///
    /// # Errors
    ///
    /// `Error::DuplicateKey` when the key was added before.
    pub fn add(&mut self, key: &str, shard: u32, names: &[String]) -> Result<()> {
        self.add_print(fingerprint(key), key, shard, names)
    }

    /// As `add`, with the key's `fingerprint` already computed.
    ///
    /// # Errors
    ///
    /// `Error::DuplicateKey` when the key was added before.
    pub fn add_print(
        &mut self,
        print: u128,
        key: &str,
        shard: u32,
        names: &[String],
    ) -> Result<()> {
        match self.seen.entry(Print::of(print)) {
            Entry::Occupied(first) => Err(duplicate_key(key, *first.get(), shard, names)),
            Entry::Vacant(slot) => {
                slot.insert(shard);
                Ok(())
            }
        }
    }
}

/// The error for `key`, first seen in shard `first`, found again in shard `second`.
fn duplicate_key(key: &str, first: u32, second: u32, names: &[String]) -> Error {
    let (first, second) = (&names[first as usize], &names[second as usize]);
    Error::DuplicateKey {
        key: key.to_string(),
        first: first.clone(),
        second: if first == second {
            format!("{second} again (its members are not contiguous)")
        } else {
            second.clone()
        },
    }
}

/// What `build_index` found.
pub struct IndexSummary {
    /// (relative shard path, sample count), in the order given.
    pub shards: Vec<(String, u64)>,
    /// Distinct part names, at most 50.
    pub part_names: BTreeSet<String>,
}

const SCHEMA: &[&str] = &[
    // Energon 7.4.1's exact statements (flavors/webdataset/indexing.py).
    "CREATE TABLE IF NOT EXISTS samples (
                    tar_file_id INTEGER NOT NULL,
                    sample_key TEXT NOT NULL UNIQUE,
                    sample_index INTEGER NOT NULL,
                    byte_offset INTEGER,
                    byte_size INTEGER
                )",
    "CREATE TABLE IF NOT EXISTS sample_parts (
                    tar_file_id INTEGER,
                    sample_index INTEGER,
                    part_name TEXT,
                    content_byte_offset INTEGER,
                    content_byte_size INTEGER
                )",
];

const INDEXES: &[&str] = &[
    "CREATE INDEX IF NOT EXISTS idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size)",
];

struct SqliteSink {
    db: Connection,
}

impl SqliteSink {
    fn create(path: &Path) -> Result<Self> {
        let _ = fs::remove_file(path);
        let db = Connection::open(path)?;
        // Built under a temporary name and renamed at the end: no journal needed.
        db.execute_batch(
            "PRAGMA page_size = 65536; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; \
             PRAGMA locking_mode = EXCLUSIVE; PRAGMA cache_size = -262144; \
             PRAGMA temp_store = MEMORY; BEGIN;",
        )?;
        // Indexes exist before the rows: rows arrive in (tar_file_id, sample_index, offset)
        // order, so every index insert appends at the right edge and no sort is ever needed.
        for stmt in SCHEMA.iter().chain(INDEXES) {
            db.execute(stmt, [])?;
        }
        Ok(Self { db })
    }

    /// Inserts shard `tar_file_id`'s rows. `samples`' UNIQUE index on `sample_key` is the
    /// dataset's duplicate check: a key held twice fails the insert, reported naming both
    /// shards (`names`, by `tar_file_id`).
    fn insert(&mut self, tar_file_id: u32, scan: &ShardScan, names: &[String]) -> Result<()> {
        let id = i64::from(tar_file_id);
        // OR FAIL, not the default ABORT: a failed statement keeps the rows before the failing
        // one instead of undoing them, so SQLite keeps no statement journal (the database is
        // thrown away on any failure).
        let samples = insert_rows(
            &self.db,
            "INSERT OR FAIL INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size)",
            &scan.samples.iter().enumerate().collect::<Vec<_>>(),
            |st, at, &(i, s)| {
                st.raw_bind_parameter(at, id)?;
                st.raw_bind_parameter(at + 1, s.key.as_str())?;
                st.raw_bind_parameter(at + 2, i as i64)?;
                st.raw_bind_parameter(at + 3, s.offset as i64)?;
                st.raw_bind_parameter(at + 4, s.size as i64)
            },
        );
        match samples {
            Err(Error::Sqlite(e))
                if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) =>
            {
                return Err(self
                    .duplicate(tar_file_id, scan, names)?
                    .unwrap_or(Error::Sqlite(e)));
            }
            other => other?,
        }
        insert_rows(
            &self.db,
            "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size)",
            &scan.parts,
            |st, at, p| {
                st.raw_bind_parameter(at, id)?;
                st.raw_bind_parameter(at + 1, p.sample_index as i64)?;
                st.raw_bind_parameter(at + 2, p.name.as_str())?;
                st.raw_bind_parameter(at + 3, p.data_offset as i64)?;
                st.raw_bind_parameter(at + 4, p.size as i64)
            },
        )
    }

    /// The duplicate that failed the insert of shard `id`'s samples: its first sample whose key
    /// another row holds (its rows before that one are in the table, the rest are not).
    fn duplicate(&self, id: u32, scan: &ShardScan, names: &[String]) -> Result<Option<Error>> {
        let mut find = self
            .db
            .prepare("SELECT tar_file_id, sample_index FROM samples WHERE sample_key = ?")?;
        for (i, s) in scan.samples.iter().enumerate() {
            let held: Option<(i64, i64)> = find
                .query_row([s.key.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            match held {
                Some((tar, index)) if (tar, index) != (i64::from(id), i as i64) => {
                    return Ok(Some(duplicate_key(&s.key, tar as u32, id, names)));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    fn finish(self) -> Result<()> {
        self.db.execute_batch("COMMIT;")?;
        self.db.close().map_err(|(_, e)| Error::Sqlite(e))
    }
}

/// Rows per INSERT statement: one statement step per row costs more than the row itself.
const ROWS_PER_INSERT: usize = 64;

/// Inserts 5-column rows in order, many per statement; `bind` binds one row's five values
/// starting at the given parameter index.
fn insert_rows<R>(
    db: &Connection,
    head: &str,
    rows: &[R],
    bind: impl Fn(&mut rusqlite::Statement<'_>, usize, &R) -> rusqlite::Result<()>,
) -> Result<()> {
    let sql = |n: usize| format!("{head} VALUES {}", vec!["(?, ?, ?, ?, ?)"; n].join(", "));
    let mut chunks = rows.chunks_exact(ROWS_PER_INSERT);
    if rows.len() >= ROWS_PER_INSERT {
        let mut full = db.prepare_cached(&sql(ROWS_PER_INSERT))?;
        for chunk in &mut chunks {
            for (j, row) in chunk.iter().enumerate() {
                bind(&mut full, j * 5 + 1, row)?;
            }
            full.raw_execute()?;
        }
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut st = db.prepare(&sql(rest.len()))?;
        for (j, row) in rest.iter().enumerate() {
            bind(&mut st, j * 5 + 1, row)?;
        }
        st.raw_execute()?;
    }
    Ok(())
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Indexes `shards` (paths relative to `root`, in `tar_file_id` order): writes every
/// `<shard>.idx` and, when `sqlite` is given, that database file.
///
/// # Errors
///
/// `Error::Dataset` for no shards, a shard's read error, `Error::DuplicateKey`, or a failed
/// write; the files written so far under temporary names are removed then.
pub fn build_index(root: &Path, shards: &[String], sqlite: Option<&Path>) -> Result<IndexSummary> {
    if shards.is_empty() {
        return Err(Error::Dataset(format!(
            "no .tar shards found in {}",
            root.display()
        )));
    }
    let idx_paths: Vec<PathBuf> = shards
        .iter()
        .map(|s| root.join(format!("{s}.idx")))
        .collect();
    let sqlite_tmp = sqlite.map(tmp_name);
    let result = build_into_tmp(root, shards, &idx_paths, sqlite_tmp.as_deref());
    let mut finals: Vec<(PathBuf, PathBuf)> =
        idx_paths.iter().map(|p| (tmp_name(p), p.clone())).collect();
    if let (Some(tmp), Some(path)) = (sqlite_tmp, sqlite) {
        finals.push((tmp, path.to_path_buf()));
    }
    match result {
        Ok(summary) => {
            for (tmp, path) in &finals {
                fs::rename(tmp, path).map_err(io(path))?;
            }
            Ok(summary)
        }
        Err(e) => {
            for (tmp, _) in &finals {
                let _ = fs::remove_file(tmp);
            }
            Err(e)
        }
    }
}

fn build_into_tmp(
    root: &Path,
    shards: &[String],
    idx_paths: &[PathBuf],
    sqlite_tmp: Option<&Path>,
) -> Result<IndexSummary> {
    let chunk = (rayon::current_num_threads() * 4).max(4);
    let ids: Vec<usize> = (0..shards.len()).collect();
    // Each shard's scan, with its keys' fingerprints when the registry needs them.
    let (send, receive) = mpsc::sync_channel::<Vec<(usize, ShardScan, Vec<u128>)>>(2);

    std::thread::scope(|scope| {
        // The consumer: key checks and sqlite rows, strictly in shard order.
        let consumer = scope.spawn(move || -> Result<IndexSummary> {
            let mut sink = sqlite_tmp.map(SqliteSink::create).transpose()?;
            // Without the sample tables, the registry checks the keys.
            let mut keys = KeyRegistry::default();
            let mut summary = IndexSummary {
                shards: Vec::with_capacity(shards.len()),
                part_names: BTreeSet::new(),
            };
            for batch in receive {
                for (id, scan, prints) in batch {
                    for (s, &print) in scan.samples.iter().zip(&prints) {
                        keys.add_print(print, &s.key, id as u32, shards)?;
                    }
                    if summary.part_names.len() < MAX_PART_NAMES {
                        for p in &scan.parts {
                            if summary.part_names.len() < MAX_PART_NAMES {
                                summary.part_names.insert(p.name.clone());
                            }
                        }
                    }
                    if let Some(sink) = sink.as_mut() {
                        sink.insert(id as u32, &scan, shards)?;
                    }
                    summary
                        .shards
                        .push((shards[id].clone(), scan.samples.len() as u64));
                }
            }
            if let Some(sink) = sink {
                sink.finish()?;
            }
            Ok(summary)
        });

        // The producer: parallel header scans, each writing its own `.tar.idx.tmp`.
        let produced = (|| -> Result<()> {
            for group in ids.chunks(chunk) {
                let scans: Vec<_> = group
                    .par_iter()
                    .map(|&id| {
                        let scan = scan_shard(&root.join(&shards[id]))?;
                        let tmp = tmp_name(&idx_paths[id]);
                        fs::write(&tmp, scan.idx_bytes()).map_err(io(&tmp))?;
                        let prints = match sqlite_tmp {
                            Some(_) => Vec::new(),
                            None => scan.samples.iter().map(|s| fingerprint(&s.key)).collect(),
                        };
                        Ok((id, scan, prints))
                    })
                    .collect::<Result<_>>()?;
                if send.send(scans).is_err() {
                    break; // the consumer stopped on an error; it reports it
                }
            }
            Ok(())
        })();
        drop(send);
        let summary = consumer.join().expect("index writer thread panicked");
        produced?;
        summary
    })
}

/// Writes the `.tar.idx` of each of `scans` (`(shard, scan)`, paths relative to `root`, in
/// `tar_file_id` order from 0) and their rows into a new database at `sqlite`, refusing a key
/// found twice among them.
///
/// # Errors
///
/// `Error::DuplicateKey`, or the write's `Error::Io` or `Error::Sqlite`.
pub fn write_scans(root: &Path, scans: &[(String, &ShardScan)], sqlite: &Path) -> Result<()> {
    let names: Vec<String> = scans.iter().map(|(name, _)| name.clone()).collect();
    let mut sink = SqliteSink::create(sqlite)?;
    for (id, (name, scan)) in scans.iter().enumerate() {
        sink.insert(id as u32, scan, &names)?;
        let idx = root.join(format!("{name}.idx"));
        fs::write(&idx, scan.idx_bytes()).map_err(io(&idx))?;
    }
    sink.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar::ShardWriter;

    #[test]
    fn idx_points_at_samples_and_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(dir.path(), 10, "", 0).unwrap();
        for i in 0..3 {
            let key = format!("{i:010}");
            w.write(&key, &[("txt", vec![b'x'; 700]), ("json", b"{}".to_vec())])
                .unwrap();
        }
        w.close().unwrap();
        let scan = scan_shard(&dir.path().join("000000.tar")).unwrap();
        // Each sample: header + 2 data blocks, then header + 1 data block = 2560 bytes.
        let offsets: Vec<u64> = scan.samples.iter().map(|s| s.offset).collect();
        assert_eq!(offsets, vec![0, 2560, 5120]);
        assert_eq!(scan.end, 7680);
        assert_eq!(scan.parts.len(), 6);
        assert_eq!(scan.parts[1].data_offset, 1536 + 512);
        assert!(scan.samples.iter().all(|s| s.size == 2560));
    }

    #[test]
    fn duplicate_keys_across_shards_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for (n, first) in [(0u64, 0u64), (1, 1)] {
            let mut w = ShardWriter::new(dir.path(), 10, "", n).unwrap();
            for i in first..first + 2 {
                w.write(&format!("k{i}"), &[("txt", b"a")]).unwrap();
            }
            w.close().unwrap();
        }
        let shards = vec!["000000.tar".to_string(), "000001.tar".to_string()];
        let err = build_index(dir.path(), &shards, None).err().unwrap();
        let msg = err.to_string();
        assert!(
            msg.contains("\"k1\"") && msg.contains("000000.tar") && msg.contains("000001.tar"),
            "{msg}"
        );
        assert!(!dir.path().join("000000.tar.idx").exists());
        assert!(!dir.path().join("000000.tar.idx.tmp").exists());
    }

    /// A shard of empty members `names`, as a writer that interleaves them would leave it.
    fn raw_shard(path: &Path, names: &[&str]) {
        let mut bytes = Vec::new();
        for name in names {
            bytes.extend_from_slice(&crate::tar::header::build(name.as_bytes(), 0, b'0'));
        }
        bytes.extend_from_slice(&[0; 1024]);
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn sample_tables_report_duplicates_as_the_registry_does() {
        let dir = tempfile::tempdir().unwrap();
        raw_shard(&dir.path().join("a.tar"), &["k0.txt", "k1.txt", "k2.txt"]);
        raw_shard(&dir.path().join("b.tar"), &["k3.txt", "k2.txt", "k1.txt"]);
        raw_shard(&dir.path().join("c.tar"), &["k4.txt", "k5.txt", "k4.jpg"]);
        let sqlite = dir.path().join("index.sqlite");
        for (shards, expected) in [
            (vec!["a.tar", "b.tar"], "\"k2\": in a.tar and in b.tar;"),
            (
                vec!["c.tar"],
                "\"k4\": in c.tar and in c.tar again (its members are not contiguous);",
            ),
        ] {
            let shards: Vec<String> = shards.into_iter().map(String::from).collect();
            let without = build_index(dir.path(), &shards, None).err().unwrap();
            let with = build_index(dir.path(), &shards, Some(&sqlite))
                .err()
                .unwrap();
            assert!(with.to_string().contains(expected), "{with}");
            assert_eq!(with.to_string(), without.to_string());
            assert!(!sqlite.exists() && !tmp_name(&sqlite).exists());
        }
    }
}
