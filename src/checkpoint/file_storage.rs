//! The checkpoint file's bytes, mapped, and tensors that read them where they lie.
//!
//! A storage kept in the zip uncompressed becomes a tensor over the mapping, not a copy: the fast
//! compute types pack each linear layer's weight straight from the file, and the file's pages
//! go back to the kernel as each storage dies. When loading is done, [`FileStorages::detach`]
//! moves every storage still in use into memory of its own, under the tensors that view it, so
//! that nothing computes from the file afterwards (a file changed or truncated under a running
//! model would change its weights, or fault).

use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::Arc;

use tch::{Kind, Tensor};

use super::CheckpointError;

mod ffi {
    use std::ffi::{c_char, c_void};
    use torch_sys::C_tensor;

    #[repr(C)]
    pub struct List {
        _private: [u8; 0],
    }

    extern "C" {
        pub fn tchseq_file_storages_new() -> *mut List;
        pub fn tchseq_file_storages_tensor(
            list: *mut List,
            data: *mut c_void,
            numel: i64,
            scalar_type: i8,
            context: *mut c_void,
            release: extern "C" fn(*mut c_void),
            error: *mut *mut c_char,
        ) -> *mut C_tensor;
        pub fn tchseq_file_storages_detach(list: *mut List) -> i64;
        pub fn tchseq_storage_own(tensor: *const C_tensor, error: *mut *mut c_char) -> bool;
        pub fn tchseq_file_storages_free(list: *mut List);
    }
}

/// A storage this small is copied: not worth a mapping's bookkeeping.
const SMALLEST_BYTES: usize = 4096;
/// Where a storage must start to be used in place: libtorch's own allocations are 64-byte
/// aligned, and `model/weights.rs` shares only such weights (torch.save aligns zip entries so).
const ALIGNMENT: usize = 64;

/// The file's bytes, mapped privately: a write (none is made) would copy the page, not reach
/// the file.
pub(super) struct FileBytes {
    pub(super) map: memmap2::MmapMut,
}

/// `read_all`: ask the kernel to read the whole file ahead (for loads that read every storage; a
/// summary reads only the pickle). Read ahead into the page cache, not faulted into this
/// process: `MAP_POPULATE` made the whole file resident at once.
pub(super) fn open(path: &Path, read_all: bool) -> Result<Arc<FileBytes>, CheckpointError> {
    let io = |source| CheckpointError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(CheckpointError::Invalid { path: path.to_path_buf(), msg: "is a directory, not a checkpoint file".into() });
    }
    // SAFETY: the map is private to this process; a checkpoint modified while it is being loaded
    // is outside what any loader can defend against (torch.load included), and `detach` ends
    // every tensor's use of it once loading is done.
    let map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }.map_err(io)?;
    if super::hf_dir::is_lfs_pointer(&map) {
        return Err(CheckpointError::LfsPointer { path: path.to_path_buf() });
    }
    #[cfg(unix)]
    if read_all {
        // advice only: a kernel that declines it reads the pages as they are touched
        let _ = map.advise(memmap2::Advice::WillNeed);
    }
    Ok(Arc::new(FileBytes { map }))
}

/// Hands the mapped pages wholly inside `part` (a slice of `map`) back to the kernel, so that
/// bytes already copied or no longer used do not count twice in peak RSS. The map stays valid:
/// a later read faults the file back in.
pub(super) fn release_pages(map: &[u8], part: &[u8]) {
    #[cfg(unix)]
    {
        let range = map.as_ptr_range();
        let (start, end) = (part.as_ptr() as usize, part.as_ptr() as usize + part.len());
        if start < range.start as usize || end > range.end as usize {
            return;
        }
        // SAFETY: sysconf has no preconditions.
        let page = match usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }) {
            Ok(p) if p.is_power_of_two() => p,
            _ => return,
        };
        let first = (start + page - 1) & !(page - 1);
        let last = end & !(page - 1);
        if last > first {
            // SAFETY: [first, last) lies inside the private file mapping and no tensor reads it
            // any more; MADV_DONTNEED only drops its pages from this process, and the contents
            // read back are the file's.
            unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_DONTNEED) };
        }
    }
    #[cfg(not(unix))]
    let _ = (map, part);
}

/// What a storage over the file holds until it lets go of its bytes.
struct Lease {
    file: Arc<FileBytes>,
    start: usize,
    len: usize,
}

