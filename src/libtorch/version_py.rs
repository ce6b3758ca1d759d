//! The version in a torch package's `version.py`. Std only: the `tchseq` launcher, which links no
//! libtorch, and build.rs compile this file too.

/// `__version__ = '2.13.0+cu130'` -> `2.13.0+cu130`.
pub fn parse_version_py(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("__version__"))
        .map(|rest| rest.trim_start_matches([' ', '=']).trim().trim_matches(['\'', '"']).to_string())
}
