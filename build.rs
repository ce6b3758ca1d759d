//! Links the program against `libtorch_cpu` and `libc10` only: `libtorch_cuda` is loaded at run
//! time for `--device cuda` (`libtorch::cuda`), unless `TCHSEQ_LINK_CUDA=1` links it as before.
//! Every binary gets an rpath to the libtorch it was built against, `tchseq-core` first
//! `$ORIGIN/../lib` (a packaged layout); the `tchseq` launcher links no libtorch, finds one and
//! puts it on `LD_LIBRARY_PATH`, which the loader searches before any rpath.
//! `DEP_TCH_LIBTORCH_LIB` reaches us because `torch-sys` is a direct dependency.

#[path = "src/libtorch/version_py.rs"]
#[allow(dead_code)]
mod version_py;
use version_py::parse_version_py;

fn main() {
    for var in ["LIBTORCH", "LIBTORCH_USE_PYTORCH", "VIRTUAL_ENV", "LIBTORCH_LIB"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(lib) if !lib.is_empty() => {
            if target_os == "linux" || target_os == "macos" {
                println!("cargo:rustc-link-arg-bin=tchseq-core=-Wl,-rpath,$ORIGIN/../lib");
                // unit-test harnesses are not "tests" targets for rustc-link-arg-tests
                println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
            }
            println!("cargo:rustc-env=TCHSEQ_LIBTORCH_LIB={lib}");
            let version = std::fs::read_to_string(std::path::Path::new(&lib).join("../version.py"))
                .ok()
                .and_then(|text| parse_version_py(&text))
                .unwrap_or_else(|| "unknown".to_string());
            println!("cargo:rustc-env=TCHSEQ_LIBTORCH_BUILD_VERSION={version}");
            compile_shim(std::path::Path::new(&lib));
            compile_cuda_graph_shim(std::path::Path::new(&lib));
        }
        _ => {
            // torch-sys already failed the build if libtorch was missing; reaching this point
            // means it was found some other way (e.g. /usr/lib/libtorch.so).
            println!(
                "cargo:warning=libtorch directory unknown: run `make` to build against the project venv"
            );
            println!("cargo:rustc-env=TCHSEQ_LIBTORCH_LIB=");
            println!("cargo:rustc-env=TCHSEQ_LIBTORCH_BUILD_VERSION=unknown");
        }
    }
    println!("cargo::rustc-check-cfg=cfg(tchseq_cuda_graph)");
    cpu_features_for_tests();
    println!("cargo:rerun-if-env-changed=TCHSEQ_LINK_CUDA");
    let link_cuda = std::env::var("TCHSEQ_LINK_CUDA").is_ok_and(|v| v == "1");
    if target_os == "linux" && link_cuda {
        for arg in ["-Wl,--no-as-needed", "-ltorch"] {
            println!("cargo:rustc-link-arg-bin=tchseq-core={arg}");
            println!("cargo:rustc-link-arg-tests={arg}");
        }
    }
}

/// `cfg(tchseq_cpu = "...")` for each instruction set of this machine that a kernel test needs,
/// less those `TCHSEQ_CPU_FEATURES_OFF` hides: a kernel test for a missing one is compiled as
/// ignored, so `cargo test` counts it as not run rather than passed. (The suite runs where it is
/// built; a test that is not ignored and still lacks its instructions fails.)
fn cpu_features_for_tests() {
    println!("cargo:rerun-if-env-changed=TCHSEQ_CPU_FEATURES_OFF");
    // the Makefile's fingerprint of /proc/cpuinfo (whose mtime says nothing)
    println!("cargo:rerun-if-env-changed=TCHSEQ_BUILD_CPU_FLAGS");
    const NEEDED: [(&str, &str); 5] =
        [("avx2", "avx2"), ("fma", "fma"), ("avx512f", "avx512f"), ("avx512_vnni", "avx512vnni"), ("avx512_bf16", "avx512bf16")];
    let values: Vec<String> = NEEDED.iter().map(|(_, name)| format!("\"{name}\"")).collect();
    println!("cargo::rustc-check-cfg=cfg(tchseq_cpu, values({}))", values.join(", "));
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = flags.lines().find(|l| l.starts_with("flags")).map_or(Vec::new(), |l| l.split_whitespace().collect());
    let hidden = std::env::var("TCHSEQ_CPU_FEATURES_OFF").unwrap_or_default();
    let hidden: Vec<&str> = hidden.split(|c: char| c == ',' || c.is_whitespace()).collect();
    for (flag, name) in NEEDED {
        if flags.contains(&flag) && !hidden.contains(&name) {
            println!("cargo:rustc-cfg=tchseq_cpu=\"{name}\"");
        }
    }
}

