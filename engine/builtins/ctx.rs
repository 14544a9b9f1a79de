//! What a built-in may see of the run, and a reader of its files that stops when the run is
//! asked to stop.

use std::path::{Path, PathBuf};

use crate::builtins::WriteRoots;
pub(crate) use crate::floor::cancel::Cancel;
use crate::floor::cancel::POLL_SLICE;

/// What a built-in may see of the run.
pub(crate) struct BuiltinCtx<'a> {
    /// The run's working directory; relative paths resolve against it.
    pub cwd: &'a Path,
    /// The `[workflow] writes` roots; every write must land inside one of them.
    pub writes: &'a WriteRoots,
    /// The locks this run holds (`lock.acquire`), released when the run ends.
    pub locks: &'a crate::floor::locks::HeldLocks,
    /// Whether to stop: checked in every loop over files or bytes, so a Ctrl-C, a SIGTERM or
    /// the stage's `timeout` ends a built-in reading `/dev/zero` as it ends a process.
    pub cancel: Cancel,
    /// The largest output the stage may produce, in bytes (`max_output`): a built-in reading
    /// a file stops reading past it.
    pub max_output: u64,
}

#[cfg(test)]
impl<'a> BuiltinCtx<'a> {
    /// A context for a test: no lock held, never cancelled, no output limit.
    pub(crate) fn for_test(cwd: &'a Path, writes: &'a WriteRoots) -> BuiltinCtx<'a> {
        static NO_LOCKS: crate::floor::locks::HeldLocks = crate::floor::locks::HeldLocks::new();
        BuiltinCtx {
            cwd,
            writes,
            locks: &NO_LOCKS,
            cancel: Cancel::default(),
            max_output: u64::MAX,
        }
    }
}

impl BuiltinCtx<'_> {
    /// A path argument resolved against the run's working directory.
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        self.cwd.join(path)
    }
}

/// A reader that checks a [`Cancel`] before every read: wrapped around a file, it makes any
/// loop over the file's bytes (a copy into a hasher, a line reader, a JSON parser) stop on an
/// interrupt or at the stage's deadline, with an error saying which. A file opened with
/// [`Checked::open`] that is not a regular file (a FIFO, a device) is read only once it is
/// ready, waited for in short polls with the handle checked between them: a FIFO nobody writes
/// to stops the read when asked instead of blocking it in the system for good.
pub(crate) struct Checked<R> {
    pub(crate) inner: R,
    pub(crate) cancel: Cancel,
    /// Wait until the file is readable before each read (opened non-blocking).
    pub(crate) poll: bool,
}

impl Checked<std::fs::File> {
    /// Open `path` for reading. It is opened without waiting (`O_NONBLOCK`): opening a FIFO
    /// waits for a writer, uninterruptibly, and a read of one blocks until data comes. A
    /// regular file reads as usual; anything else is read through [`Checked::poll`].
    pub(crate) fn open(path: &Path, cancel: Cancel) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        cancel.check().map_err(std::io::Error::other)?;
        let inner = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let poll = !inner.metadata()?.is_file();
        Ok(Checked {
            inner,
            cancel,
            poll,
        })
    }
}

impl<R: std::io::Read + std::os::fd::AsRawFd> Checked<R> {
    /// Wait, in slices of [`POLL_SLICE`] with the handle checked before each, until a read
    /// will not block: data is there, or every writer has gone (the read then says the end).
    /// A FIFO that never had a writer is not ready, however long it waits.
    fn wait_readable(&self) -> std::io::Result<()> {
        loop {
            self.cancel.check().map_err(std::io::Error::other)?;
            let slice = self
                .cancel
                .remaining()
                .map_or(POLL_SLICE, |left| left.min(POLL_SLICE));
            let mut fd = libc::pollfd {
                fd: self.inner.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let millis = libc::c_int::try_from(slice.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: `fd` is one valid pollfd, and the count says one.
            let ready = unsafe { libc::poll(&raw mut fd, 1, millis) };
            if ready > 0 {
                return Ok(());
            }
            if ready < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
}

impl<R: std::io::Read + std::os::fd::AsRawFd> std::io::Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            self.cancel.check().map_err(std::io::Error::other)?;
            if self.poll {
                self.wait_readable()?;
            }
            match self.inner.read(buf) {
                // A writer came and has nothing to say yet: wait again.
                Err(error) if self.poll && error.kind() == std::io::ErrorKind::WouldBlock => {}
                read => return read,
            }
        }
    }
}

impl<R: std::io::Seek> std::io::Seek for Checked<R> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(to)
    }
}
