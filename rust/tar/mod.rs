//! WebDataset tar shards: a deterministic writer, a streaming reader, and Energon's rules for
//! turning member names into samples.

mod header;
pub mod names;
pub mod reader;
pub mod writer;

pub use reader::{Entry, Sample, SampleReader, TarReader};
pub use writer::ShardWriter;

/// Size of a tar block.
pub const BLOCK: u64 = 512;

/// Rounds a data size up to whole blocks.
pub fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK) * BLOCK
}
