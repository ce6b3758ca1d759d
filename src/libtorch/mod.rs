//! Facts about the libtorch this process runs on.

use std::path::PathBuf;

mod cuda;
mod cuda_graph;
pub mod host;
mod memory_report;
pub mod omp_wait;
mod op_profile;
pub mod parallel;
pub mod reuse;
pub mod library_pages;
pub mod startup_pages;
mod version_py;
pub use cuda::{cuda_registered, load_cuda, CudaLoadError};
pub use cuda_graph::{cuda_graphs_available, CudaGraph, CudaGraphError};
pub use memory_report::{CudaPeak, MemoryReport};
pub use op_profile::OpProfile;
pub use version_py::{parse_version_py, release as version_release, series as version_series};

/// The libtorch lib directory the crate was linked against (the test binaries' rpath; the
/// `tchseq` launcher looks there last).
pub const BUILD_LIB_DIR: &str = env!("TCHSEQ_LIBTORCH_LIB");
/// The torch version found in that directory at build time.
pub const BUILD_VERSION: &str = env!("TCHSEQ_LIBTORCH_BUILD_VERSION");

/// The directory the `libtorch_cpu` of this process was loaded from, as the loader found it.
pub fn loaded_library_dir() -> Option<PathBuf> {
    // Any call into libtorch makes sure the library is loaded before we look.
    let _ = tch::get_num_threads();
    loaded_objects()
        .into_iter()
        .find(|path| path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libtorch_cpu.")))
        .and_then(|path| path.parent().map(PathBuf::from))
}

/// The file names of the torch, c10, CUDA and OpenMP libraries loaded in this process, sorted:
/// which libtorch (CPU only, or with CUDA) a binary actually runs on.
pub fn loaded_libraries() -> Vec<String> {
    let _ = tch::get_num_threads();
    let wanted = ["libtorch", "libc10", "libcuda", "libcudart", "libcupti", "libcublas", "libcudnn", "libgomp", "libmkl"];
    let mut names: Vec<String> = loaded_objects()
        .iter()
        .filter_map(|path| path.file_name()?.to_str().map(str::to_string))
        .filter(|name| wanted.iter().any(|w| name.starts_with(w)))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The shared objects loaded in this process, by the paths the loader opened them by (a
/// symlinked directory stays as it was named, unlike `/proc/self/maps`).
pub fn loaded_objects() -> Vec<PathBuf> {
    use std::ffi::{c_int, c_void, CStr, OsStr};
    use std::os::unix::ffi::OsStrExt;

    unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the Vec passed below, `info` a valid entry for this call.
        let (paths, name) = unsafe { (&mut *data.cast::<Vec<PathBuf>>(), (*info).dlpi_name) };
        if !name.is_null() {
            // SAFETY: the loader's NUL-terminated name of the object.
            let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
            if !bytes.is_empty() {
                paths.push(PathBuf::from(OsStr::from_bytes(bytes)));
            }
        }
        0
    }
    let mut paths: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads each entry and appends to `paths`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(collect), std::ptr::from_mut(&mut paths).cast::<c_void>()) };
    paths
}

/// The torch version of the loaded library (from `torch/version.py` beside it), else the
/// version seen at build time.
pub fn version() -> String {
    loaded_library_dir()
        .and_then(|dir| std::fs::read_to_string(dir.join("../version.py")).ok())
        .and_then(|text| parse_version_py(&text))
        .unwrap_or_else(|| BUILD_VERSION.to_string())
}

/// Keeps the memory libtorch frees inside the process for reuse.
///
/// libtorch's CPU allocator is glibc's `posix_memalign`. With glibc's defaults every tensor of a
/// few MB (the `[batch × beam, vocab]` log-probs of each decoding step) is a fresh `mmap`, and
/// the kernel zeroes its pages again on first touch; a sixth of translation time went there.
/// Raising the mmap and trim thresholds lets those blocks come back from the heap instead
/// (translation: 27% less CPU time). The trim threshold must exceed what one decoding step frees:
/// at transformer-base size a step at batch 32 frees some 60 MB (logits, log-probs, key/value
/// caches), and a 32 MiB threshold gave the heap's top back and faulted it in again at every step
/// (20% of the CPU time, in the kernel). Values are unchanged: only where the memory comes from.
/// The peak is what a step needs; between batches up to the trim threshold stays resident.
/// glibc caps the mmap threshold at 32 MiB on 64-bit targets, and the tensors of large batches
/// are larger (`generate` at fairseq's 12,000-token batches: log-probs of some 130 MB at each
/// step, 585,000 page faults and 1.3 s of system time in a 7-second run), so no block is an
/// `mmap` of its own: 135,000 faults and 0.5 s there, the same peak.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any worker thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

