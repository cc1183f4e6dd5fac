//! The deterministic shard writer (docs/FORMAT.md §2): every member a regular file, mode 0644,
//! uid/gid 0, mtime 0; a shard is written under `.shardcook/tmp/`, fsync'd, then renamed, so a
//! file with a final name is always complete.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use super::header::{self, PAX_LOCAL, REGULAR};
use super::{names, padded, BLOCK};
use crate::error::{io, Error, Result};

/// Where shards are written before they get their final name. The writer owns this folder:
/// callers name neither it nor the partial files in it.
pub const TMP_DIR: &str = ".shardcook/tmp";

/// The suffix of a shard still being written, so Energon never takes it for a shard.
const PARTIAL_SUFFIX: &str = ".partial";

/// The file name of shard `number` with `prefix`: `{prefix}{number:06}.tar`.
#[must_use]
pub fn shard_file_name(prefix: &str, number: u64) -> String {
    format!("{prefix}{number:06}.tar")
}

/// Removes the partial shards a killed run left in `dir`'s tmp folder; returns how many.
///
/// Only for a folder no writer is using: a live writer's open shard would go too.
///
/// # Errors
///
/// `Error::Io` when the tmp folder cannot be listed or a partial shard cannot be removed.
pub fn remove_partial_shards(dir: &Path) -> Result<u64> {
    let tmp = dir.join(TMP_DIR);
    let entries = match fs::read_dir(&tmp) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(&tmp)(e)),
    };
    let mut removed = 0;
    for entry in entries {
        let path = entry.map_err(io(&tmp))?.path();
        let partial = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(PARTIAL_SUFFIX));
        if partial && path.is_file() {
            fs::remove_file(&path).map_err(io(&path))?;
            removed += 1;
        }
    }
    Ok(removed)
}

struct OpenShard {
    name: String,
    tmp_path: PathBuf,
    out: BufWriter<File>,
    count: u64,
}

/// Writes samples into numbered shards of `shard_size` samples each.
pub struct ShardWriter {
    dir: PathBuf,
    shard_size: u64,
    prefix: String,
    next_shard: u64,
    current: Option<OpenShard>,
    /// Completed shards being fsync'd and renamed in the background, oldest first, so the next
    /// shard is written while the disk flushes the last one.
    syncing: Vec<JoinHandle<Result<(String, u64)>>>,
    written: Vec<(String, u64)>,
    keys: HashSet<String>,
}

/// Shards allowed to be in flight to the disk at once; more waits for the oldest.
const MAX_SYNCING: usize = 2;

const ZEROS: [u8; 1024] = [0; 1024];

