//! libtorch_cuda, loaded at run time. tchseq links only libtorch_cpu and c10, so a CPU install
//! needs none of the CUDA wheel's libraries; a GPU run loads them from the same torch package.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::OnceLock;


#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaLoadError {
    #[error("libtorch_cpu is not loaded in this process")]
    NoLibtorch,
    #[error("{} has no libtorch_cuda.so (a CPU-only install); CUDA needs the full torch wheel: {}", dir.display(), full_install())]
    NotInstalled { dir: PathBuf },
    #[error("{} does not load ({reason}); CUDA needs the full torch wheel with its nvidia libraries: {}", path.display(), full_install())]
    Unloadable { path: PathBuf, reason: String },
}

/// The command that installs what [`load_cuda`] needs.
fn full_install() -> String {
    format!("pip install torch=={}", super::version_release(super::BUILD_VERSION))
}

/// Loads `libtorch_cuda.so` from the directory this process's `libtorch_cpu` came from, once;
/// later calls return the first outcome. Its static initializers register CUDA's kernels,
/// allocator and device hooks. libtorch keeps the CUDA hooks it finds at its first CUDA query,
/// so this must run before anything asks libtorch about CUDA (`tch::Cuda::is_available`,
/// seeding, `doctor`).
pub fn load_cuda() -> Result<PathBuf, CudaLoadError> {
    static OUTCOME: OnceLock<Result<PathBuf, CudaLoadError>> = OnceLock::new();
    OUTCOME.get_or_init(load_once).clone()
}

fn load_once() -> Result<PathBuf, CudaLoadError> {
    let objects = super::loaded_objects();
    let named = |prefix: &str| {
        objects.iter().find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix))).cloned()
    };
    if let Some(linked) = named("libtorch_cuda.") {
        return Ok(linked);
    }
    let dir = super::loaded_library_dir().ok_or(CudaLoadError::NoLibtorch)?;
    let path = dir.join("libtorch_cuda.so");
    if !path.is_file() {
        return Err(CudaLoadError::NotInstalled { dir });
    }
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| CudaLoadError::Unloadable { path: path.clone(), reason: "a NUL byte in the path".into() })?;
    // SAFETY: dlopen of a library that is never closed; RTLD_GLOBAL so that its symbols serve
    // the libraries it pulls in, as when torch's Python module loads it.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns the last error of this thread as a C string, or null.
        let reason = unsafe {
            let message = libc::dlerror();
            if message.is_null() { "unknown dlopen error".to_string() } else { CStr::from_ptr(message).to_string_lossy().into_owned() }
        };
        return Err(CudaLoadError::Unloadable { path, reason });
    }
    Ok(path)
}

extern "C" {
    fn tchseq_cuda_registered() -> std::ffi::c_int;
}

/// Whether CUDA's device support is registered in this process (libtorch_cuda loaded, with or
/// without a GPU).
pub fn cuda_registered() -> bool {
    // SAFETY: reads one entry of c10's device-guard registry (csrc/cuda_registered.cpp).
    unsafe { tchseq_cuda_registered() != 0 }
}
