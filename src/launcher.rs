//! `tchseq`: finds libtorch, then becomes `tchseq-core` (the program itself, beside this file's
//! binary) with that libtorch on the library path.
//!
//! The program links `libtorch_cpu` and `libc10`, and the dynamic loader must find them before
//! any of its code runs. This launcher links neither, so it can look for them first: the binary
//! and its libtorch can then be moved, packaged or installed with `cargo install`. It replaces
//! itself with `exec`, so the process id, signals, stdin and stdout stay those of one process.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[path = "libtorch/version_py.rs"]
mod version_py;
#[path = "libtorch/omp_wait.rs"]
mod omp_wait;
#[path = "libtorch/startup_pages.rs"]
mod startup_pages;

/// The torch package whose libtorch tchseq was built against (`version.py`), or `unknown`.
const BUILD_VERSION: &str = env!("TCHSEQ_LIBTORCH_BUILD_VERSION");
/// The libtorch lib directory seen at build time (the last place looked).
const BUILD_LIB_DIR: &str = env!("TCHSEQ_LIBTORCH_LIB");
/// Read instead of `/proc/loadavg` (tests give the launcher a machine as busy as they need).
const LOADAVG_VAR: &str = "TCHSEQ_LOADAVG";
/// What `tchseq doctor` reports as the place libtorch was found.
const FOUND_BY_VAR: &str = "TCHSEQ_LIBTORCH_FOUND_BY";
const CUDA_RUNTIME_INSTALL: &str = "nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85";

fn slim_install() -> String {
    format!("pip install --no-deps torch=={} {CUDA_RUNTIME_INSTALL}", version_py::release(BUILD_VERSION))
}

