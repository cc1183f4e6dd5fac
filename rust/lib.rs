//! shardcook's native core: WebDataset tar shards, Energon indexes, and (with the `python`
//! feature) the thin PyO3 layer that exposes them as `shardcook._native`.

pub mod build_info;
pub mod check;
pub mod error;
pub mod image;
pub mod index;
pub mod tar;
pub mod walk;

#[cfg(test)]
mod jpeg_simd_check;

#[cfg(feature = "python")]
mod py;
