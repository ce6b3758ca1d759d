//! Faults for tests to inject, so that they can show that a panic costs only its own batch (CLI)
//! or request (server), and that a server whose model worker is gone says so. They exist only in
//! builds with the `test-faults` feature (`make test`); elsewhere nothing reads the variables and
//! every check below is a constant `None`.
//!
//! - `TCHSEQ_TEST_PANIC_ON=WORD`: a batch whose source holds the dictionary symbol WORD panics
//!   before it is computed; in the server, so does the work of a request with WORD in its text.
//! - `TCHSEQ_TEST_STOP_WORKER_ON=WORD`: the server's model worker panics where nothing catches
//!   it, on a request with WORD in its text.

use std::sync::OnceLock;

use crate::text::dictionary::Dictionary;

const PANIC_ON: &str = "TCHSEQ_TEST_PANIC_ON";
const STOP_WORKER_ON: &str = "TCHSEQ_TEST_STOP_WORKER_ON";

#[cfg(feature = "test-faults")]
fn word(var: &'static str, cell: &'static OnceLock<Option<String>>) -> Option<&'static str> {
    cell.get_or_init(|| std::env::var(var).ok().filter(|s| !s.is_empty())).as_deref()
}

#[cfg(not(feature = "test-faults"))]
fn word(_: &'static str, _: &'static OnceLock<Option<String>>) -> Option<&'static str> {
    None
}

fn panic_on() -> Option<&'static str> {
    static WORD: OnceLock<Option<String>> = OnceLock::new();
    word(PANIC_ON, &WORD)
}

fn stop_worker_on() -> Option<&'static str> {
    static WORD: OnceLock<Option<String>> = OnceLock::new();
    word(STOP_WORKER_ON, &WORD)
}

/// Panics when `TCHSEQ_TEST_PANIC_ON` is set and one of `sources` holds its symbol.
pub(crate) fn panic_if_asked<'a>(dict: &Dictionary, mut sources: impl Iterator<Item = &'a [i64]>) {
    let Some(word) = panic_on() else { return };
    let id = dict.index(word);
    if id != dict.unk() && sources.any(|s| s.contains(&id)) {
        panic!("{PANIC_ON}: a batch holds `{word}`");
    }
}

/// Which injected fault, if any, a request's `texts` ask for (each text split into words at
/// every character that is not alphanumeric).
pub fn asked_by<'a>(mut texts: impl Iterator<Item = &'a str>) -> Option<Fault> {
    let (panic, stop) = (panic_on(), stop_worker_on());
    if panic.is_none() && stop.is_none() {
        return None;
    }
    texts.find_map(|t| {
        t.split(|c: char| !c.is_alphanumeric()).find_map(|w| match w {
            _ if Some(w) == stop => Some(Fault::StopWorker),
            _ if Some(w) == panic => Some(Fault::Panic),
            _ => None,
        })
    })
}

/// An injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A panic where the caller catches it.
    Panic,
    /// A panic that ends the worker.
    StopWorker,
}

impl Fault {
    /// Panics, naming the fault.
    pub fn raise(self) -> ! {
        match self {
            Fault::Panic => panic!("{PANIC_ON}: a request holds its word"),
            Fault::StopWorker => panic!("{STOP_WORKER_ON}: a request holds its word"),
        }
    }
}
