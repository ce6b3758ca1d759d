//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The built `tchseq` binary with `--threads` set to [`test_threads`].
pub fn tchseq() -> assert_cmd::Command {
    let mut cmd = tchseq_bare();
    cmd.arg("--threads").arg(test_threads().to_string());
    cmd
}

/// The built `tchseq` binary, run with no environment tweaks (it must find libtorch on its own;
/// cargo's `[env]` would hand it `LIBTORCH`) and no `--threads`.
pub fn tchseq_bare() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_tchseq"));
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("LIBTORCH").env_remove("VIRTUAL_ENV");
    cmd
}

/// The intra-op thread count the tests run with: `TCHSEQ_TEST_THREADS`, else 1 (the goldens'
/// own). Every comparison with a golden holds at any thread count.
pub fn test_threads() -> usize {
    match std::env::var("TCHSEQ_TEST_THREADS") {
        Ok(v) => v.trim().parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| panic!("TCHSEQ_TEST_THREADS={v:?} is not a thread count")),
        Err(_) => 1,
    }
}

/// Sets libtorch's intra-op threads of this test process to [`test_threads`].
pub fn set_test_threads() {
    tch::set_num_threads(test_threads() as i32);
}

/// `tests/fixtures/...`
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// A path relative to the repository root.
pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
