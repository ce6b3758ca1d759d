//! `TCHSEQ_OP_PROFILE=FILE`: every libtorch operator call of the run counted and timed
//! (csrc/op_profile.cpp), written to FILE as TSV when the command ends. `bench/op_profile.py`
//! turns it into `docs/performance.md`'s per-step table. Costs about a microsecond per op.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

extern "C" {
    fn tchseq_op_profile_start();
    fn tchseq_op_profile_report() -> *mut c_char;
    fn tchseq_op_profile_free(report: *mut c_char);
}

pub struct OpProfile {
    path: PathBuf,
}

impl OpProfile {
    /// The environment variable that names the report file.
    pub const ENV: &'static str = "TCHSEQ_OP_PROFILE";

    /// Starts counting when [`Self::ENV`] names a file.
    pub fn from_env() -> Option<Self> {
        let path = PathBuf::from(std::env::var_os(Self::ENV).filter(|p| !p.is_empty())?);
        // SAFETY: installs a global callback once; libtorch is loaded.
        unsafe { tchseq_op_profile_start() };
        Some(Self { path })
    }

    /// `op\tcalls\ttop_level_calls\ttotal_ns\tself_ns`, one line per operator name.
    pub fn report() -> String {
        // SAFETY: a NUL-terminated malloc'd copy (or null), freed here.
        unsafe {
            let ptr = tchseq_op_profile_report();
            if ptr.is_null() {
                return String::new();
            }
            let text = CStr::from_ptr(ptr).to_string_lossy().into_owned();
            tchseq_op_profile_free(ptr);
            text
        }
    }

    /// Writes the report (through a `.partial` file renamed into place).
    pub fn write(&self) -> std::io::Result<()> {
        let mut partial = self.path.clone().into_os_string();
        partial.push(".partial");
        let text = format!("op\tcalls\ttop_level_calls\ttotal_ns\tself_ns\n{}", Self::report());
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, &self.path)
    }
}
