//! Stops a build whose JPEG decoder would lack SIMD, unless that is asked for (the rules and the
//! message are in `rust/jpeg_simd_check.rs`), and records what the native core is built from for
//! `shardcook --version` (`rust/build_info.rs` reads these as `SHARDCOOK_BUILD_*`).

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

#[path = "rust/jpeg_simd_check.rs"]
mod jpeg_simd_check;

fn main() {
    for path in ["build.rs", "rust/jpeg_simd_check.rs", "Cargo.lock"] {
        println!("cargo::rerun-if-changed={path}");
    }
    println!(
        "cargo::rerun-if-env-changed={}",
        jpeg_simd_check::ALLOW_SLOW_JPEG
    );

    let jconfig = jconfig_h();
    println!("cargo::rerun-if-changed={}", jconfig.display());
    let text = fs::read_to_string(&jconfig)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", jconfig.display()));
    let simd = jpeg_simd_check::simd_compiled(&text);
    let nasm = first_line_of("nasm", "-v");
    let allow_slow = env::var(jpeg_simd_check::ALLOW_SLOW_JPEG).as_deref() == Ok("1");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if let Some(sentence) = jpeg_simd_check::refusal(simd, nasm.as_deref(), allow_slow, &arch) {
        println!("cargo::error={sentence}");
        return;
    }

    let lock = fs::read_to_string("Cargo.lock").unwrap_or_default();
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let record = [
        ("JPEG_SIMD_COMPILED", simd.to_string()),
        ("NASM", nasm.unwrap_or_default()),
        (
            "RUSTC",
            first_line_of(&rustc, "--version").unwrap_or_default(),
        ),
        ("PROFILE", env::var("PROFILE").unwrap_or_default()),
        ("OPT_LEVEL", env::var("OPT_LEVEL").unwrap_or_default()),
        ("TARGET", env::var("TARGET").unwrap_or_default()),
    ];
    for (key, value) in record {
        println!("cargo::rustc-env=SHARDCOOK_BUILD_{key}={value}");
    }
    for (key, name) in [
        ("PYO3", "pyo3"),
        ("MOZJPEG_SYS", "mozjpeg-sys"),
        ("LIBWEBP_SYS", "libwebp-sys"),
        ("PNG", "png"),
        ("FAST_IMAGE_RESIZE", "fast_image_resize"),
    ] {
        let version = locked_version(&lock, name).unwrap_or("unknown");
        println!("cargo::rustc-env=SHARDCOOK_BUILD_{key}_VERSION={version}");
    }
}

/// The `jconfig.h` mozjpeg-sys generated: its include path reaches us as `DEP_JPEG_INCLUDE`.
fn jconfig_h() -> PathBuf {
    let include = env::var_os("DEP_JPEG_INCLUDE").expect("mozjpeg-sys sets DEP_JPEG_INCLUDE");
    env::split_paths(&include)
        .map(|dir| dir.join("jconfig.h"))
        .find(|path| path.is_file())
        .expect("mozjpeg-sys's include path holds jconfig.h")
}

/// The first line `program arg` prints, or None when it cannot run.
fn first_line_of(program: &str, arg: &str) -> Option<String> {
    let out = Command::new(program).arg(arg).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().map(|line| line.trim().to_string())
}

/// The version of `name` that Cargo.lock pins.
fn locked_version<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let entry = format!("name = \"{name}\"\nversion = \"");
    let (_, rest) = lock.split_once(&entry)?;
    rest.split('"').next()
}
