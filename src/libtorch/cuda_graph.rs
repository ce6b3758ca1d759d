//! `at::cuda::CUDAGraph` (csrc/cuda_graph.cpp), reached at run time.
//!
//! The program links no CUDA library, so the graph's C++ cannot be linked into it either: build.rs
//! compiles csrc/cuda_graph.cpp into a shared object of its own, which is embedded here and, once
//! libtorch_cuda is loaded (`load_cuda`, `RTLD_GLOBAL`), written to an anonymous file and opened;
//! its undefined symbols then resolve against the libtorch_cuda and CUDA runtime of this process.
//! The entry points are looked up by name (`dlsym`). A build without the CUDA runtime's headers
//! has no such object (`cfg(tchseq_cuda_graph)` unset) and answers [`CudaGraphError::NotBuilt`].

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaGraphError {
    #[error("this build has no CUDA-graph support (its libtorch headers lacked the CUDA runtime's)")]
    NotBuilt,
    #[error("CUDA graphs need libtorch_cuda: {0}")]
    NoCuda(String),
    #[error("the CUDA-graph library does not load: {0}")]
    Unloadable(String),
    #[error("CUDA graph {stage} failed: {message}")]
    Failed { stage: &'static str, message: String },
}

type NewFn = unsafe extern "C" fn() -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type BeginFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_char, usize) -> c_int;
type CheckedFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int;

/// The shim's entry points.
#[derive(Debug, Clone, Copy)]
struct Shim {
    new: NewFn,
    free: FreeFn,
    capture_begin: BeginFn,
    capture_end: CheckedFn,
    capture_abort: FreeFn,
    replay: CheckedFn,
}

/// The shim, loaded once; later calls return the first outcome.
fn shim() -> Result<Shim, CudaGraphError> {
    static SHIM: OnceLock<Result<Shim, CudaGraphError>> = OnceLock::new();
    SHIM.get_or_init(load).clone()
}

#[cfg(all(tchseq_cuda_graph, target_os = "linux"))]
fn load() -> Result<Shim, CudaGraphError> {
    static OBJECT: &[u8] = include_bytes!(env!("TCHSEQ_CUDA_GRAPH_SO"));
    super::load_cuda().map_err(|e| CudaGraphError::NoCuda(e.to_string()))?;
    let path = anonymous_file(OBJECT)?;
    // SAFETY: dlopen of an object that is never closed, its dependencies already loaded.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(CudaGraphError::Unloadable(dl_error()));
    }
    let symbol = |name: &CStr| -> Result<*mut c_void, CudaGraphError> {
        // SAFETY: a lookup in the handle opened above.
        let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if address.is_null() {
            return Err(CudaGraphError::Unloadable(format!("no {}", name.to_string_lossy())));
        }
        Ok(address)
    };
    // SAFETY: each symbol is the extern "C" function of csrc/cuda_graph.cpp with this signature.
    unsafe {
        Ok(Shim {
            new: std::mem::transmute::<*mut c_void, NewFn>(symbol(c"tchseq_cuda_graph_new")?),
            free: std::mem::transmute::<*mut c_void, FreeFn>(symbol(c"tchseq_cuda_graph_free")?),
            capture_begin: std::mem::transmute::<*mut c_void, BeginFn>(symbol(c"tchseq_cuda_graph_capture_begin")?),
            capture_end: std::mem::transmute::<*mut c_void, CheckedFn>(symbol(c"tchseq_cuda_graph_capture_end")?),
            capture_abort: std::mem::transmute::<*mut c_void, FreeFn>(symbol(c"tchseq_cuda_graph_capture_abort")?),
            replay: std::mem::transmute::<*mut c_void, CheckedFn>(symbol(c"tchseq_cuda_graph_replay")?),
        })
    }
}

#[cfg(not(all(tchseq_cuda_graph, target_os = "linux")))]
fn load() -> Result<Shim, CudaGraphError> {
    Err(CudaGraphError::NotBuilt)
}

