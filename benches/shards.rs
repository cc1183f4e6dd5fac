//! Criterion benches for the shard core: writing, reading, counting and indexing.
//! Run with `cargo bench --bench shards`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use _native::check::count_samples;
use _native::index::build_index;
use _native::tar::{SampleReader, ShardWriter};

const SAMPLES: u64 = 1000;

/// 4 parts of about 2 KB per sample, like the Python side-by-side bench.
fn parts() -> Vec<(&'static str, Vec<u8>)> {
    [
        "latents.pth",
        "prompt_embeds.pth",
        "caption.txt",
        "meta.json",
    ]
    .iter()
    .map(|p| (*p, vec![7u8; 2000]))
    .collect()
}

fn write_dataset(dir: &Path, shards: u64) {
    let mut w = ShardWriter::new(dir, SAMPLES, "", 0).unwrap();
    let parts = parts();
    for i in 0..shards * SAMPLES {
        w.write(&format!("{i:010}"), &parts).unwrap();
    }
    w.close().unwrap();
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("shards");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SAMPLES));
    g.bench_function("write 1000 samples", |b| {
        b.iter_with_setup(
            || tempfile::tempdir().unwrap(),
            |dir| write_dataset(dir.path(), 1),
        );
    });

    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), 20);
    let shard = dir.path().join("000000.tar");
    g.bench_function("read 1000 samples", |b| {
        b.iter(|| SampleReader::open(&shard, true).unwrap().count());
    });
    g.bench_function("count 1000 samples", |b| {
        b.iter(|| count_samples(&shard).unwrap());
    });

    let shards: Vec<String> = (0..20).map(|i| format!("{i:06}.tar")).collect();
    g.throughput(Throughput::Elements(20 * SAMPLES));
    for sqlite in [false, true] {
        g.bench_with_input(
            BenchmarkId::new("index 20x1000", if sqlite { "sqlite" } else { "idx only" }),
            &sqlite,
            |b, &sqlite| {
                let db = dir.path().join("index.sqlite");
                b.iter(|| {
                    build_index(dir.path(), &shards, sqlite.then_some(db.as_path())).unwrap()
                });
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
