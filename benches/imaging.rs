//! Criterion benches for the image core: decode (JPEG full and DCT-scaled, PNG, WebP), the
//! box resize alone, and the whole preprocess of one image. Inputs are generated here (a
//! textured 3072×2048 picture), so the bench needs no files: `cargo bench --bench imaging`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

use _native::image::{
    decode, default_buckets, encode, geometry, preprocess_one, resize, Filter, Mode, Options,
    DEFAULT_MAX_PIXELS,
};

/// A deterministic picture with edges and texture at every scale (not a flat gradient, which
/// would compress and decode unrealistically fast).
fn picture(w: u32, h: u32) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .flat_map(|(x, y)| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state & 31) as u32;
            let rings =
                (((f64::from(x) - 1500.0).hypot(f64::from(y) - 900.0) / 7.0).sin() * 60.0) as i32;
            let tiles = if (x / 96 + y / 64) % 2 == 0 { 40 } else { -40 };
            let r = (x * 255 / w) as i32 + rings + noise as i32 / 2;
            let g = (y * 255 / h) as i32 + tiles + noise as i32 / 2;
            let b = 128 + rings / 2 - tiles / 2 + noise as i32;
            [r, g, b].map(|v| v.clamp(0, 255) as u8)
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let (w, h) = (3072u32, 2048u32);
    let rgb = picture(w, h);
    let jpg = encode(&rgb, w, h, "jpg", 90).unwrap();
    let png = encode(&rgb, w, h, "png", 90).unwrap();
    let webp = encode(&rgb, w, h, "webp", 90).unwrap();

    let mut g = c.benchmark_group("decode_6mp");
    g.sample_size(10);
    for denom in [1u32, 2, 8] {
        g.bench_function(format!("jpeg_1/{denom}"), |b| {
            b.iter(|| {
                decode::decode(black_box(&jpg), DEFAULT_MAX_PIXELS, |_| {
                    Ok(decode::Request { denom, rows: None })
                })
                .unwrap()
            });
        });
    }
    let full = |_: &decode::Header| {
        Ok(decode::Request {
            denom: 1,
            rows: None,
        })
    };
    g.bench_function("png", |b| {
        b.iter(|| decode::decode(black_box(&png), DEFAULT_MAX_PIXELS, full).unwrap());
    });
    g.bench_function("webp_lossy", |b| {
        b.iter(|| decode::decode(black_box(&webp), DEFAULT_MAX_PIXELS, full).unwrap());
    });
    g.finish();

    let mut g = c.benchmark_group("resize_lanczos3");
    g.sample_size(10);
    for size in [256u32, 1024] {
        let geo = geometry(w, h, &Mode::Crop { size }).unwrap();
        g.bench_function(format!("6mp_crop_to_{size}"), |b| {
            b.iter(|| {
                resize::resize(
                    black_box(&rgb),
                    w,
                    h,
                    geo.source,
                    size,
                    size,
                    Filter::Lanczos3,
                )
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("preprocess_6mp_jpeg");
    g.sample_size(10);
    for (name, mode) in [
        ("crop_256", Mode::Crop { size: 256 }),
        ("crop_1024", Mode::Crop { size: 1024 }),
        (
            "bucket_1024",
            Mode::Bucket {
                buckets: default_buckets(1024),
            },
        ),
    ] {
        let options = Options {
            mode,
            filter: Filter::Lanczos3,
            max_pixels: DEFAULT_MAX_PIXELS,
        };
        g.bench_function(name, |b| {
            b.iter(|| preprocess_one(black_box(&jpg), &options).unwrap());
        });
    }
    g.finish();
}

criterion_group!(imaging, benches);
criterion_main!(imaging);
