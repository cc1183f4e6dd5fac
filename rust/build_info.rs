//! What this native core was built from (recorded by build.rs) and what its decoders and
//! resizer use on this CPU (asked at run time), for `shardcook --version`.

use std::ffi::c_int;

use fast_image_resize::{CpuExtensions, Resizer};

extern "C" {
    // libjpeg-turbo's SIMD dispatch (simd/*/jsimd.c, or jsimd_none.c without SIMD): nonzero
    // when the SIMD inverse DCT and colour conversion are compiled in and this CPU runs them.
    fn jsimd_can_idct_islow() -> c_int;
    fn jsimd_can_ycc_rgb() -> c_int;
}

/// The JPEG decoder: libjpeg-turbo through mozjpeg-sys.
#[derive(Debug, Clone)]
pub struct JpegBuild {
    pub library: String,
    /// libjpeg-turbo was compiled with its SIMD code.
    pub simd_compiled: bool,
    /// The SIMD inverse DCT and colour conversion run on this CPU.
    pub simd_active: bool,
    /// `nasm -v` at build time ("" when it was not found).
    pub nasm: String,
}

/// The native core's build and its run-time choices.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: &'static str,
    pub profile: &'static str,
    pub opt_level: &'static str,
    pub target: &'static str,
    pub rustc: &'static str,
    pub pyo3: &'static str,
    pub jpeg: JpegBuild,
    pub webp: String,
    pub png: String,
    /// The resizer crate and version.
    pub resizer: String,
    /// The SIMD extension `fast_image_resize` picked for this CPU: `avx2`, `sse4_1`, `neon` or
    /// `none`.
    pub resizer_cpu_extensions: String,
}

/// libwebp's decoder version as "major.minor.revision".
fn webp_decoder_version() -> String {
    // SAFETY: a pure function of the linked library.
    let v = unsafe { libwebp_sys::WebPGetDecoderVersion() };
    format!("{}.{}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}

fn cpu_extensions_name(extensions: CpuExtensions) -> String {
    format!("{extensions:?}").to_lowercase()
}

/// This build, with the JPEG SIMD and resizer extensions as they are on this CPU.
#[must_use]
pub fn build_info() -> BuildInfo {
    // SAFETY: both only read libjpeg-turbo's CPU detection (run once, idempotent).
    let simd_active = unsafe { jsimd_can_idct_islow() != 0 && jsimd_can_ycc_rgb() != 0 };
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        profile: env!("SHARDCOOK_BUILD_PROFILE"),
        opt_level: env!("SHARDCOOK_BUILD_OPT_LEVEL"),
        target: env!("SHARDCOOK_BUILD_TARGET"),
        rustc: env!("SHARDCOOK_BUILD_RUSTC"),
        pyo3: env!("SHARDCOOK_BUILD_PYO3_VERSION"),
        jpeg: JpegBuild {
            library: format!(
                "libjpeg-turbo (mozjpeg-sys {})",
                env!("SHARDCOOK_BUILD_MOZJPEG_SYS_VERSION")
            ),
            simd_compiled: env!("SHARDCOOK_BUILD_JPEG_SIMD_COMPILED") == "true",
            simd_active,
            nasm: env!("SHARDCOOK_BUILD_NASM").to_string(),
        },
        webp: format!(
            "libwebp {} (libwebp-sys {})",
            webp_decoder_version(),
            env!("SHARDCOOK_BUILD_LIBWEBP_SYS_VERSION")
        ),
        png: format!("png {} (Rust)", env!("SHARDCOOK_BUILD_PNG_VERSION")),
        resizer: format!(
            "fast_image_resize {}",
            env!("SHARDCOOK_BUILD_FAST_IMAGE_RESIZE_VERSION")
        ),
        resizer_cpu_extensions: cpu_extensions_name(Resizer::new().cpu_extensions()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_is_active_only_when_compiled_in() {
        let info = build_info();
        assert!(
            info.jpeg.simd_compiled || !info.jpeg.simd_active,
            "{info:?}"
        );
    }

    #[test]
    fn versions_are_recorded() {
        let info = build_info();
        for field in [info.rustc, info.pyo3, info.profile, info.target] {
            assert!(!field.is_empty() && field != "unknown", "{info:?}");
        }
        assert!(info.rustc.starts_with("rustc "), "{}", info.rustc);
        assert!(info.webp.starts_with("libwebp 1."), "{}", info.webp);
    }

    #[test]
    fn resizer_names_an_extension_this_cpu_supports() {
        let picked = Resizer::new().cpu_extensions();
        assert!(picked.is_supported());
        assert_eq!(
            build_info().resizer_cpu_extensions,
            cpu_extensions_name(picked)
        );
    }
}