/// Ends the transparent huge pages the launcher asked for libtorch's start
/// (`startup_pages.rs`): from here on this process faults its pages in 4 KiB at a time, as it
/// would have without them. Nothing where the launcher did not ask.
pub fn end_startup_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os(startup_pages::MARK).is_some() {
        // SAFETY: PR_SET_THP_DISABLE sets a flag of this process and touches no memory.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

/// Whether this process may get transparent huge pages (`THP_enabled` of /proc/self/status:
/// false once `end_startup_huge_pages` turned them off); `None` where the kernel does not say.
pub fn huge_pages_enabled() -> Option<bool> {
    self_status("THP_enabled").map(|v| v == "1")
}

/// The value of `field` in /proc/self/status, trimmed (`None` where the kernel does not say).
pub(crate) fn self_status(field: &str) -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).map(|v| v.trim().to_string())
}

/// Hands the free memory inside the heap back to the kernel (glibc's `malloc_trim`): weights
/// let go of in the middle of the heap stay resident otherwise, and loading, which replaces them
/// one by one with packed copies of other sizes, would hold both.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes malloc's own lock.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The environment that pins libtorch's CPU kernels: MKL's strict conditional numerical
/// reproducibility on its AVX2 code path, and ATen's AVX2 kernels. With both set before
/// libtorch computes anything, results no longer depend on the thread count, and fairseq run
/// under the same variables gives the same bits. `STRICT` is what makes MKL's GEMM independent
/// of the thread count on Intel CPUs: with `MKL_CBWR=AVX2` alone, a Xeon gave different bits at
/// 1 and 2 threads (an AMD Zen 1 did not). The bits still differ between CPU vendors.
pub const REPRODUCIBLE_ENV: [(&str, &str); 2] = [("MKL_CBWR", "AVX2,STRICT"), ("ATEN_CPU_CAPABILITY", "avx2")];

/// The variable that asks for [`pin_reproducible_kernels`] from the environment.
pub const REPRODUCIBLE_VAR: &str = "TCHSEQ_REPRODUCIBLE";

/// Whether `TCHSEQ_REPRODUCIBLE` asks for the reproducible mode (`1`, `true`, `yes`, `on`).
pub fn reproducible_requested() -> bool {
    std::env::var(REPRODUCIBLE_VAR)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// Sets [`REPRODUCIBLE_ENV`], overriding other values of those variables. MKL and ATen read them
/// once, at their first computation, so this must run before any tensor is computed and before
/// any other thread starts; later calls change nothing.
pub fn pin_reproducible_kernels() {
    for (name, value) in REPRODUCIBLE_ENV {
        std::env::set_var(name, value);
    }
}

/// True when both variables of [`REPRODUCIBLE_ENV`] hold their pinned values.
pub fn reproducible_kernels_pinned() -> bool {
    REPRODUCIBLE_ENV.iter().all(|(name, value)| std::env::var(name).is_ok_and(|v| v == *value))
}

/// libtorch prints a one-time "nested tensors are in prototype stage" warning (`TORCH_WARN_ONCE`)
/// the first time the post-norm encoder fast path (which fairseq takes, and so do we) builds a
/// nested tensor. Trigger it once with stderr muted, so stderr carries only our own lines.
pub fn mute_nested_tensor_warning() {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let Ok(devnull) = std::fs::OpenOptions::new().write(true).open("/dev/null") else { return };
        // SAFETY: plain descriptor juggling on fd 2; restored before returning.
        unsafe {
            let saved = libc::dup(2);
            if saved < 0 {
                return;
            }
            libc::dup2(devnull.as_raw_fd(), 2);
            let x = tch::Tensor::zeros([1, 1, 1], (tch::Kind::Float, tch::Device::Cpu));
            let sizes = tch::Tensor::from_slice(&[1i64, 1]).reshape([1, 2]);
            let _ = tch::Tensor::f_internal_nested_from_padded(&x, &sizes, false);
            libc::dup2(saved, 2);
            libc::close(saved);
        }
    }
}

/// `c10::InferenceMode` on this thread while the value lives (csrc/inference_mode.cpp): no
/// autograd or view/version bookkeeping on any op; the kernels, and so the bits, are those of
/// no_grad. Measured: 7.5% less CPU at batch 1, about 2% at batch 32.
pub struct InferenceMode(*mut std::ffi::c_void);

extern "C" {
    fn tchseq_inference_mode_enter() -> *mut std::ffi::c_void;
    fn tchseq_inference_mode_exit(guard: *mut std::ffi::c_void);
}

impl InferenceMode {
    pub fn enter() -> Self {
        // SAFETY: a heap-allocated RAII guard, freed on this thread by Drop (the type is !Send).
        Self(unsafe { tchseq_inference_mode_enter() })
    }
}

impl Drop for InferenceMode {
    fn drop(&mut self) {
        // SAFETY: created by `enter` on this thread, freed once.
        unsafe { tchseq_inference_mode_exit(self.0) }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_status_field_is_read_by_its_whole_name() {
        let threads: usize = super::self_status("Threads").unwrap().parse().unwrap();
        assert!(threads >= 1);
        assert_eq!(super::self_status("Thread"), None, "a name's prefix is not the field");
        assert!(super::MemoryReport::peak_rss_bytes().is_some_and(|b| b > 0));
    }
}