/// `bytes` in a memory-backed file, named by its `/proc/self/fd` path.
#[cfg(all(tchseq_cuda_graph, target_os = "linux"))]
fn anonymous_file(bytes: &[u8]) -> Result<std::ffi::CString, CudaGraphError> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a static name; the descriptor is owned by the File below.
    let fd = unsafe { libc::memfd_create(c"tchseq_cuda_graph".as_ptr(), 0) };
    if fd < 0 {
        return Err(CudaGraphError::Unloadable(format!("memfd_create: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: a descriptor just created and owned by nobody else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(bytes).map_err(|e| CudaGraphError::Unloadable(format!("writing the library: {e}")))?;
    // the descriptor stays open for the life of the process: the loader maps the file by it
    std::mem::forget(file);
    std::ffi::CString::new(format!("/proc/self/fd/{fd}")).map_err(|e| CudaGraphError::Unloadable(e.to_string()))
}

#[cfg(all(tchseq_cuda_graph, target_os = "linux"))]
fn dl_error() -> String {
    // SAFETY: dlerror returns this thread's last error as a C string, or null.
    unsafe {
        let message = libc::dlerror();
        if message.is_null() { "unknown dlopen error".to_string() } else { CStr::from_ptr(message).to_string_lossy().into_owned() }
    }
}

/// Whether CUDA graphs can be captured in this process: the shim built and loaded (which loads
/// libtorch_cuda). Says nothing of a device.
pub fn cuda_graphs_available() -> Result<(), CudaGraphError> {
    shim().map(|_| ())
}

/// One `at::cuda::CUDAGraph` with its own memory pool, captured once and replayed.
pub struct CudaGraph {
    shim: Shim,
    graph: *mut c_void,
    captured: bool,
}

// SAFETY: the C++ object is only reached through &mut self (or Drop), from one thread at a time.
unsafe impl Send for CudaGraph {}

const ERROR_LEN: usize = 1024;

impl CudaGraph {
    pub fn new() -> Result<Self, CudaGraphError> {
        let shim = shim()?;
        // SAFETY: the constructor returns an owned object, or null when it threw.
        let graph = unsafe { (shim.new)() };
        if graph.is_null() {
            return Err(CudaGraphError::Failed { stage: "construction", message: "at::cuda::CUDAGraph() threw".into() });
        }
        Ok(Self { shim, graph, captured: false })
    }

    fn checked(&mut self, stage: &'static str, call: impl FnOnce(*mut c_void, *mut c_char, usize) -> c_int) -> Result<(), CudaGraphError> {
        let mut error = [0 as c_char; ERROR_LEN];
        if call(self.graph, error.as_mut_ptr(), ERROR_LEN) == 0 {
            return Ok(());
        }
        // SAFETY: the shim wrote a NUL-terminated message within the buffer (it starts zeroed).
        let message = unsafe { CStr::from_ptr(error.as_ptr()) }.to_string_lossy().into_owned();
        Err(CudaGraphError::Failed { stage, message })
    }

    /// Captures what `body` queues on `device` (on a side stream, into the graph's pool). `body`
    /// must not synchronize with the host nor read device memory on it; an error of its own, or
    /// one of the capture, ends the capture without a graph.
    pub fn capture<T, E>(&mut self, device: usize, body: impl FnOnce() -> Result<T, E>) -> Result<Result<T, E>, CudaGraphError> {
        let begin = self.shim.capture_begin;
        let device = c_int::try_from(device).map_err(|_| CudaGraphError::Failed { stage: "capture_begin", message: format!("device {device}") })?;
        // SAFETY: the object is live; the buffer is ERROR_LEN bytes.
        self.checked("capture_begin", |g, e, n| unsafe { begin(g, device, e, n) })?;
        let out = body();
        if out.is_err() {
            // SAFETY: ends the capture begun above.
            unsafe { (self.shim.capture_abort)(self.graph) };
            return Ok(out);
        }
        let end = self.shim.capture_end;
        // SAFETY: as for capture_begin.
        self.checked("capture_end", |g, e, n| unsafe { end(g, e, n) })?;
        self.captured = true;
        Ok(out)
    }

    /// Launches the captured work on the current stream.
    pub fn replay(&mut self) -> Result<(), CudaGraphError> {
        if !self.captured {
            return Err(CudaGraphError::Failed { stage: "replay", message: "nothing captured".into() });
        }
        let replay = self.shim.replay;
        // SAFETY: as for capture_begin.
        self.checked("replay", |g, e, n| unsafe { replay(g, e, n) })
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: created by `new`, freed once.
        unsafe { (self.shim.free)(self.graph) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded shim's symbols resolve against the libtorch_cuda this process loads: a
    /// build made against other headers than the library it runs on fails here.
    #[test]
    fn the_shim_loads_wherever_libtorch_cuda_does() {
        let cuda = super::super::load_cuda();
        match (cfg!(tchseq_cuda_graph), cuda) {
            (true, Ok(_)) => assert!(cuda_graphs_available().is_ok(), "{:?}", cuda_graphs_available()),
            (true, Err(_)) => assert!(matches!(cuda_graphs_available(), Err(CudaGraphError::NoCuda(_)))),
            (false, _) => assert!(matches!(cuda_graphs_available(), Err(CudaGraphError::NotBuilt))),
        }
    }

    /// Without a GPU a graph is never captured: construction or capture_begin fails with a
    /// typed error instead.
    #[test]
    fn without_a_device_a_capture_is_a_typed_error() {
        let outcome = CudaGraph::new().and_then(|mut g| g.capture(0, || Ok::<(), ()>(())).map(|_| g));
        if tch::Cuda::is_available() {
            return;
        }
        match outcome {
            Err(CudaGraphError::NotBuilt | CudaGraphError::NoCuda(_) | CudaGraphError::Failed { .. }) => {}
            Err(CudaGraphError::Unloadable(why)) => panic!("the shim must load where libtorch_cuda does: {why}"),
            Ok(_) => panic!("captured without a device"),
        }
    }
}