impl ShardWriter {
    /// Shards are named `{prefix}{n:06}.tar`, starting at `first_shard`.
    ///
    /// # Errors
    ///
    /// `Error::Config` for a zero `shard_size`, `Error::InvalidName` for a prefix with '/', and
    /// `Error::Io` when the tmp folder cannot be made.
    pub fn new(dir: &Path, shard_size: u64, prefix: &str, first_shard: u64) -> Result<Self> {
        if shard_size == 0 {
            return Err(Error::Config("shard_size must be at least 1, not 0".into()));
        }
        if prefix.contains('/') {
            return Err(Error::InvalidName(format!(
                "shard name prefix {prefix:?} may not contain '/'"
            )));
        }
        let tmp = dir.join(TMP_DIR);
        fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            shard_size,
            prefix: prefix.to_string(),
            next_shard: first_shard,
            current: None,
            syncing: Vec::new(),
            written: Vec::new(),
            keys: HashSet::new(),
        })
    }

    /// Appends one sample; `parts` are written in the order given.
    ///
    /// # Errors
    ///
    /// `Error::InvalidName` for a bad, repeated or part-less sample, `Error::Dataset` when the
    /// next shard exists, and `Error::Io` when writing fails.
    pub fn write<B: AsRef<[u8]>>(&mut self, key: &str, parts: &[(&str, B)]) -> Result<()> {
        names::check_key(key)?;
        if parts.is_empty() {
            return Err(Error::InvalidName(format!(
                "sample {key:?} has no parts; give at least one"
            )));
        }
        for (i, (part, _)) in parts.iter().enumerate() {
            names::check_part(key, part)?;
            if parts[..i].iter().any(|(p, _)| p == part) {
                return Err(Error::InvalidName(format!(
                    "sample {key:?} has part {part:?} twice"
                )));
            }
        }
        if self.keys.contains(key) {
            return Err(Error::InvalidName(format!(
                "sample key {key:?} was already written; keys must be unique across the dataset"
            )));
        }
        let shard = if let Some(shard) = &mut self.current {
            shard
        } else {
            let opened = self.open_next()?;
            self.current.insert(opened)
        };
        let path = &shard.tmp_path;
        for (part, data) in parts {
            let name = format!("{key}.{part}");
            write_member(&mut shard.out, &name, data.as_ref()).map_err(io(path))?;
        }
        shard.count += 1;
        self.keys.insert(key.to_string());
        if shard.count == self.shard_size {
            self.finish_current()?;
        }
        Ok(())
    }

    fn open_next(&mut self) -> Result<OpenShard> {
        let name = shard_file_name(&self.prefix, self.next_shard);
        self.next_shard += 1;
        let final_path = self.dir.join(&name);
        if final_path.exists() {
            return Err(Error::Dataset(format!(
                "{} already exists; write into an empty folder or remove it first",
                final_path.display()
            )));
        }
        // Not ending in .tar, so Energon never mistakes a half-written shard for a shard.
        let tmp_path = self
            .dir
            .join(TMP_DIR)
            .join(format!("{name}{PARTIAL_SUFFIX}"));
        let file = File::create(&tmp_path).map_err(io(&tmp_path))?;
        Ok(OpenShard {
            name,
            tmp_path,
            out: BufWriter::with_capacity(1 << 20, file),
            count: 0,
        })
    }

    fn finish_current(&mut self) -> Result<()> {
        let Some(mut shard) = self.current.take() else {
            return Ok(());
        };
        let tmp = shard.tmp_path.clone();
        shard.out.write_all(&ZEROS).map_err(io(&tmp))?;
        let file = shard.out.into_inner().map_err(|e| Error::Io {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        let dir = self.dir.clone();
        let (name, count) = (shard.name, shard.count);
        self.syncing.push(std::thread::spawn(move || {
            file.sync_all().map_err(io(&tmp))?;
            let final_path = dir.join(&name);
            fs::rename(&tmp, &final_path).map_err(io(&final_path))?;
            if let Ok(dir) = File::open(&dir) {
                let _ = dir.sync_all(); // persist the rename; not all filesystems allow it
            }
            Ok((name, count))
        }));
        if self.syncing.len() > MAX_SYNCING {
            self.join_oldest()?;
        }
        Ok(())
    }

    fn join_oldest(&mut self) -> Result<()> {
        let handle = self.syncing.remove(0);
        let done = handle.join().expect("shard sync thread panicked")?;
        self.written.push(done);
        Ok(())
    }

    /// Completes the open shard and returns every shard written, with its sample count.
    ///
    /// # Errors
    ///
    /// `Error::Io` when a shard cannot be written, synced or renamed into place.
    pub fn close(&mut self) -> Result<Vec<(String, u64)>> {
        self.finish_current()?;
        while !self.syncing.is_empty() {
            self.join_oldest()?;
        }
        Ok(self.written.clone())
    }

    /// Drops the shard being written, leaving finished shards in place.
    pub fn abort(&mut self) {
        if let Some(shard) = self.current.take() {
            drop(shard.out);
            let _ = fs::remove_file(&shard.tmp_path);
        }
        // Completed shards still become final: they are whole.
        for handle in self.syncing.drain(..) {
            let _ = handle.join();
        }
    }

    #[must_use]
    pub fn samples_in_open_shard(&self) -> u64 {
        self.current.as_ref().map_or(0, |s| s.count)
    }
}

impl Drop for ShardWriter {
    /// A writer dropped without `close` leaves no partial shard behind.
    fn drop(&mut self) {
        self.abort();
    }
}

/// One member: a PAX header first when the name does not fit in 100 bytes.
fn write_member(out: &mut impl Write, name: &str, data: &[u8]) -> std::io::Result<()> {
    let bytes = name.as_bytes();
    let short: &[u8] = if bytes.len() <= 100 {
        bytes
    } else {
        let pax = header::pax_path(name);
        out.write_all(&header::build(
            b"././@PaxHeader",
            pax.len() as u64,
            PAX_LOCAL,
        ))?;
        write_padded(out, &pax)?;
        // The ustar name field keeps a truncated copy, as tarfile does.
        let mut cut = 100;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        &bytes[..cut]
    };
    out.write_all(&header::build(short, data.len() as u64, REGULAR))?;
    write_padded(out, data)
}

fn write_padded(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    out.write_all(data)?;
    let pad = (padded(data.len() as u64) - data.len() as u64) as usize;
    debug_assert!(pad < BLOCK as usize);
    out.write_all(&ZEROS[..pad])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_names_its_shards_and_clears_only_partial_ones() {
        assert_eq!(shard_file_name("", 7), "000007.tar");
        assert_eq!(
            shard_file_name("val-shard-", 1_234_567),
            "val-shard-1234567.tar"
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(remove_partial_shards(dir.path()).unwrap(), 0); // no tmp folder yet
        let mut w = ShardWriter::new(dir.path(), 2, "p-", 3).unwrap();
        w.write("a", &[("txt", b"1")]).unwrap();
        let tmp = dir.path().join(TMP_DIR);
        fs::write(tmp.join("notes"), b"kept").unwrap();
        drop(w); // dropping an open shard removes it already; leave one as a killed run would
        fs::write(tmp.join("p-000004.tar.partial"), b"cut off").unwrap();
        assert_eq!(remove_partial_shards(dir.path()).unwrap(), 1);
        let left: Vec<_> = fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["notes"]);
        let e = ShardWriter::new(dir.path(), 0, "", 0).err().unwrap();
        assert_eq!(e.kind(), "config");
    }
}
