//! How OpenMP's threads wait at the end of a parallel region, chosen by the `tchseq` launcher
//! before libgomp is loaded (it reads the variables once, at load). Std only: the launcher, which
//! links no libtorch, compiles this file too.
//!
//! libgomp spins 300,000 times before a waiting thread sleeps. On a quiet machine that is the
//! fastest way to wait; beside another busy process the spinning thread takes the core the
//! working one needs. `bench/threads.py` measured (docs/performance.md): `OMP_WAIT_POLICY=PASSIVE`
//! never collapses under load but is slow quiet, and the fast tier's host kernels, many short
//! parallel regions a step, need the waiting thread awake: 1,000 spins made a batch-1 sentence
//! 25% slower than 3,000, and more spins buy nothing quiet but cost more under a load that starts
//! later. A spin is one `pause`, whose length differs between CPUs: 3,000 of them were enough on
//! an AMD Zen 5, but took 33 µs on an Intel Xeon whose `pause` is 11 ns, where a batch-1 step's
//! threads then fell asleep between its regions (exact mode 14–16 ms a sentence against 12–13 at
//! 50,000 spins). So the quiet wait is a time, [`QUIET_WAIT`], counted in spins of the CPU at hand.
//! The launcher looks once, at start, at how many other tasks are runnable right then.
//! Where `/proc/loadavg` counts more than the cores take, it counts again task by task, leaving
//! out its own process group: a pipeline's other commands (`tchseq … | python3 score.py`) start
//! beside it and are runnable for their start-up, then wait on tchseq's output; read as load,
//! they made every step of the run wait passively, 3× slower at batch 1.

/// What the launcher puts into the program's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `GOMP_SPINCOUNT`, [`quiet_spins`]: the cores are ours.
    Spin,
    /// `OMP_WAIT_POLICY=PASSIVE`: other runnable tasks would share the cores with our threads.
    Passive,
}

/// How long a thread spins before it sleeps on a quiet machine.
pub const QUIET_WAIT: std::time::Duration = std::time::Duration::from_micros(400);
/// The fewest spins, however short a spin: the count measured best on the AMD CPUs before.
pub const MIN_SPINS: u32 = 3_000;
/// The most: libgomp's own count.
pub const MAX_SPINS: u32 = 300_000;

/// The spins that last [`QUIET_WAIT`] where one takes `ns_per_spin`.
pub fn quiet_spins(ns_per_spin: f64) -> u32 {
    let spins = QUIET_WAIT.as_nanos() as f64 / ns_per_spin;
    if spins.is_nan() {
        return MIN_SPINS;
    }
    spins.clamp(f64::from(MIN_SPINS), f64::from(MAX_SPINS)) as u32
}

/// What one spin of libgomp's waiting loop (a `pause`) takes on this CPU: the least of a few
/// short timings, so that a preempted one does not count.
pub fn ns_per_spin() -> f64 {
    const SPINS: u32 = 1_000;
    (0..3)
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..SPINS {
                std::hint::spin_loop();
            }
            start.elapsed().as_nanos() as f64 / f64::from(SPINS)
        })
        .fold(f64::INFINITY, f64::min)
}

/// How often the launcher reads `/proc/loadavg` (1 ms apart) before it takes the least count.
pub const LOOKS: usize = 3;

/// The tasks runnable right now, from `/proc/loadavg`'s fourth field (`runnable/total`), which
/// counts the reader itself.
pub fn runnable(loadavg: &str) -> Option<usize> {
    loadavg.split_whitespace().nth(3)?.split_once('/')?.0.parse().ok()
}

/// `Passive` when the other runnable tasks and our `threads` are more than the `cores`.
pub fn choose(loadavg: &str, threads: usize, cores: usize) -> Wait {
    match runnable(loadavg) {
        Some(n) => choose_beside(n.saturating_sub(1), threads, cores),
        None => Wait::Spin,
    }
}

/// `Passive` when `others` runnable tasks and our `threads` are more than the `cores`.
pub fn choose_beside(others: usize, threads: usize, cores: usize) -> Wait {
    if others + threads > cores {
        Wait::Passive
    } else {
        Wait::Spin
    }
}

