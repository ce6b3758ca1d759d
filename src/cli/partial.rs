//! An output file that is complete or absent: written as `<path>.partial`, renamed into place by
//! [`PartialFile::commit`], removed when dropped uncommitted (an error, a panic, Ctrl-C aside).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub struct PartialFile {
    file: Option<BufWriter<File>>,
    partial: PathBuf,
    path: PathBuf,
}

impl PartialFile {
    pub fn create(path: &Path) -> Result<Self> {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
        Ok(PartialFile { file: Some(BufWriter::new(file)), partial, path: path.to_path_buf() })
    }

    /// Flushes, syncs and renames the file into place.
    pub fn commit(mut self) -> Result<()> {
        let file = self.file.take().context("the output was already committed")?;
        let file = file.into_inner().map_err(|e| e.into_error()).with_context(|| format!("writing {}", self.partial.display()))?;
        file.sync_all().with_context(|| format!("writing {}", self.partial.display()))?;
        std::fs::rename(&self.partial, &self.path).with_context(|| format!("renaming {} to {}", self.partial.display(), self.path.display()))
    }
}

impl Write for PartialFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.as_mut().ok_or_else(|| io::Error::other("committed"))?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}