extern "C" fn release(context: *mut c_void) {
    // SAFETY: `context` is the `Box<Lease>` handed over in `tensor_over`, released exactly once.
    let lease = unsafe { Box::from_raw(context as *mut Lease) };
    let map: &[u8] = &lease.file.map;
    release_pages(map, &map[lease.start..lease.start + lease.len]);
}

/// The storages made over the file, as weak references (they do not keep a storage alive).
pub struct FileStorages(std::ptr::NonNull<ffi::List>);

// SAFETY: the list is only touched through `&mut self` (and in `drop`); libtorch's storages are
// shared across threads as every tensor is.
unsafe impl Send for FileStorages {}
unsafe impl Sync for FileStorages {}

impl std::fmt::Debug for FileStorages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileStorages")
    }
}

/// c10's `ScalarType` of a storage kind.
fn scalar_type(kind: Kind) -> Option<i8> {
    Some(match kind {
        Kind::Uint8 => 0,
        Kind::Int8 => 1,
        Kind::Int16 => 2,
        Kind::Int => 3,
        Kind::Int64 => 4,
        Kind::Half => 5,
        Kind::Float => 6,
        Kind::Double => 7,
        Kind::Bool => 11,
        Kind::BFloat16 => 15,
        _ => return None,
    })
}

impl FileStorages {
    pub(super) fn new() -> Self {
        // SAFETY: no preconditions; null only when out of memory.
        let list = unsafe { ffi::tchseq_file_storages_new() };
        Self(std::ptr::NonNull::new(list).expect("out of memory for the list of file storages"))
    }

    /// A 1-D tensor of `kind` over `part` of `file`'s mapping, where `part` is a whole storage
    /// that can be used in place (large enough, aligned); `None` where it cannot.
    pub(super) fn tensor_over(&mut self, file: &Arc<FileBytes>, part: &[u8], kind: Kind) -> Result<Option<Tensor>, StorageError> {
        let map: &[u8] = &file.map;
        let start = (part.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
        let size = kind.elt_size_in_bytes();
        let (Some(code), true) = (scalar_type(kind), start < map.len() && start + part.len() <= map.len()) else {
            return Ok(None);
        };
        if part.len() < SMALLEST_BYTES || !part.len().is_multiple_of(size) || !(part.as_ptr() as usize).is_multiple_of(ALIGNMENT) {
            return Ok(None);
        }
        let lease = Box::into_raw(Box::new(Lease { file: Arc::clone(file), start, len: part.len() }));
        let mut error: *mut c_char = std::ptr::null_mut();
        // SAFETY: `part` lies in the mapping the lease keeps alive until `release` runs (once, by
        // libtorch, also on an error); the mapping is private and writable, so a write through
        // the tensor would copy the page and never reach the file.
        let t = unsafe {
            ffi::tchseq_file_storages_tensor(
                self.0.as_ptr(),
                part.as_ptr() as *mut c_void,
                (part.len() / size) as i64,
                code,
                lease as *mut c_void,
                release,
                &mut error,
            )
        };
        if t.is_null() {
            return Err(take_error(error));
        }
        // SAFETY: a new at::Tensor that `from_ptr` takes ownership of.
        Ok(Some(unsafe { Tensor::from_ptr(t) }))
    }

    /// Moves every storage still in use into memory of its own, and forgets them all. Returns
    /// how many could not be moved (out of memory): those keep reading the file.
    pub fn detach(&mut self) -> usize {
        // SAFETY: a valid list; no storage is being written during a load.
        unsafe { ffi::tchseq_file_storages_detach(self.0.as_ptr()) as usize }
    }
}

/// Moves `tensor`'s storage into memory of its own if it is over a checkpoint's file (views of
/// it included), before the caller writes it in place: a write to the private mapping would copy
/// each page on its own fault, and every such copy flushes the page from the other cores' TLBs.
pub fn own_storage(tensor: &Tensor) -> Result<(), StorageError> {
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: a valid tensor; its storage is not being read or written while it moves.
    if unsafe { ffi::tchseq_storage_own(tensor.as_ptr(), &mut error) } {
        Ok(())
    } else {
        Err(take_error(error))
    }
}

/// What libtorch answered when a storage over the file could not be made or moved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a storage over the checkpoint's file: {0}")]
pub struct StorageError(pub String);

/// The shim's malloc'ed message, freed.
fn take_error(error: *mut c_char) -> StorageError {
    if error.is_null() {
        return StorageError("failed without a message".into());
    }
    // SAFETY: a NUL-terminated string the shim malloc'ed, freed once here.
    let text = unsafe { std::ffi::CStr::from_ptr(error) }.to_string_lossy().into_owned();
    unsafe { libc::free(error as *mut c_void) };
    StorageError(text)
}

impl Drop for FileStorages {
    fn drop(&mut self) {
        self.detach();
        // SAFETY: made by `tchseq_file_storages_new`, freed once.
        unsafe { ffi::tchseq_file_storages_free(self.0.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_pages_read_back_as_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let data: Vec<u8> = (0..5 * 4096 + 123).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = open(&path, true).unwrap();
        let map: &[u8] = &file.map;
        release_pages(map, &map[100..4 * 4096 + 5]);
        // a slice that is not part of the map is left alone
        release_pages(map, &data[..]);
        assert_eq!(map, &data[..]);
    }

    /// A file holding `values` as little-endian f32, its directory kept alive, and its bytes.
    fn file_of(values: &[f32]) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, &bytes).unwrap();
        (dir, path, bytes)
    }