/// A task's state and process group, from its `/proc/PID/task/TID/stat` (`pid (comm) state ppid
/// pgrp …`; the command may hold spaces and parentheses).
pub fn state_and_group(stat: &str) -> Option<(char, i64)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// The running or runnable tasks among `stats` outside process group `group`.
pub fn runnable_outside<'a>(stats: impl IntoIterator<Item = &'a str>, group: i64) -> usize {
    stats.into_iter().filter_map(state_and_group).filter(|&(state, g)| state == 'R' && g != group).count()
}

/// The threads the command line asks for: `--threads` (default: every core) times
/// `--inter-threads` (each worker then takes one thread unless `--threads` says otherwise).
pub fn threads_asked(args: &[String], cores: usize) -> usize {
    let value = |flag: &str| {
        let mut found = None;
        for (i, a) in args.iter().enumerate() {
            if a == flag {
                found = args.get(i + 1).and_then(|v| v.parse::<usize>().ok());
            } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                found = v.parse().ok();
            }
        }
        found
    };
    let inter = value("--inter-threads").unwrap_or(1).max(1);
    let intra = value("--threads").unwrap_or(if inter > 1 { 1 } else { cores }).max(1);
    intra.saturating_mul(inter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn waits_passively_only_when_others_would_share_our_cores() {
        assert_eq!(runnable("0.52 0.58 0.59 3/245 12345"), Some(3));
        assert_eq!(runnable("garbage"), None);
        // the reader alone: quiet
        assert_eq!(choose("0.00 0.01 0.05 1/245 1", 2, 2), Wait::Spin);
        // one other task beside two threads on two cores
        assert_eq!(choose("1.00 1.00 1.00 2/245 1", 2, 2), Wait::Passive);
        // ... but not beside one thread, nor on a machine with a core to spare
        assert_eq!(choose("1.00 1.00 1.00 2/245 1", 1, 2), Wait::Spin);
        assert_eq!(choose("1.00 1.00 1.00 2/245 1", 2, 4), Wait::Spin);
        assert_eq!(choose("unreadable", 64, 2), Wait::Spin);
    }

    #[test]
    fn the_quiet_wait_is_a_time_counted_in_this_cpu_s_spins() {
        // an 11 ns pause: 400 µs is 36,363 spins
        assert_eq!(quiet_spins(11.0), 36_363);
        // a long pause keeps the floor, a very short one libgomp's own count
        assert_eq!(quiet_spins(1_000.0), MIN_SPINS);
        assert_eq!(quiet_spins(0.5), MAX_SPINS);
        assert_eq!(quiet_spins(0.0), MAX_SPINS);
        assert_eq!(quiet_spins(f64::NAN), MIN_SPINS);
        let measured = ns_per_spin();
        assert!(measured.is_finite() && measured >= 0.0, "{measured}");
        assert!((MIN_SPINS..=MAX_SPINS).contains(&quiet_spins(measured)));
    }

    #[test]
    fn a_pipeline_s_own_commands_are_not_load() {
        let stats = [
            "100 (tchseq) R 90 100 90 0 -1",
            "101 (python3 (x) y) R 90 100 90 0 -1",
            "200 (rustc) R 1 200 200 0 -1",
            "201 (rustc) S 1 200 200 0 -1",
            "300 (bad",
        ];
        assert_eq!(state_and_group(stats[1]), Some(('R', 100)));
        assert_eq!(state_and_group(stats[4]), None);
        assert_eq!(runnable_outside(stats, 100), 1);
        assert_eq!(runnable_outside(stats, 200), 2);
        assert_eq!(choose_beside(1, 2, 2), Wait::Passive);
        assert_eq!(choose_beside(0, 2, 2), Wait::Spin);
    }

    #[test]
    fn counts_the_threads_the_command_line_asks_for() {
        assert_eq!(threads_asked(&args("translate -m x"), 8), 8);
        assert_eq!(threads_asked(&args("--threads 2 translate"), 8), 2);
        assert_eq!(threads_asked(&args("translate --threads=3 --threads 1"), 8), 1);
        assert_eq!(threads_asked(&args("--inter-threads 4 translate"), 8), 4);
        assert_eq!(threads_asked(&args("--inter-threads=2 --threads 3 translate"), 8), 6);
        assert_eq!(threads_asked(&args("--threads x translate"), 8), 8);
    }
}
