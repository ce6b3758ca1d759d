//! Ctrl-C (SIGINT) and SIGTERM during a run that writes a file: the partial file is cut back to
//! its last complete record, one line on stderr says how many input lines or rows it holds and
//! how to go on, and the process exits 130 (SIGINT) or 143 (SIGTERM), as a shell expects.
//!
//! The handler may only make async-signal-safe calls, so everything it prints is prepared when
//! the run arms it, and the progress it reports lives in atomics.
//!
//! A run that can be resumed arms the handler before it writes its first checkpoint, so that a
//! signal never meets the default action once a checkpoint exists; until one does, the handler
//! says there is nothing to resume.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A piece of the line the handler prints.
pub enum Piece {
    Text(String),
    /// How many complete input lines or rows the partial file holds.
    Done,
    /// That number plus one: where the rest starts.
    Next,
}

static NOTE: OnceLock<Vec<Piece>> = OnceLock::new();
static DONE: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static FD: AtomicI32 = AtomicI32::new(-1);
/// The checkpoint `--resume` reads, when the note tells the user to resume.
static CHECKPOINT: OnceLock<CString> = OnceLock::new();

const NOTHING_TO_RESUME: &[u8] =
    b"interrupted before the first checkpoint was written, so there is nothing to resume: run the command again";

/// From now on SIGINT and SIGTERM print `note` (after cutting the file `fd` back to the bytes of
/// the last [`progress`]) and end the process. With `checkpoint`, the note is printed only once
/// that file exists; before, the handler says there is nothing to resume.
pub fn arm(note: Vec<Piece>, fd: i32, checkpoint: Option<&Path>) {
    use std::os::unix::ffi::OsStrExt;
    if NOTE.set(note).is_err() {
        return;
    }
    if let Some(path) = checkpoint {
        // a path holding a NUL byte cannot exist, so it cannot be checked: print the note as before
        if let Ok(path) = CString::new(path.as_os_str().as_bytes()) {
            let _ = CHECKPOINT.set(path);
        }
    }
    FD.store(fd, Ordering::SeqCst);
    #[cfg(unix)]
    // SAFETY: installs a handler that makes only async-signal-safe calls (ftruncate, write,
    // _exit) and reads only atomics and the note, which is set before and never changed
    unsafe {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// The partial file now holds `done` complete input lines or rows, in its first `bytes` bytes.
pub fn progress(done: u64, bytes: u64) {
    BYTES.store(bytes, Ordering::SeqCst);
    DONE.store(done, Ordering::SeqCst);
}

extern "C" fn on_signal(signal: libc::c_int) {
    let done = DONE.load(Ordering::SeqCst);
    let fd = FD.load(Ordering::SeqCst);
    // SAFETY: ftruncate, access, write and _exit are async-signal-safe; the buffers outlive the calls
    unsafe {
        if fd >= 0 {
            let _ = libc::ftruncate(fd, BYTES.load(Ordering::SeqCst) as libc::off_t);
        }
        let say = |bytes: &[u8]| {
            let _ = libc::write(2, bytes.as_ptr().cast(), bytes.len());
        };
        say(b"\n");
        if CHECKPOINT.get().is_some_and(|path| libc::access(path.as_ptr(), libc::F_OK) != 0) {
            say(NOTHING_TO_RESUME);
            say(b"\n");
            libc::_exit(128 + signal);
        }
        for piece in NOTE.get().map_or(&[][..], Vec::as_slice) {
            match piece {
                Piece::Text(t) => say(t.as_bytes()),
                Piece::Done => say(decimal(done, &mut [0u8; 20])),
                Piece::Next => say(decimal(done + 1, &mut [0u8; 20])),
            }
        }
        say(b"\n");
        libc::_exit(128 + signal);
    }
}

/// `n` in decimal, written into the end of `buf` (no allocation: this runs in a signal handler).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    const CHILD: &str = "TCHSEQ_INTERRUPT_TEST_DIR";

    /// Run by the test below in a child process of this test binary: arms the handler over a
    /// partial file and signals itself, with its checkpoint written first or not.
    #[test]
    #[ignore = "a child process of signal_says_to_resume_only_once_a_checkpoint_exists"]
    fn armed_child() {
        let Some(dir) = std::env::var_os(CHILD).map(std::path::PathBuf::from) else { return };
        let mut partial = std::fs::File::create(dir.join("out.partial")).unwrap();
        partial.write_all(b"kept\nnot yet").unwrap();
        progress(1, 5);
        let checkpoint = dir.join("out.partial.progress");
        arm(vec![Piece::Text("held ".into()), Piece::Done, Piece::Text(" rows; resume".into())], partial.as_raw_fd(), Some(&checkpoint));
        if std::env::var_os("TCHSEQ_INTERRUPT_TEST_CHECKPOINT").is_some() {
            std::fs::write(&checkpoint, b"{}").unwrap();
        }
        // SAFETY: signals this process, whose handler is armed above
        unsafe { libc::raise(libc::SIGTERM) };
        unreachable!("the handler ends the process");
    }

    #[test]
    fn signal_says_to_resume_only_once_a_checkpoint_exists() {
        for checkpoint in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut child = std::process::Command::new(std::env::current_exe().unwrap());
            child.args(["--exact", "cli::interrupt::tests::armed_child", "--ignored", "--nocapture", "--test-threads=1"]);
            child.env(CHILD, dir.path());
            if checkpoint {
                child.env("TCHSEQ_INTERRUPT_TEST_CHECKPOINT", "1");
            }
            let out = child.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{err}");
            let said: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            let expected = if checkpoint { "held 1 rows; resume" } else { std::str::from_utf8(NOTHING_TO_RESUME).unwrap() };
            assert_eq!(said, [expected], "{err}");
            assert_eq!(std::fs::read(dir.path().join("out.partial")).unwrap(), b"kept\n");
        }
    }

    #[test]
    fn decimal_writes_every_digit() {
        for n in [0u64, 7, 10, 4410, u64::MAX] {
            assert_eq!(super::decimal(n, &mut [0u8; 20]), n.to_string().as_bytes());
        }
    }
}
