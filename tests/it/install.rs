//! The install: the program links libtorch_cpu and c10 only, the `tchseq` launcher finds
//! libtorch wherever it is put, and libtorch_cuda is loaded only for `--device cuda`.
//!
//! The installs are built from the project's own torch package out of symlinks: the loader
//! takes `$ORIGIN` from the path it opened, so a link farm behaves as a copy would.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::util::{repo, tchseq_bare};

const SENTENCES: [&str; 2] = ["A man in a blue shirt is riding a bike.", "Two dogs are playing in the snow."];

/// The torch package's `lib` that this test process loaded libtorch from (read from
/// /proc/self/maps, so a checkout moved after the build is found where it is now).
fn torch_lib() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let lib = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .map(|p| PathBuf::from(p).parent().unwrap().to_path_buf())
        .unwrap_or_else(|| panic!("libtorch_cpu.so is not mapped into this test process"));
    std::fs::canonicalize(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()))
}

fn cuda_runtime_dir() -> PathBuf {
    torch_lib().join("../../nvidia/cu13/lib")
}

/// `site_packages/torch` and `site_packages/nvidia/cu13/lib` as the slim install has them:
/// every torch library (libtorch_cuda included) but only the CUDA runtime and CUPTI.
fn slim_site_packages(site_packages: &Path) {
    let torch = site_packages.join("torch");
    std::fs::create_dir_all(torch.join("lib")).unwrap();
    symlink(torch_lib().join("../version.py"), torch.join("version.py")).unwrap();
    for entry in std::fs::read_dir(torch_lib()).unwrap() {
        let entry = entry.unwrap();
        symlink(entry.path(), torch.join("lib").join(entry.file_name())).unwrap();
    }
    let cu13 = site_packages.join("nvidia/cu13/lib");
    std::fs::create_dir_all(&cu13).unwrap();
    for name in ["libcudart.so.13", "libcupti.so.13"] {
        symlink(cuda_runtime_dir().join(name), cu13.join(name)).unwrap();
    }
}

/// `prefix/bin/{tchseq,tchseq-core}`, copied out of the build.
fn copy_binaries(prefix: &Path) -> PathBuf {
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["tchseq", "tchseq-core"] {
        std::fs::copy(Path::new(env!("CARGO_BIN_EXE_tchseq")).with_file_name(name), bin.join(name)).unwrap();
    }
    bin.join("tchseq")
}

fn bare(program: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(program);
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("LIBTORCH").env_remove("VIRTUAL_ENV").args(["--threads", "1"]);
    cmd
}

