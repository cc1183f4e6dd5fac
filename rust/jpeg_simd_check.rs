//! The JPEG SIMD check that build.rs runs before the native core compiles (and `cargo test`
//! tests): mozjpeg-sys quietly builds libjpeg-turbo without SIMD when nasm is missing, with only
//! a cargo warning that pip hides, and the image core then runs 1.49x Pillow instead of 1.85x.

/// Set to `1` to build without JPEG SIMD on purpose (a portable, slower build).
pub const ALLOW_SLOW_JPEG: &str = "SHARDCOOK_ALLOW_SLOW_JPEG";

/// Whether libjpeg-turbo was compiled with its SIMD code, read from the `jconfig.h` that
/// mozjpeg-sys generated for it (it writes `#define WITH_SIMD 1` only then).
pub fn simd_compiled(jconfig_h: &str) -> bool {
    jconfig_h
        .lines()
        .any(|line| line.split_whitespace().eq(["#define", "WITH_SIMD", "1"]))
}

/// Whether `nasm -v` output names a nasm that libjpeg-turbo can use (mozjpeg-sys rejects 0.x).
pub fn nasm_usable(nasm_version: &str) -> bool {
    nasm_version.starts_with("NASM version") && !nasm_version.contains("NASM version 0.")
}

/// None when the build may go on; otherwise the one sentence that tells the user what to do.
/// `nasm_version` is what `nasm -v` printed, None when it could not run; `target_arch` is
/// cargo's (only x86 and `x86_64` assemble their SIMD code with nasm).
pub fn refusal(
    simd: bool,
    nasm_version: Option<&str>,
    allow_slow: bool,
    target_arch: &str,
) -> Option<String> {
    if simd || allow_slow {
        return None;
    }
    let opt_out = format!("or set {ALLOW_SLOW_JPEG}=1 for a portable build without JPEG SIMD");
    let slower = "the image core would run about a fifth slower (1.49x Pillow instead of 1.85x)";
    let install = "apt-get install nasm, dnf install nasm, brew install nasm or conda install nasm";
    let sentence = match (target_arch, nasm_version) {
        ("x86" | "x86_64", None) => format!(
            "nasm is not installed, so libjpeg-turbo would be built without SIMD and {slower}: \
             install it ({install}) and build again, {opt_out}."
        ),
        ("x86" | "x86_64", Some(found)) if !nasm_usable(found) => format!(
            "the installed nasm ({}) is too old for libjpeg-turbo's SIMD code, so {slower}: \
             install nasm 2 or later ({install}) and build again, {opt_out}.",
            found.trim()
        ),
        ("x86" | "x86_64", Some(_)) => format!(
            "libjpeg-turbo in this build folder was compiled without SIMD (nasm was missing \
             then), so {slower}: delete the target/ folder (or run `cargo clean -p mozjpeg-sys`) \
             and build again, {opt_out}."
        ),
        (arch, _) => format!(
            "libjpeg-turbo was built without SIMD for {arch} (its assembler was not found), so \
             {slower}: install the C toolchain's assembler and build again, {opt_out}."
        ),
    };
    Some(sentence)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITH_SIMD: &str = "#define JPEG_LIB_VERSION 80\n#define WITH_SIMD 1\n";
    const WITHOUT_SIMD: &str = "#define JPEG_LIB_VERSION 80\n";
    const NASM: &str = "NASM version 2.16.01\n";

    #[test]
    fn reads_simd_from_jconfig() {
        assert!(simd_compiled(WITH_SIMD));
        assert!(!simd_compiled(WITHOUT_SIMD));
        assert!(!simd_compiled(
            "/* #define WITH_SIMD 1 */\n#define WITH_SIMD_X 1\n"
        ));
    }

    #[test]
    fn a_simd_build_or_an_explicit_opt_out_goes_on() {
        assert_eq!(refusal(true, None, false, "x86_64"), None);
        assert_eq!(refusal(true, Some(NASM), false, "x86_64"), None);
        assert_eq!(refusal(false, None, true, "x86_64"), None);
    }

    #[test]
    fn missing_nasm_stops_with_the_package_and_the_opt_out() {
        let sentence = refusal(false, None, false, "x86_64").unwrap();
        assert!(sentence.starts_with("nasm is not installed"), "{sentence}");
        assert!(sentence.contains("apt-get install nasm"), "{sentence}");
        assert!(
            sentence.contains("SHARDCOOK_ALLOW_SLOW_JPEG=1"),
            "{sentence}"
        );
        assert!(
            !sentence.contains('\n') && sentence.ends_with('.'),
            "one sentence: {sentence}"
        );
    }

    #[test]
    fn an_old_nasm_and_a_stale_build_folder_have_their_own_advice() {
        let old = refusal(false, Some("NASM version 0.98.39\n"), false, "x86").unwrap();
        assert!(old.contains("too old") && old.contains("0.98.39"), "{old}");
        let stale = refusal(false, Some(NASM), false, "x86_64").unwrap();
        assert!(stale.contains("delete the target/ folder"), "{stale}");
    }

    #[test]
    fn other_architectures_do_not_ask_for_nasm() {
        let sentence = refusal(false, None, false, "aarch64").unwrap();
        assert!(
            sentence.contains("aarch64") && !sentence.contains("nasm"),
            "{sentence}"
        );
    }
}
