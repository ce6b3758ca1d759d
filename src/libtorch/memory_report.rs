//! `TCHSEQ_MEMORY_REPORT=FILE`: the run's peak memory, written to FILE as one JSON object when
//! the command ends: the process's peak resident set (`VmHWM`) and, where CUDA's allocator ran,
//! its peak allocated and reserved bytes on each device (torch.cuda.max_memory_allocated and
//! max_memory_reserved).

use std::path::PathBuf;

extern "C" {
    fn tchseq_cuda_peak_memory(device: std::ffi::c_int, allocated: *mut i64, reserved: *mut i64) -> std::ffi::c_int;
}

pub struct MemoryReport {
    path: PathBuf,
}

/// One device's peaks, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CudaPeak {
    pub device: usize,
    pub peak_allocated_bytes: i64,
    pub peak_reserved_bytes: i64,
}

impl MemoryReport {
    /// The environment variable that names the report file.
    pub const ENV: &'static str = "TCHSEQ_MEMORY_REPORT";

    pub fn from_env() -> Option<Self> {
        Some(Self { path: PathBuf::from(std::env::var_os(Self::ENV).filter(|p| !p.is_empty())?) })
    }

    /// The CUDA allocator's peaks on every device it has seen; empty without CUDA.
    pub fn cuda_peaks() -> Vec<CudaPeak> {
        if !super::cuda_registered() {
            return Vec::new();
        }
        let devices = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
        (0..devices)
            .filter_map(|device| {
                let (mut allocated, mut reserved) = (0i64, 0i64);
                // SAFETY: two out-parameters for the call; the shim catches libtorch's exceptions.
                let found = unsafe { tchseq_cuda_peak_memory(device as std::ffi::c_int, &mut allocated, &mut reserved) };
                (found == 1).then_some(CudaPeak { device, peak_allocated_bytes: allocated, peak_reserved_bytes: reserved })
            })
            .collect()
    }

    /// The peak resident set of this process, from `/proc/self/status`.
    pub fn peak_rss_bytes() -> Option<u64> {
        let hwm = super::self_status("VmHWM")?;
        hwm.trim_end_matches("kB").trim().parse::<u64>().ok().map(|kb| kb * 1024)
    }

    /// Writes the report (through a `.partial` file renamed into place).
    pub fn write(&self) -> std::io::Result<()> {
        let report = serde_json::json!({
            "peak_rss_bytes": Self::peak_rss_bytes(),
            "cuda": Self::cuda_peaks(),
        });
        let mut partial = self.path.clone().into_os_string();
        partial.push(".partial");
        std::fs::write(&partial, format!("{report}\n"))?;
        std::fs::rename(&partial, &self.path)
    }
}
