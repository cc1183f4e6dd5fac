//! Counting and verifying shards: what `validate` relies on to say a dataset is whole.

use std::path::Path;

use rayon::prelude::*;

use crate::error::Result;
use crate::index::{scan_shard, KeyRegistry};
use crate::tar::SampleReader;

/// Counts the samples of one shard, reading headers only.
///
/// # Errors
///
/// `Error::Io` when the file cannot be read, `Error::Shard` when its bytes are not a tar.
pub fn count_samples(path: &Path) -> Result<u64> {
    let mut reader = SampleReader::open(path, false)?;
    let mut count = 0;
    while reader.next_sample()?.is_some() {
        count += 1;
    }
    Ok(count)
}

/// What verifying one shard found.
pub struct ShardReport {
    pub name: String,
    /// Samples found by a fresh scan; `None` when the shard could not be read.
    pub count: Option<u64>,
    /// One sentence per problem.
    pub problems: Vec<String>,
}

/// Compares the `.tar.idx` on disk with a fresh scan, entry by entry.
fn idx_problems(name: &str, idx_path: &Path, expected: &[u8]) -> Vec<String> {
    let Ok(found) = std::fs::read(idx_path) else {
        return vec![format!(
            "{name}: the index file {name}.idx is missing; run `shardcook finalize --force`"
        )];
    };
    if found == expected {
        return vec![];
    }
    if found.len() != expected.len() {
        return vec![format!(
            "{name}.idx has {} entries where the shard needs {} (samples + 1); run `shardcook finalize --force`",
            found.len() / 8,
            expected.len() / 8
        )];
    }
    let entry = found
        .chunks(8)
        .zip(expected.chunks(8))
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    vec![format!(
        "{name}.idx entry {entry} does not point at the start of sample {entry}; run `shardcook finalize --force`"
    )]
}

/// Verifies shards (relative to `root`) against their `.tar.idx` files and expected counts, and
/// checks that keys are unique across all of them. Returns one report per shard, then the
/// dataset-wide problems.
#[must_use]
pub fn verify_shards(
    root: &Path,
    shards: &[(String, Option<u64>)],
) -> (Vec<ShardReport>, Vec<String>) {
    let scans: Vec<_> = shards
        .par_iter()
        .map(|(name, _)| scan_shard(&root.join(name)))
        .collect();
    let names: Vec<String> = shards.iter().map(|(n, _)| n.clone()).collect();
    let mut keys = KeyRegistry::default();
    let mut dataset_problems = Vec::new();
    let mut reports = Vec::with_capacity(shards.len());
    for (id, ((name, expected), scan)) in shards.iter().zip(scans).enumerate() {
        let mut report = ShardReport {
            name: name.clone(),
            count: None,
            problems: vec![],
        };
        match scan {
            Err(e) => report.problems.push(e.to_string()),
            Ok(scan) => {
                let count = scan.samples.len() as u64;
                report.count = Some(count);
                if let Some(expected) = expected {
                    if *expected != count {
                        report.problems.push(format!(
                            "{name}: .info.json says {expected} samples but the shard holds {count}"
                        ));
                    }
                }
                let idx_path = root.join(format!("{name}.idx"));
                report
                    .problems
                    .extend(idx_problems(name, &idx_path, &scan.idx_bytes()));
                for s in &scan.samples {
                    if let Err(e) = keys.add(&s.key, id as u32, &names) {
                        dataset_problems.push(e.to_string());
                    }
                }
            }
        }
        reports.push(report);
    }
    (reports, dataset_problems)
}
