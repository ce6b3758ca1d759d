//! Helpers shared by the commands: threads, devices, error formatting.

use anyhow::{bail, Result};
use tch::Device;

use super::args::DeviceArg;

/// Applies `--threads` (default: all cores, libtorch's own default).
pub fn apply_threads(threads: Option<usize>) -> Result<()> {
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        let n = i32::try_from(n).map_err(|_| anyhow::anyhow!("--threads {n} is too large"))?;
        tch::set_num_threads(n);
    }
    Ok(())
}

/// Resolves `--device cpu|cuda|auto` to a libtorch device.
#[allow(dead_code)]
pub fn resolve_device(arg: DeviceArg) -> Result<Device> {
    match arg {
        DeviceArg::Cpu => Ok(Device::Cpu),
        DeviceArg::Auto => Ok(Device::cuda_if_available()),
        DeviceArg::Cuda => {
            if tch::Cuda::is_available() {
                Ok(Device::Cuda(0))
            } else {
                bail!(
                    "--device cuda requested but libtorch sees no CUDA device (run `tchseq doctor` for details)"
                )
            }
        }
    }
}

/// True when the error comes from writing into a closed pipe (`tchseq ... | head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes on one line, `outer: inner: innermost`.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string().replace(['\n', '\r'], " ");
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
