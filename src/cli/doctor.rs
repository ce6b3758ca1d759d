//! `tchseq doctor`: one screen of evidence about the libtorch we run on.

use anyhow::Result;
use serde_json::json;
use std::io::Write;

use super::args::{DoctorArgs, GlobalArgs};
use super::Outcome;

pub fn run(_global: &GlobalArgs, args: &DoctorArgs) -> Result<Outcome> {
    let loaded = tchseq::libtorch::loaded_library_dir();
    let version = tchseq::libtorch::version();
    // what the binary itself links, before libtorch_cuda is tried
    let linked = tchseq::libtorch::loaded_libraries();
    let cuda = tchseq::libtorch::load_cuda();
    let cudnn = tch::Cuda::cudnn_is_available();
    let report = json!({
        "tchseq": env!("CARGO_PKG_VERSION"),
        "libtorch_version": version,
        "libtorch_dir": loaded.as_ref().map(|p| p.display().to_string()),
        "libtorch_found_by": std::env::var("TCHSEQ_LIBTORCH_FOUND_BY").ok(),
        "built_against": tchseq::libtorch::BUILD_LIB_DIR,
        "install": match &cuda {
            Ok(_) => "full (libtorch_cuda and its CUDA libraries load)",
            Err(tchseq::libtorch::CudaLoadError::NotInstalled { .. }) => "CPU only (no libtorch_cuda)",
            Err(_) => "slim, CPU only (the CUDA libraries libtorch_cuda needs are not installed)",
        },
        "libtorch_cuda": match &cuda {
            Ok(path) => path.display().to_string(),
            Err(e) => format!("not loaded: {e}"),
        },
        "cuda_kernels_registered": tchseq::libtorch::cuda_registered(),
        "libtorch_has_cuda": tch::utils::has_cuda(),
        "cuda_available": tch::Cuda::is_available(),
        "cuda_device_count": tch::Cuda::device_count(),
        "cudnn_available": cudnn,
        "cudnn_version": if cudnn { Some(tch::utils::version_cudnn()) } else { None },
        "intra_op_threads": tch::get_num_threads(),
        "interop_threads": tch::get_num_interop_threads(),
        "mkl": tch::utils::has_mkl(),
        "mkldnn": tch::utils::has_mkldnn(),
        "openmp": tch::utils::has_openmp(),
        "cpu_vector_isa": cpu_vector_isa(),
        "fast_compute_types": tchseq::kernels::compute_type::fast_on_this_cpu().into_iter().map(|c| c.name()).collect::<Vec<_>>(),
        "cpu_model": cpu_model(),
        "libraries": linked,
        "reproducible": tchseq::libtorch::reproducible_kernels_pinned(),
        "MKL_CBWR": std::env::var("MKL_CBWR").ok(),
        "ATEN_CPU_CAPABILITY": std::env::var("ATEN_CPU_CAPABILITY").ok(),
        "OMP_WAIT_POLICY": std::env::var("OMP_WAIT_POLICY").ok(),
        "GOMP_SPINCOUNT": std::env::var("GOMP_SPINCOUNT").ok(),
        "GLIBC_TUNABLES": std::env::var("GLIBC_TUNABLES").ok(),
        "huge_pages_after_start": tchseq::libtorch::huge_pages_enabled(),
    });
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        writeln!(out, "{report}")?;
    } else {
        let obj = report.as_object().expect("report is an object");
        for (key, value) in obj {
            let shown = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => "-".to_string(),
                serde_json::Value::Array(items) => items.iter().filter_map(|i| i.as_str()).collect::<Vec<_>>().join(" "),
                other => other.to_string(),
            };
            writeln!(out, "{:<24} {}", key, shown)?;
        }
    }
    Ok(Outcome::Ok)
}

/// The CPU's model name (`/proc/cpuinfo`): pinned kernels still give other bits on another CPU.
fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|l| l.strip_prefix("model name")).map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_string())
}

/// The widest x86 vector extension the CPU reports (what MKL and ATen pick kernels by).
fn cpu_vector_isa() -> Option<&'static str> {
    use tchseq::kernels::isa::cpu_detected;
    if cpu_detected("avx512f") {
        Some("avx512")
    } else if cpu_detected("avx2") {
        Some("avx2")
    } else {
        cfg!(target_arch = "x86_64").then_some("sse")
    }
}
