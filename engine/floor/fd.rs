//! File descriptors: what the process and reaper modules both do to one.

/// Make reads of `fd` return at once when it has nothing, instead of waiting. A failure leaves
/// it blocking, which only makes a read wait for data after a poll said there was some (or an
/// end).
pub(crate) fn set_nonblocking(fd: std::os::fd::BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
        let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
    }
}

/// [`set_nonblocking`] for a pipe end this process has just made: its status flags are known to
/// be clear, so they are set without being read first (one system call a pipe, not two).
pub(crate) fn set_nonblocking_fresh_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let _ = fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
}
