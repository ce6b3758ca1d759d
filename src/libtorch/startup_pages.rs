//! Transparent huge pages for libtorch's start only, asked for by the `tchseq` launcher. Std
//! only: the launcher, which links no libtorch, compiles this file too.
//!
//! Before `main` runs, libtorch's static initializers register its operators: some 50 MB of heap
//! in small pieces, each new 4 KiB page a fault. glibc's `glibc.malloc.hugetlb=1` grows the heap
//! in 2 MiB pages where the kernel gives them on request (`madvise` mode): on a Zen 4,
//! `tchseq --version` went from 0.175 to 0.141 s, and every command's start with it. Kept for the
//! whole run they made nothing else faster and M2M-size int8's peak RSS 5% higher (1,249 → 1,312
//! MB), so tchseq-core turns them off as it starts (`end_startup_huge_pages`), and from then on
//! its pages fault in as before.

use std::ffi::OsStr;

/// Set by the launcher beside the tunable: tchseq-core ends the huge pages when it sees it.
pub const MARK: &str = "TCHSEQ_STARTUP_HUGE_PAGES";
/// Where the kernel says when it gives transparent huge pages.
pub const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
/// The glibc tunable that has malloc ask for huge pages.
const TUNABLE: &str = "glibc.malloc.hugetlb";

/// `GLIBC_TUNABLES` for tchseq-core: `current` (`None`: unset) with `glibc.malloc.hugetlb=1`
/// added, where the kernel gives huge pages on request only (`thp_enabled`, the kernel's line,
/// reads `[madvise]`) and the user chose neither that tunable nor libtorch's own huge pages
/// (`libtorch_thp`: `THP_MEM_ALLOC_ENABLE` is set). `None`: leave the environment as it is, as
/// for a `current` that is not UTF-8.
pub fn tunables(current: Option<&OsStr>, thp_enabled: &str, libtorch_thp: bool) -> Option<String> {
    if libtorch_thp || !thp_enabled.contains("[madvise]") {
        return None;
    }
    let current = match current {
        Some(c) => Some(c.to_str()?),
        None => None,
    };
    match current.filter(|c| !c.is_empty()) {
        None => Some(format!("{TUNABLE}=1")),
        Some(c) if c.contains(TUNABLE) => None,
        Some(c) => Some(format!("{c}:{TUNABLE}=1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_only_where_the_kernel_gives_huge_pages_on_request() {
        use std::os::unix::ffi::OsStrExt;
        let madvise = "always [madvise] never\n";
        let set = |v: &'static str| Some(OsStr::new(v));
        assert_eq!(tunables(None, madvise, false).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(tunables(set(""), madvise, false).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(tunables(set("glibc.malloc.arena_max=2"), madvise, false).as_deref(), Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"));
        // the user's own choice of the tunable or of libtorch's huge pages stands, and a value
        // that is not UTF-8 is passed on untouched
        assert_eq!(tunables(set("glibc.malloc.hugetlb=0"), madvise, false), None);
        assert_eq!(tunables(Some(OsStr::from_bytes(b"glibc.malloc.arena_max=\xff")), madvise, false), None);
        assert_eq!(tunables(None, madvise, true), None);
        // every page is huge already, none ever is, or the kernel has no such file
        for other in ["[always] madvise never\n", "always madvise [never]\n", ""] {
            assert_eq!(tunables(None, other, false), None, "{other:?}");
        }
    }
}