fn main() -> ExitCode {
    match launch() {
        Ok(never) => match never {},
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

enum Never {}

fn launch() -> Result<Never, String> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot locate the tchseq binary: {e}"))?;
    let bin_dir = exe.parent().unwrap_or(Path::new("/"));
    let core = bin_dir.join("tchseq-core");
    if !core.is_file() {
        return Err(format!("{} is missing: install tchseq and tchseq-core together", core.display()));
    }
    let (lib_dir, found_by) = find_libtorch(bin_dir)?;
    check_cuda_runtime(&lib_dir)?;

    let mut library_path = OsString::from(&lib_dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        library_path.push(":");
        library_path.push(old);
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "tchseq".into());
    let mut cmd = Command::new(&core);
    // How OpenMP's threads wait (libtorch/omp_wait.rs): libgomp reads it when it is loaded,
    // before any of tchseq-core runs, so here, and only when the user set neither variable.
    if std::env::var_os("GOMP_SPINCOUNT").is_none() && std::env::var_os("OMP_WAIT_POLICY").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let given: Vec<String> = std::env::args().skip(1).collect();
        let loadavg_path = std::env::var_os(LOADAVG_VAR).unwrap_or_else(|| "/proc/loadavg".into());
        // the parent that just started us (a shell, Python's subprocess) may still be runnable
        // for a moment before it waits: the least of a few looks, 1 ms apart
        let mut loadavg = String::new();
        for look in 0..omp_wait::LOOKS {
            let seen = std::fs::read_to_string(&loadavg_path).unwrap_or_default();
            if loadavg.is_empty() || omp_wait::runnable(&seen) < omp_wait::runnable(&loadavg) {
                loadavg = seen;
            }
            if omp_wait::runnable(&loadavg).is_none_or(|n| n <= 1) || look + 1 == omp_wait::LOOKS {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let threads = omp_wait::threads_asked(&given, cores);
        let mut wait = omp_wait::choose(&loadavg, threads, cores);
        if wait == omp_wait::Wait::Passive && std::env::var_os(LOADAVG_VAR).is_none() {
            if let Some(others) = runnable_outside_own_group() {
                wait = omp_wait::choose_beside(others, threads, cores);
            }
        }
        match wait {
            omp_wait::Wait::Spin => cmd.env("GOMP_SPINCOUNT", omp_wait::quiet_spins(omp_wait::ns_per_spin()).to_string()),
            omp_wait::Wait::Passive => cmd.env("OMP_WAIT_POLICY", "PASSIVE"),
        };
    }
    // Huge pages for libtorch's static initializers (libtorch/startup_pages.rs): glibc reads the
    // tunable as the program is loaded, and tchseq-core ends them as it starts.
    let current = std::env::var_os("GLIBC_TUNABLES");
    let thp = std::fs::read_to_string(startup_pages::THP_ENABLED).unwrap_or_default();
    if let Some(value) = startup_pages::tunables(current.as_deref(), &thp, std::env::var_os("THP_MEM_ALLOC_ENABLE").is_some()) {
        cmd.env("GLIBC_TUNABLES", value).env(startup_pages::MARK, "1");
    }
    let err = cmd
        .arg0(arg0)
        .args(args)
        .env("LD_LIBRARY_PATH", library_path)
        .env(FOUND_BY_VAR, format!("{found_by} ({})", lib_dir.display()))
        .exec();
    Err(format!("cannot run {}: {err}", core.display()))
}

/// Where libtorch is looked for, first match wins. `LIBTORCH`, when set, is the only place.
fn find_libtorch(bin_dir: &Path) -> Result<(PathBuf, &'static str), String> {
    if let Some(root) = std::env::var_os("LIBTORCH").filter(|v| !v.is_empty()) {
        let root = PathBuf::from(root);
        let lib = [root.join("lib"), root.clone()].into_iter().find(|d| has_libtorch(d)).ok_or_else(|| {
            format!("LIBTORCH={} holds no lib/libtorch_cpu.so (point it at a torch package directory, or unset it)", root.display())
        })?;
        check_version(&lib).map_err(|e| format!("LIBTORCH={}: {e}", root.display()))?;
        return Ok((lib, "LIBTORCH"));
    }
    let mut candidates: Vec<(PathBuf, &'static str)> = Vec::new();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        candidates.extend(std::env::split_paths(&paths).map(|d| (d, "LD_LIBRARY_PATH")));
    }
    let prefix = bin_dir.parent().unwrap_or(bin_dir);
    candidates.push((prefix.join("lib"), "beside the binary (bin/../lib)"));
    candidates.extend(site_packages_torch(prefix).map(|d| (d, "the virtualenv the binary is installed in")));
    // a checkout: target/release/tchseq and .venv/libtorch (the torch package the build used)
    if let Some(root) = prefix.parent() {
        candidates.push((root.join(".venv/libtorch/lib"), "the checkout's .venv"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        candidates.extend(site_packages_torch(Path::new(&venv)).map(|d| (d, "the active virtualenv (VIRTUAL_ENV)")));
    }
    if !BUILD_LIB_DIR.is_empty() {
        candidates.push((PathBuf::from(BUILD_LIB_DIR), "the libtorch it was built against"));
    }
    let mut wrong_version = None;
    for (dir, found_by) in candidates {
        if !has_libtorch(&dir) {
            continue;
        }
        match check_version(&dir) {
            Ok(()) => return Ok((dir, found_by)),
            Err(e) => wrong_version = wrong_version.or(Some(format!("{} is {e}", dir.display()))),
        }
    }
    let (series, install) = (version_py::series(BUILD_VERSION), slim_install());
    Err(match wrong_version {
        Some(found) => format!("no libtorch {series} found ({found}); install it with `{install}` or set LIBTORCH"),
        None => format!(
            "libtorch {series} not found: install it into a virtualenv with `{install}` and activate it, or set LIBTORCH to its site-packages/torch directory"
        ),
    })
}

fn has_libtorch(dir: &Path) -> bool {
    dir.join("libtorch_cpu.so").is_file() && dir.join("libc10.so").is_file()
}

/// `<prefix>/lib/python3.*/site-packages/torch/lib`, for every Python version found.
fn site_packages_torch(prefix: &Path) -> impl Iterator<Item = PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(prefix.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages/torch/lib"))
        .collect();
    found.sort();
    found.into_iter()
}

/// A torch package says its version in `torch/version.py`; a bare libtorch directory (a
/// packaged `lib/`) has none and is taken as it is.
fn check_version(lib_dir: &Path) -> Result<(), String> {
    let Ok(text) = std::fs::read_to_string(lib_dir.join("../version.py")) else { return Ok(()) };
    let version = version_py::parse_version_py(&text).unwrap_or_default();
    let series = version_py::series(BUILD_VERSION);
    if BUILD_VERSION == "unknown" || version_py::series(&version) == series {
        Ok(())
    } else {
        Err(format!("torch {version}, and this tchseq was built for torch {series}"))
    }
}

/// PyPI's libtorch_cpu needs the CUDA runtime and CUPTI even on a CPU, from the
/// nvidia-cuda-runtime and nvidia-cuda-cupti wheels (its rpath looks in `../../nvidia/cu13/lib`).
fn check_cuda_runtime(lib_dir: &Path) -> Result<(), String> {
    let mut dirs = vec![lib_dir.to_path_buf(), lib_dir.join("../../nvidia/cu13/lib")];
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    // what the loader finds without a path: its cache (ldconfig) names every system library
    let cache = std::fs::read("/etc/ld.so.cache").unwrap_or_default();
    let in_cache = |name: &str| cache.windows(name.len()).any(|w| w == name.as_bytes());
    let missing: Vec<&str> = ["libcudart.so.13", "libcupti.so.13"]
        .into_iter()
        .filter(|name| !dirs.iter().any(|d| d.join(name).exists()) && !in_cache(name))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the libtorch in {} needs {}, which is not installed: pip install --no-deps {CUDA_RUNTIME_INSTALL}",
            lib_dir.display(),
            missing.join(" and ")
        ))
    }
}

/// The running or runnable tasks of the machine outside this process's group (`/proc`), or None
/// where `/proc` does not say.
fn runnable_outside_own_group() -> Option<usize> {
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, group) = omp_wait::state_and_group(&own)?;
    let mut stats = Vec::new();
    for process in std::fs::read_dir("/proc").ok()?.flatten() {
        if !process.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(process.path().join("task")) else { continue };
        for task in tasks.flatten() {
            // a task that ended meanwhile has nothing to read
            if let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) {
                stats.push(stat);
            }
        }
    }
    Some(omp_wait::runnable_outside(stats.iter().map(String::as_str), group))
}
