//! WebDataset tar shards: a deterministic writer, a streaming reader, and Energon's rules for
//! turning member names into samples.

pub(crate) mod header;
pub mod names;
pub mod reader;
pub mod writer;

pub use reader::{Entry, Sample, SampleReader, TarReader};
pub use writer::ShardWriter;

/// Size of a tar block.
pub const BLOCK: u64 = 512;

/// Rounds a data size up to whole blocks.
#[must_use]
pub fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK) * BLOCK
}

#[cfg(test)]
mod round_trip {
    use super::{SampleReader, ShardWriter};
    use proptest::prelude::*;

    fn sample() -> impl Strategy<Value = (String, Vec<(String, Vec<u8>)>)> {
        let key = "[a-zA-Z0-9_-]{1,12}".prop_filter("not metadata", |k| !k.starts_with("__"));
        let part = "[a-z]{1,6}(\\.[a-z0-9]{1,4}){0,2}|[a-z]{101,130}";
        let parts = proptest::collection::btree_map(
            part,
            proptest::collection::vec(any::<u8>(), 0..1200),
            1..4,
        );
        (key, parts.prop_map(|m| m.into_iter().collect()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// What the writer writes, the reader reads back: same keys, parts, order and bytes.
        #[test]
        fn written_samples_read_back(samples in proptest::collection::vec(sample(), 1..10), size in 1u64..4) {
            let mut seen = std::collections::HashSet::new();
            let samples: Vec<_> = samples.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect();
            let dir = tempfile::tempdir().unwrap();
            let mut w = ShardWriter::new(dir.path(), size, "", 0).unwrap();
            for (key, parts) in &samples {
                let refs: Vec<(&str, &Vec<u8>)> = parts.iter().map(|(n, d)| (n.as_str(), d)).collect();
                w.write(key, &refs).unwrap();
            }
            let shards = w.close().unwrap();
            let mut back = Vec::new();
            for (name, count) in &shards {
                let got: Vec<_> = SampleReader::open(&dir.path().join(name), true).unwrap()
                    .map(|s| s.unwrap()).collect();
                prop_assert_eq!(got.len() as u64, *count);
                for s in got {
                    back.push((s.key, s.parts.into_iter().map(|p| (p.name, p.data.unwrap())).collect::<Vec<_>>()));
                }
            }
            prop_assert_eq!(back, samples);
        }
    }
}
