//! Where `--output PATH` writes. A regular file (or a path that does not exist yet) is complete or
//! absent: written as `<path>.partial`, renamed into place by [`PartialFile::commit`], removed
//! when dropped uncommitted (an error, a panic, Ctrl-C aside). A character or block device, a
//! FIFO or a socket (`/dev/null`, a named pipe) is opened and written in place: renaming a file
//! over it would replace it. A symlink is followed, and its target takes the same rule. `-` is
//! stdout.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// What an `--output` path is, after its symlinks.
#[derive(Debug, PartialEq)]
pub enum OutputPath {
    /// `-`
    Stdout,
    /// A regular file or a new path: written as `<path>.partial`, then renamed.
    Atomic(PathBuf),
    /// A device, FIFO or socket: opened for writing as it is.
    InPlace(PathBuf),
}

impl OutputPath {
    pub fn resolve(path: &Path) -> Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(OutputPath::Stdout);
        }
        let mut path = path.to_path_buf();
        for _ in 0..40 {
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(OutputPath::Atomic(path)),
                Err(e) => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).with_context(|| format!("cannot read the link {}", path.display()))?;
                path = path.parent().map_or_else(|| target.clone(), |dir| dir.join(&target));
            } else if kind.is_file() {
                return Ok(OutputPath::Atomic(path));
            } else if kind.is_dir() {
                bail!("{} is a directory, not an output file", path.display());
            } else {
                return Ok(OutputPath::InPlace(path));
            }
        }
        bail!("{}: too many levels of symbolic links", path.display())
    }
}

/// `<path>.partial`.
fn partial_of(path: &Path) -> PathBuf {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    PathBuf::from(partial)
}

/// The regular file `output` names (after its symlinks), which an interrupted run wrote as
/// `<path>.partial`.
fn resumable(output: &Path) -> Result<PathBuf> {
    match OutputPath::resolve(output)? {
        OutputPath::Atomic(path) => Ok(path),
        _ => bail!("--resume needs --output to name a regular file"),
    }
}

/// Opens an [`OutputPath::InPlace`] path for writing as it is (no create, no truncate).
pub fn open_in_place(path: &Path) -> Result<File> {
    OpenOptions::new().write(true).open(path).with_context(|| format!("cannot open {}", path.display()))
}

pub struct PartialFile {
    file: Option<BufWriter<File>>,
    /// Bytes handed to `file` so far.
    written: u64,
    /// `<path>.partial`, renamed to `path` on commit; `None` when written in place.
    partial: Option<PathBuf>,
    path: PathBuf,
}

impl PartialFile {
    /// The file `--output` names, or `None` for stdout (no `--output`, or `-`).
    pub fn for_output(output: Option<&Path>) -> Result<Option<Self>> {
        match output.map(OutputPath::resolve).transpose()? {
            None | Some(OutputPath::Stdout) => Ok(None),
            Some(OutputPath::Atomic(path)) => {
                let partial = partial_of(&path);
                let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
                Ok(Some(PartialFile { file: Some(BufWriter::new(file)), written: 0, partial: Some(partial), path }))
            }
            Some(OutputPath::InPlace(path)) => {
                let file = open_in_place(&path)?;
                Ok(Some(PartialFile { file: Some(BufWriter::new(file)), written: 0, partial: None, path }))
            }
        }
    }

    /// `<path>.partial` of the regular file `output` names (after its symlinks).
    pub fn partial_path(output: &Path) -> Result<PathBuf> {
        Ok(partial_of(&resumable(output)?))
    }

    /// The partial file of an interrupted run, cut back to its first `bytes` bytes (its
    /// complete records) and open for appending.
    pub fn reopen(output: &Path, bytes: u64) -> Result<Self> {
        use std::io::{Seek, SeekFrom};
        let path = resumable(output)?;
        let partial = partial_of(&path);
        let mut file = OpenOptions::new().write(true).open(&partial).with_context(|| format!("--resume: cannot open {}", partial.display()))?;
        let len = file.metadata().with_context(|| format!("--resume: cannot stat {}", partial.display()))?.len();
        if len < bytes {
            bail!("--resume: {} is shorter ({len} bytes) than its progress file says ({bytes} bytes)", partial.display());
        }
        file.set_len(bytes).with_context(|| format!("--resume: cannot cut {} back", partial.display()))?;
        file.seek(SeekFrom::End(0))?;
        Ok(PartialFile { file: Some(BufWriter::new(file)), written: bytes, partial: Some(partial), path })
    }

    /// Flushes, syncs and renames the file into place (flushes only, written in place).
    pub fn commit(mut self) -> Result<()> {
        let file = self.file.take().context("the output was already committed")?;
        let shown = self.partial.as_ref().unwrap_or(&self.path).display().to_string();
        let file = file.into_inner().map_err(|e| e.into_error()).with_context(|| format!("writing {shown}"))?;
        let Some(partial) = &self.partial else { return Ok(()) };
        file.sync_all().with_context(|| format!("writing {shown}"))?;
        std::fs::rename(partial, &self.path).with_context(|| format!("renaming {} to {}", partial.display(), self.path.display()))
    }
}

impl PartialFile {
    /// `<path>.partial` and its descriptor, when the file is written as one (not in place).
    pub fn partial(&self) -> Option<(&Path, i32)> {
        use std::os::fd::AsRawFd;
        Some((self.partial.as_deref()?, self.file.as_ref()?.get_ref().as_raw_fd()))
    }

    /// Bytes written so far (on disk after a flush).
    pub fn written(&self) -> u64 {
        self.written
    }
}

/// Where a command's records go: `--output`'s file (written complete or not at all, see
/// [`PartialFile`]) or stdout, as it goes.
pub enum OutputSink {
    File(PartialFile),
    Stdout(io::Stdout),
}

impl OutputSink {
    pub fn open(output: Option<&Path>) -> Result<Self> {
        Ok(match PartialFile::for_output(output)? {
            Some(file) => Self::File(file),
            None => Self::Stdout(io::stdout()),
        })
    }

    /// Puts a file into place (see [`PartialFile::commit`]); flushes stdout.
    pub fn commit(self) -> Result<()> {
        match self {
            Self::File(file) => file.commit(),
            Self::Stdout(mut out) => Ok(out.flush()?),
        }
    }
}

impl Write for OutputSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::File(f) => f.write(buf),
            Self::Stdout(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::File(f) => f.flush(),
            Self::Stdout(s) => s.flush(),
        }
    }
}

impl Write for PartialFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.as_mut().ok_or_else(|| io::Error::other("committed"))?.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if let (Some(_), Some(partial)) = (self.file.take(), &self.partial) {
            let _ = std::fs::remove_file(partial);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_by_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.txt");
        assert_eq!(OutputPath::resolve(Path::new("-")).unwrap(), OutputPath::Stdout);
        assert_eq!(OutputPath::resolve(&file).unwrap(), OutputPath::Atomic(file.clone()));
        std::fs::write(&file, "old").unwrap();
        assert_eq!(OutputPath::resolve(&file).unwrap(), OutputPath::Atomic(file.clone()));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("out.txt", &link).unwrap();
        assert_eq!(OutputPath::resolve(&link).unwrap(), OutputPath::Atomic(file.clone()));
        assert_eq!(OutputPath::resolve(Path::new("/dev/null")).unwrap(), OutputPath::InPlace("/dev/null".into()));
        let err = OutputPath::resolve(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        let looped = dir.path().join("loop");
        std::os::unix::fs::symlink("loop", &looped).unwrap();
        assert!(OutputPath::resolve(&looped).unwrap_err().to_string().contains("too many levels"));
    }
}
