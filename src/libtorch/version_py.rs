//! The version in a torch package's `version.py`. Std only: the `tchseq` launcher, which links no
//! libtorch, and build.rs compile this file too.

/// `__version__ = '2.13.0+cu130'` -> `2.13.0+cu130`.
pub fn parse_version_py(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("__version__"))
        .map(|rest| rest.trim_start_matches([' ', '=']).trim().trim_matches(['\'', '"']).to_string())
}

/// `2.13.0+cu130` -> `2.13.0`: the release, without its local build tag.
pub fn release(version: &str) -> &str {
    version.split('+').next().unwrap_or(version)
}

/// `2.13.0+cu130` -> `2.13`: the release series whose libtorch a build links against.
pub fn series(version: &str) -> &str {
    let release = release(version);
    match release.match_indices('.').nth(1) {
        Some((at, _)) => &release[..at],
        None => release,
    }
}
