//! Facts about the libtorch this process runs on.

use std::path::PathBuf;

/// The libtorch lib directory the crate was linked against (and whose rpath the binary carries).
pub const BUILD_LIB_DIR: &str = env!("TCHSEQ_LIBTORCH_LIB");
/// The torch version found in that directory at build time.
pub const BUILD_VERSION: &str = env!("TCHSEQ_LIBTORCH_BUILD_VERSION");

/// The directory of the `libtorch_cpu` actually mapped into this process (Linux only).
pub fn loaded_library_dir() -> Option<PathBuf> {
    // Any call into libtorch makes sure the library is loaded before we look.
    let _ = tch::get_num_threads();
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("libtorch_cpu."))
        .and_then(|path| PathBuf::from(path).parent().map(PathBuf::from))
}

/// The torch version of the loaded library (from `torch/version.py` beside it), else the
/// version seen at build time.
pub fn version() -> String {
    loaded_library_dir()
        .and_then(|dir| std::fs::read_to_string(dir.join("../version.py")).ok())
        .and_then(|text| {
            text.lines().find_map(|l| l.strip_prefix("__version__")).map(|rest| {
                rest.trim_start_matches([' ', '='])
                    .trim()
                    .trim_matches(['\'', '"'])
                    .to_string()
            })
        })
        .unwrap_or_else(|| BUILD_VERSION.to_string())
}