fn doctor(mut cmd: assert_cmd::Command) -> serde_json::Value {
    let out = cmd.args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn translate(mut cmd: assert_cmd::Command) -> String {
    crate::util::run_ok(cmd.args(["translate", "-m"]).arg(repo("weights/multi30k.en-de")).args(SENTENCES))
}

/// The one line `cmd` fails with (exit 2).
fn one_error_line(mut cmd: assert_cmd::Command) -> String {
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

fn libraries(report: &serde_json::Value) -> Vec<String> {
    report["libraries"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect()
}

#[test]
fn the_program_links_libtorch_cpu_and_c10_and_no_cuda_library() {
    let report = doctor(tchseq_bare());
    let libraries = libraries(&report);
    for wanted in ["libtorch_cpu.so", "libc10.so"] {
        assert!(libraries.iter().any(|l| l == wanted), "{libraries:?}");
    }
    for unwanted in ["libtorch.so", "libtorch_cuda.so", "libc10_cuda.so", "libcublas", "libcudnn"] {
        assert!(!libraries.iter().any(|l| l.starts_with(unwanted)), "{unwanted} is linked: {libraries:?}");
    }
    let found_by = report["libtorch_found_by"].as_str().unwrap();
    assert!(found_by.starts_with("the checkout's .venv") || found_by.starts_with("the libtorch it was built against"), "{found_by}");
}

#[test]
fn device_cuda_loads_libtorch_cuda_from_the_full_wheel() {
    let full = cuda_runtime_dir().join("libcublas.so.13").exists();
    let report = doctor(tchseq_bare());
    let cuda = report["libtorch_cuda"].as_str().unwrap();
    // `make test` installs the full wheel (make full-venv); the slim install's refusal is tested
    // below on a slim install of its own
    assert!(full, "the full torch wheel (libcublas) is missing from the venv: run `make full-venv`; doctor says {cuda}");
    assert_eq!(std::fs::canonicalize(cuda).unwrap(), torch_lib().join("libtorch_cuda.so"), "{report}");
    assert_eq!(report["cuda_kernels_registered"], true, "{report}");
    assert!(report["install"].as_str().unwrap().starts_with("full"), "{report}");

    let mut cmd = tchseq_bare();
    cmd.args(["--device", "cuda", "translate", "-m"]).arg(repo("weights/multi30k.en-de")).arg(SENTENCES[0]);
    if report["cuda_device_count"].as_i64().unwrap() > 0 {
        cmd.assert().success();
    } else {
        let err = one_error_line(cmd);
        assert!(err.contains("sees no CUDA device"), "{err}");
    }
}

#[test]
fn a_slim_install_translates_on_the_cpu_and_refuses_cuda_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let site_packages = dir.path().join("slim/lib/python3.11/site-packages");
    slim_site_packages(&site_packages);
    let torch = site_packages.join("torch");
    let with_slim = |program: &Path| {
        let mut cmd = bare(program);
        cmd.env("LIBTORCH", &torch);
        cmd
    };
    let program = Path::new(env!("CARGO_BIN_EXE_tchseq"));

    let report = doctor(with_slim(program));
    assert_eq!(report["libtorch_dir"].as_str().unwrap(), torch.join("lib").to_str().unwrap(), "{report}");
    assert!(report["libtorch_found_by"].as_str().unwrap().starts_with("LIBTORCH"), "{report}");
    assert!(report["install"].as_str().unwrap().starts_with("slim"), "{report}");
    assert_eq!(report["cuda_kernels_registered"], false, "{report}");

    assert_eq!(translate(with_slim(program)), translate(bare(program)));

    let mut cuda = with_slim(program);
    cuda.args(["--device", "cuda", "translate", "-m"]).arg(repo("weights/multi30k.en-de")).arg(SENTENCES[0]);
    let err = one_error_line(cuda);
    assert!(err.starts_with("error: --device cuda: "), "{err}");
    let install = format!("pip install torch=={}", tchseq::libtorch::version_release(tchseq::libtorch::BUILD_VERSION));
    assert!(err.contains("does not load") && err.contains(&install), "{err}");

    // `auto` falls back to the CPU
    let mut auto = with_slim(program);
    auto.args(["--device", "auto"]);
    assert_eq!(translate(auto), translate(bare(program)));
}

#[test]
fn moved_binaries_find_the_virtualenv_they_are_installed_in() {
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("moved venv");
    slim_site_packages(&venv.join("lib/python3.11/site-packages"));
    let program = copy_binaries(&venv);

    let report = doctor(bare(&program));
    assert!(report["libtorch_found_by"].as_str().unwrap().starts_with("the virtualenv the binary is installed in"), "{report}");
    let torch_lib = venv.join("lib/python3.11/site-packages/torch/lib");
    assert_eq!(report["libtorch_dir"].as_str().unwrap(), torch_lib.to_str().unwrap(), "{report}");
    assert_eq!(translate(bare(&program)), translate(bare(Path::new(env!("CARGO_BIN_EXE_tchseq")))));
}

#[test]
fn a_packaged_tree_runs_from_its_own_lib_directory() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("tchseq-0.1.0");
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    for name in ["libtorch_cpu.so", "libc10.so", "libgomp.so.1"] {
        symlink(torch_lib().join(name), lib.join(name)).unwrap();
    }
    for name in ["libcudart.so.13", "libcupti.so.13"] {
        symlink(cuda_runtime_dir().join(name), lib.join(name)).unwrap();
    }
    let program = copy_binaries(&prefix);

    let report = doctor(bare(&program));
    assert!(report["libtorch_found_by"].as_str().unwrap().starts_with("beside the binary"), "{report}");
    assert_eq!(report["libtorch_dir"].as_str().unwrap(), lib.to_str().unwrap(), "{report}");
    assert!(report["install"].as_str().unwrap().starts_with("CPU only"), "{report}");
    assert_eq!(translate(bare(&program)), translate(bare(Path::new(env!("CARGO_BIN_EXE_tchseq")))));
}

#[test]
fn a_wrong_libtorch_is_one_line() {
    let program = Path::new(env!("CARGO_BIN_EXE_tchseq"));
    let mut missing = bare(program);
    missing.env("LIBTORCH", "/nonexistent/torch").arg("doctor");
    let err = one_error_line(missing);
    assert!(err.contains("LIBTORCH=/nonexistent/torch holds no lib/libtorch_cpu.so"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let torch = dir.path().join("torch");
    std::fs::create_dir_all(torch.join("lib")).unwrap();
    for name in ["libtorch_cpu.so", "libc10.so"] {
        symlink(torch_lib().join(name), torch.join("lib").join(name)).unwrap();
    }
    std::fs::write(torch.join("version.py"), "__version__ = '2.5.1+cpu'\n").unwrap();
    let mut old = bare(program);
    old.env("LIBTORCH", &torch).arg("doctor");
    let err = one_error_line(old);
    let series = tchseq::libtorch::version_series(tchseq::libtorch::BUILD_VERSION);
    assert!(err.contains(&format!("torch 2.5.1+cpu, and this tchseq was built for torch {series}")), "{err}");

    // libtorch_cpu without the CUDA runtime and CUPTI wheels beside it
    std::fs::write(torch.join("version.py"), format!("__version__ = '{}'\n", tchseq::libtorch::BUILD_VERSION)).unwrap();
    let cache = std::fs::read("/etc/ld.so.cache").unwrap_or_default();
    if !cache.windows(15).any(|w| w == b"libcudart.so.13") {
        let mut bare_torch = bare(program);
        bare_torch.env("LIBTORCH", &torch).arg("doctor");
        let err = one_error_line(bare_torch);
        assert!(err.contains("needs libcudart.so.13 and libcupti.so.13") && err.contains("nvidia-cuda-runtime==13.0.96"), "{err}");
    }
}

#[test]
fn the_launcher_without_the_program_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("tchseq");
    std::fs::copy(env!("CARGO_BIN_EXE_tchseq"), &program).unwrap();
    let mut cmd = bare(&program);
    cmd.arg("doctor");
    let err = one_error_line(cmd);
    assert!(err.contains("tchseq-core is missing"), "{err}");
}

/// The launcher sets OpenMP's spin-wait on a quiet machine (GOMP_SPINCOUNT: about 400 µs of this
/// CPU's spins, 3,000 to libgomp's 300,000) and makes
/// threads sleep at once (OMP_WAIT_POLICY=PASSIVE) where other runnable tasks would share the
/// cores, unless the user chose either variable, which then passes through untouched.
/// `TCHSEQ_LOADAVG` stands in for /proc/loadavg: 1 runnable task is the launcher alone.
#[test]
fn the_launcher_chooses_how_threads_wait_unless_the_user_chose() {
    let dir = tempfile::tempdir().unwrap();
    let env_of = |runnable: usize, flags: &[&str], vars: &[(&str, &str)]| {
        let loadavg = dir.path().join(format!("loadavg{runnable}"));
        std::fs::write(&loadavg, format!("1.00 1.00 1.00 {runnable}/300 4242\n")).unwrap();
        let mut cmd = tchseq_bare();
        cmd.env_remove("GOMP_SPINCOUNT").env_remove("OMP_WAIT_POLICY").env("TCHSEQ_LOADAVG", &loadavg).args(flags);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let r = doctor(cmd);
        (r["GOMP_SPINCOUNT"].as_str().map(str::to_string), r["OMP_WAIT_POLICY"].as_str().map(str::to_string))
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let spins = |(count, policy): (Option<String>, Option<String>)| {
        assert_eq!(policy, None);
        let count: u32 = count.expect("GOMP_SPINCOUNT").parse().unwrap();
        assert!((3_000..=300_000).contains(&count), "{count}");
    };
    let passive = (None, Some("PASSIVE".to_string()));
    spins(env_of(1, &[], &[]));
    assert_eq!(env_of(2, &[], &[]), passive);
    // one thread fits beside cores - 1 other tasks
    spins(env_of(cores, &["--threads", "1"], &[]));
    assert_eq!(env_of(cores + 1, &["--threads", "1"], &[]), passive);
    assert_eq!(env_of(2, &[], &[("GOMP_SPINCOUNT", "50")]), (Some("50".into()), None));
    assert_eq!(env_of(2, &[], &[("OMP_WAIT_POLICY", "ACTIVE")]), (None, Some("ACTIVE".into())));
}

/// Where the kernel gives transparent huge pages on request, the launcher has glibc's malloc ask
/// for them while libtorch's static initializers fill the heap, and tchseq-core turns them off as
/// it starts; a user's own `glibc.malloc.hugetlb`, or libtorch's huge pages
/// (`THP_MEM_ALLOC_ENABLE`), leave both alone.
#[test]
fn huge_pages_last_for_libtorchs_start_only_unless_the_user_chose() {
    let on_request = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default().contains("[madvise]");
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = tchseq_bare();
        cmd.env_remove("GLIBC_TUNABLES").env_remove("THP_MEM_ALLOC_ENABLE");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let r = doctor(cmd);
        (r["GLIBC_TUNABLES"].as_str().map(str::to_string), r["huge_pages_after_start"].clone())
    };
    let (tunables, after) = run(&[]);
    if on_request {
        assert_eq!(tunables.as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(after, false, "tchseq-core ends them as it starts");
        let (tunables, _) = run(&[("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")]);
        assert_eq!(tunables.as_deref(), Some("glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1"));
    } else {
        assert_eq!(tunables, None);
        assert_ne!(after, false);
    }
    let (tunables, after) = run(&[("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")]);
    assert_eq!(tunables.as_deref(), Some("glibc.malloc.hugetlb=0"));
    assert_ne!(after, false);
    let (tunables, after) = run(&[("THP_MEM_ALLOC_ENABLE", "1")]);
    assert_eq!(tunables, None);
    assert_ne!(after, false);
}

/// builds/torch-2.11 (the build for the GPU machines' torch 2.11) is the default manifest with
/// the tch release for torch 2.11 and nothing else changed, over the same sources.
#[test]
fn the_torch_2_11_manifest_is_the_default_one_with_tch_0_24() {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let default = read(&repo("Cargo.toml"));
    let expected = default
        .replace("tch = \"=0.26.0\"", "tch = \"=0.24.0\"")
        .replace("torch-sys = \"=0.26.0\"", "torch-sys = \"=0.24.0\"")
        .replace("members = [\".\", \"python\"]", "members = [\".\"]");
    assert_eq!(default.matches("=0.26.0").count(), 2, "the default manifest pins tch and torch-sys 0.26.0");
    assert_eq!(read(&repo("builds/torch-2.11/Cargo.toml")), expected, "builds/torch-2.11/Cargo.toml drifted from Cargo.toml");
    for shared in ["src", "tests", "csrc", "build.rs"] {
        let linked = std::fs::canonicalize(repo("builds/torch-2.11").join(shared)).unwrap();
        assert_eq!(linked, std::fs::canonicalize(repo(shared)).unwrap(), "builds/torch-2.11/{shared}");
    }
}
