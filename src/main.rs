//! `tchseq`: thin entry point. Parsing lives in `cli::args`, each command in `cli/<command>.rs`.
mod cli;
mod serve;

use std::io::Write;

fn main() {
    let code = cli::main();
    exit_now(code)
}

/// Ends the process once the command is done (every file it wrote closed, its own memory let go
/// of) and the output flushed, without the C++ static destructors: libtorch's deregister each of
/// its operators one at a time, 60–80 ms of every run, for memory the kernel takes back at once.
fn exit_now(code: u8) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: fflush(NULL) flushes every C stdio stream (libtorch's C++ streams write through
    // them); `_exit` then ends the process, which has nothing left to write.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(i32::from(code))
    }
}