    /// A tensor over the file reads the file's values; after `detach` it reads the same values
    /// from memory of its own, views included, and the file can go.
    #[test]
    fn tensors_over_the_file_move_to_memory_of_their_own() {
        let values: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5).collect();
        let (_dir, path, _) = file_of(&values);
        let file = open(&path, true).unwrap();
        let mut list = FileStorages::new();
        let map: &[u8] = &file.map;
        let t = list.tensor_over(&file, map, Kind::Float).unwrap().expect("a page-aligned storage is used in place");
        assert_eq!(t.data_ptr() as usize, map.as_ptr() as usize);
        let view = t.narrow(0, 16, 32).view([4, 8]);
        let dropped = list.tensor_over(&file, map, Kind::Float).unwrap().unwrap();
        assert_eq!(Arc::strong_count(&file), 3, "each storage made holds the file");
        drop(dropped);
        assert_eq!(Arc::strong_count(&file), 2, "a storage that dies lets go of the file");
        // too small, or not aligned: copied by the caller
        assert!(list.tensor_over(&file, &map[..64], Kind::Float).unwrap().is_none());
        assert!(list.tensor_over(&file, &map[4..4 + 8192], Kind::Float).unwrap().is_none());
        assert_eq!(list.detach(), 0);
        assert_eq!(Arc::strong_count(&file), 1, "detached and dropped storages let go of the file");
        drop(file);
        std::fs::remove_file(&path).unwrap();
        assert_ne!(t.data_ptr() as usize, 0);
        assert_eq!(Vec::<f32>::try_from(&t).unwrap(), values);
        assert_eq!(Vec::<f32>::try_from(view.reshape([-1])).unwrap(), values[16..48]);
    }

    /// `own_storage` moves a storage over the file, under all its views, and leaves one of
    /// libtorch's own where it is; a write then changes memory of its own, never the file.
    #[test]
    fn a_storage_over_the_file_is_owned_before_a_write() {
        let values: Vec<f32> = (0..4096).map(|i| i as f32 * 0.25).collect();
        let (_dir, path, bytes) = file_of(&values);
        let file = open(&path, true).unwrap();
        let mut list = FileStorages::new();
        let map: &[u8] = &file.map;
        let t = list.tensor_over(&file, map, Kind::Float).unwrap().expect("used in place");
        let view = t.narrow(0, 8, 16);
        own_storage(&view).unwrap();
        let moved = t.data_ptr() as usize;
        assert_ne!(moved, map.as_ptr() as usize, "moved off the mapping");
        assert_eq!(view.data_ptr() as usize, moved + 8 * 4, "the views moved with it");
        assert_eq!(Arc::strong_count(&file), 1, "the moved storage let go of the file");
        own_storage(&t).unwrap();
        assert_eq!(t.data_ptr() as usize, moved, "a storage of its own stays where it is");
        let _ = t.shallow_clone().f_fill_(1.0).unwrap();
        assert_eq!(Vec::<f32>::try_from(&view).unwrap(), vec![1.0; 16]);
        assert_eq!(&std::fs::read(&path).unwrap(), &bytes, "the file is untouched");
        assert_eq!(list.detach(), 0);
        drop(file);
    }
}