/// csrc/ (what tch does not bind: fbgemm's quantized linear for `--compute-type int8`,
/// c10::InferenceMode, the operator profile, CUDA memory statistics), compiled as torch-sys compiles its own C++ against the same headers.
fn compile_shim(lib: &std::path::Path) {
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_string());
    let build = || {
        let mut build = cc::Build::new();
        build
            .cpp(true)
            .pic(true)
            .warnings(false)
            .include(lib.join("../include"))
            .flag("-std=c++17")
            .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
            .flag("-DGLOG_USE_GLOG_EXPORT");
        build
    };
    build()
        .file("csrc/quantized_linear.cpp")
        .file("csrc/inference_mode.cpp")
        .file("csrc/cuda_registered.cpp")
        .file("csrc/cuda_memory.cpp")
        .file("csrc/op_profile.cpp")
        .file("csrc/storage_use_count.cpp")
        .file("csrc/file_storage.cpp")
        .compile("tchseq_shim");
    // at::parallel_for is a header template around `#pragma omp parallel`: it needs OpenMP, and
    // the libgomp libtorch itself loads (in its lib directory), not a second runtime
    build().flag("-fopenmp").file("csrc/parallel_for.cpp").compile("tchseq_parallel");
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-arg=-l:libgomp.so.1");
}

/// csrc/cuda_graph.cpp as a shared object of its own (`libtorch::cuda_graph` embeds it and opens
/// it once libtorch_cuda is loaded), where the CUDA runtime's headers are found whole: those the
/// torch wheel's dependencies install (nvidia's, or triton's), or `TCHSEQ_CUDA_INCLUDE`. Elsewhere, or when it does not
/// compile, the program is built without it (`cfg(tchseq_cuda_graph)` unset) and a replayed step
/// is refused at run time.
fn compile_cuda_graph_shim(lib: &std::path::Path) {
    println!("cargo:rerun-if-env-changed=TCHSEQ_CUDA_INCLUDE");
    println!("cargo:rerun-if-changed=csrc/cuda_graph.cpp");
    let mut candidates: Vec<std::path::PathBuf> = std::env::var_os("TCHSEQ_CUDA_INCLUDE").map(Into::into).into_iter().collect();
    if let Ok(entries) = std::fs::read_dir(lib.join("../../nvidia")) {
        let mut found: Vec<std::path::PathBuf> =
            entries.flatten().map(|e| e.path().join("include")).collect();
        found.sort();
        candidates.extend(found);
    }
    // the runtime's headers need the compiler's crt/, which triton's copy of them carries
    candidates.push(lib.join("../../triton/backends/nvidia/include"));
    candidates.push("/usr/local/cuda/include".into());
    let complete = |p: &std::path::PathBuf| p.join("cuda_runtime_api.h").is_file() && p.join("crt/host_config.h").is_file();
    let Some(cuda_include) = candidates.into_iter().find(complete) else {
        println!("cargo:warning=no CUDA runtime headers: built without the CUDA-graph step (TCHSEQ_CUDA_INCLUDE names them)");
        return;
    };
    if !lib.join("../include/ATen/cuda/CUDAGraph.h").is_file() {
        println!("cargo:warning=libtorch has no ATen/cuda/CUDAGraph.h: built without the CUDA-graph step");
        return;
    }
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_string());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("libtchseq_cuda_graph.so");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let status = std::process::Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2", "-std=c++17", "-DGLOG_USE_GLOG_EXPORT", "-w"])
        .arg(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .arg("-I")
        .arg(lib.join("../include"))
        .arg("-I")
        .arg(lib.join("../include/torch/csrc/api/include"))
        .arg("-I")
        .arg(&cuda_include)
        .arg("csrc/cuda_graph.cpp")
        .arg("-o")
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {
            println!("cargo:rustc-cfg=tchseq_cuda_graph");
            println!("cargo:rustc-env=TCHSEQ_CUDA_GRAPH_SO={}", out.display());
        }
        other => println!("cargo:warning=csrc/cuda_graph.cpp did not compile ({other:?}): built without the CUDA-graph step"),
    }
}
