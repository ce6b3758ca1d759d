//! The shared libraries' pages that libtorch's start left resident, handed back.
//!
//! Before `main`, libtorch's static initializers run code and read data all over
//! `libtorch_cpu.so`, and the kernel maps each page they touch with its neighbours (fault-around,
//! 64 KiB): some 50 MB of the library is resident when `main` starts, most of it never needed
//! again. Those pages are clean copies of the file, so unmapping them loses nothing: they stay
//! in the page cache, and a page used later faults back in. Pages the process wrote (the dynamic
//! loader's relocations, the library's data) are its own and are kept: only runs of pages that
//! `/proc/self/pagemap` shows as the file's, or as not there at all, are unmapped.

/// Bits of a `/proc/self/pagemap` entry: the page is present, swapped, the file's (or shared).
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const FILE: u64 = 1 << 61;

/// The mappings of `/proc/self/maps` worth looking at, `[start, end)`: a shared library's, and
/// only those the process cannot write unless `writable`.
fn library_mappings(maps: &str, writable: bool) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            let name = path.rsplit('/').next()?;
            if !path.starts_with('/') || !(name.ends_with(".so") || name.contains(".so.")) || (!writable && perms.contains('w')) {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some((usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?))
        })
        .collect()
}

/// The runs of pages, `(first, count)` in page indices from 0, that can be unmapped without
/// losing anything: each page is either the file's own, mapped, or not there at all.
fn clean_runs(entries: &[u64]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    let mut any_present = false;
    for (i, &e) in entries.iter().enumerate().chain(std::iter::once((entries.len(), &SWAPPED))) {
        let clean = if e & PRESENT != 0 { e & FILE != 0 } else { e & SWAPPED == 0 };
        match (clean, start) {
            (true, None) => {
                start = Some(i);
                any_present = e & PRESENT != 0;
            }
            (true, Some(_)) => any_present |= e & PRESENT != 0,
            (false, Some(s)) => {
                if any_present {
                    runs.push((s, i - s));
                }
                start = None;
            }
            (false, None) => {}
        }
    }
    runs
}

/// Unmaps the clean resident pages of the shared libraries mapped now: of every one while this
/// is the process's only thread, of those it cannot write otherwise (another thread could write
/// a page between the look at it and the unmapping). Returns the bytes unmapped (resident or
/// not), or `None` where the kernel does not say which pages are whose.
#[cfg(target_os = "linux")]
pub fn release() -> Option<usize> {
    use std::io::{Read, Seek, SeekFrom};
    // SAFETY: sysconf only reads a constant of the system.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&p| p > 0)?;
    let alone = super::self_status("Threads").is_some_and(|n| n == "1");
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut released = 0;
    for (start, end) in library_mappings(&maps, alone) {
        let pages = (end - start) / page;
        let mut bytes = vec![0u8; pages * 8];
        pagemap.seek(SeekFrom::Start((start / page * 8) as u64)).ok()?;
        pagemap.read_exact(&mut bytes).ok()?;
        let entries: Vec<u64> = bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).collect();
        for (first, count) in clean_runs(&entries) {
            // SAFETY: every page of the run is a clean copy of its file or not mapped: unmapping
            // them changes no byte this process reads.
            if unsafe { libc::madvise((start + first * page) as *mut libc::c_void, count * page, libc::MADV_DONTNEED) } == 0 {
                released += count * page;
            }
        }
    }
    Some(released)
}

#[cfg(not(target_os = "linux"))]
pub fn release() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_libraries_are_looked_at() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1 /usr/bin/tchseq-core
7f0000000000-7f0000004000 r-xp 00010000 fd:01 2 /opt/torch/lib/libtorch_cpu.so
7f0000004000-7f0000005000 r--p 00000000 fd:01 3 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000005000-7f0000006000 rw-p 00000000 00:00 0 
7f0000006000-7f0000007000 rw-p 00000000 00:00 0 [heap]
7ffc00000000-7ffc00001000 r-xp 00000000 00:00 0 [vdso]
7f0000008000-7f0000009000 r--p 00000000 fd:01 4 /data/model.sorted
";
        assert_eq!(library_mappings(maps, true), vec![(0x7f0000000000, 0x7f0000004000), (0x7f0000004000, 0x7f0000005000)]);
    }

    /// Resident kB of libtorch_cpu.so's code.
    #[cfg(target_os = "linux")]
    fn libtorch_code_resident() -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut ours = false;
        let mut kb = 0;
        for line in smaps.lines() {
            if line.split_ascii_whitespace().next().is_some_and(|r| r.contains('-') && !r.ends_with(':')) {
                ours = line.contains(" r-xp ") && line.ends_with("/libtorch_cpu.so");
            } else if let (true, Some(rss)) = (ours, line.strip_prefix("Rss:")) {
                kb += rss.trim().trim_end_matches(" kB").parse::<u64>().unwrap();
            }
        }
        kb
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_pages_leave_and_what_is_used_again_comes_back() {
        use tch::{Kind, Tensor};
        let sum = || f32::try_from(Tensor::from_slice(&[1.0f32, 2.0]).sum(Kind::Float)).unwrap();
        assert_eq!(sum(), 3.0);
        let before = libtorch_code_resident();
        assert!(release().unwrap() > 0);
        let after = libtorch_code_resident();
        assert!(after < before, "libtorch's code: {before} kB resident before, {after} kB after");
        assert_eq!(sum(), 3.0);
    }

    #[test]
    fn a_run_ends_at_a_page_the_process_wrote_or_that_was_swapped() {
        let (file, anon, absent, swapped) = (PRESENT | FILE, PRESENT, 0, SWAPPED);
        assert_eq!(clean_runs(&[file, file, anon, absent, file, swapped, file]), vec![(0, 2), (3, 2), (6, 1)]);
        // a run with nothing resident is not worth a call
        assert_eq!(clean_runs(&[absent, absent, anon, absent]), vec![]);
        assert_eq!(clean_runs(&[]), vec![]);
    }
}
