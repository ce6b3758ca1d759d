//! Ctrl-C (SIGINT) and SIGTERM during a run that writes a file: the partial file is cut back to
//! its last complete record, one line on stderr says how many input lines or rows it holds and
//! how to go on, and the process exits 130 (SIGINT) or 143 (SIGTERM), as a shell expects.
//!
//! The handler may only make async-signal-safe calls, so everything it prints is prepared when
//! the run arms it, and the progress it reports lives in atomics.

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

/// From now on SIGINT and SIGTERM print `note` (after cutting the file `fd` back to the bytes of
/// the last [`progress`]) and end the process.
pub fn arm(note: Vec<Piece>, fd: i32) {
    if NOTE.set(note).is_err() {
        return;
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
    // SAFETY: ftruncate, write and _exit are async-signal-safe; the buffers outlive the calls
    unsafe {
        if fd >= 0 {
            let _ = libc::ftruncate(fd, BYTES.load(Ordering::SeqCst) as libc::off_t);
        }
        let say = |bytes: &[u8]| {
            let _ = libc::write(2, bytes.as_ptr().cast(), bytes.len());
        };
        say(b"\n");
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
    #[test]
    fn decimal_writes_every_digit() {
        for n in [0u64, 7, 10, 4410, u64::MAX] {
            assert_eq!(super::decimal(n, &mut [0u8; 20]), n.to_string().as_bytes());
        }
    }
}
