//! Every libc call of the driver, behind small safe wrappers (docs/ARCHITECTURE.md,
//! "Code rules"): non-blocking connect, vectored send without SIGPIPE, epoll, and the
//! anonymous mapping of an owned heap.
#![allow(unsafe_code)]

use std::{
    io,
    net::{IpAddr, SocketAddr, TcpStream},
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    ptr::NonNull,
};

/// Turns a libc return value of `-1` into `io::Error::last_os_error()`.
fn cvt<T: PartialEq + From<i8>>(r: T) -> io::Result<T> {
    if r == T::from(-1) {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// [`sendv`] of one range: plain `send` (no message header or iovec for
/// the kernel to copy in: a small frame's send is measurably cheaper). The
/// range is an `iovec`, not a slice: merged ranges may span two buffers.
fn send1(fd: RawFd, a: &libc::iovec) -> io::Result<usize> {
    loop {
        // SAFETY: `a` describes bytes borrowed for the gather's lifetime
        // (`Gather::push`), live for the call; send only reads them.
        let r = unsafe {
            libc::send(
                fd,
                a.iov_base,
                a.iov_len,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(0),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// A `sockaddr_storage` for `addr`, and its length.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { core::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { core::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Connections a listener's kernel queue holds before they are accepted
/// (the kernel caps it at `net.core.somaxconn`). `std` listens with 128: a
/// crowd of PEs connecting at once to one (connect-on-first-use, two or
/// more connections each) overflows that, and a dropped SYN is sent again
/// only after a second.
pub(crate) const LISTEN_BACKLOG: i32 = 4096;

/// Raises `l`'s accept queue to [`LISTEN_BACKLOG`] (`listen` again on a
/// listening socket sets its backlog).
///
/// # Errors
/// The `listen` call's.
pub(crate) fn raise_backlog(l: &std::net::TcpListener) -> io::Result<()> {
    // SAFETY: `l` owns a valid listening socket for the call.
    cvt(unsafe { libc::listen(l.as_raw_fd(), LISTEN_BACKLOG) }).map(|_| ())
}

/// Starts a non-blocking TCP connection to `to` from the local address `from`
/// (port 0: the interface of a rail), with TCP_NODELAY set. The connection
/// completes later: see [`connect_result`].
pub(crate) fn connect_nonblocking(from: IpAddr, to: &SocketAddr) -> io::Result<TcpStream> {
    let family = if to.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the returned descriptor is owned below.
    let fd = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if from.is_ipv4() == to.is_ipv4() {
        let (ss, len) = sockaddr(&SocketAddr::new(from, 0));
        // SAFETY: `ss` holds a valid address of `len` bytes for this family.
        cvt(unsafe { libc::bind(fd, (&raw const ss).cast(), len) })?;
    }
    let (ss, len) = sockaddr(to);
    // SAFETY: as above.
    let r = unsafe { libc::connect(fd, (&raw const ss).cast(), len) };
    if r == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    let s = TcpStream::from(owned);
    s.set_nodelay(true)?;
    Ok(s)
}

/// Whether a connection started by [`connect_nonblocking`] is established:
/// `Ok(true)` done, `Ok(false)` still in progress, `Err` failed (for example
/// `ECONNREFUSED`).
pub(crate) fn connect_result(s: &TcpStream) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = cvt(unsafe { libc::poll(&raw mut p, 1, 0) })?;
    if n == 0 {
        return Ok(false);
    }
    match s.take_error()? {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

/// Byte ranges gathered for one vectored write ([`sendv`]), in a fixed
/// array of `N` `iovec`s on the caller's stack (no allocation). A range that
/// starts where the previous one ends (frames next to each other in the
/// replay ring) extends it instead of taking a new slot.
pub(crate) struct Gather<'a, const N: usize> {
    iov: [libc::iovec; N],
    n: usize,
    bytes: usize,
    _borrow: core::marker::PhantomData<&'a [u8]>,
}

impl<'a, const N: usize> Gather<'a, N> {
    /// Nothing gathered.
    pub(crate) fn new() -> Self {
        Gather {
            iov: [libc::iovec {
                iov_base: core::ptr::null_mut(),
                iov_len: 0,
            }; N],
            n: 0,
            bytes: 0,
            _borrow: core::marker::PhantomData,
        }
    }

    /// Bytes gathered.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `slots` more ranges surely fit.
    pub(crate) fn room(&self, slots: usize) -> bool {
        N - self.n >= slots
    }

    /// Appends `b` (nothing when empty); `false` when no slot is left.
    pub(crate) fn push(&mut self, b: &'a [u8]) -> bool {
        if b.is_empty() {
            return true;
        }
        if let Some(last) = self.n.checked_sub(1).map(|i| &mut self.iov[i])
            && last.iov_base.cast::<u8>().wrapping_add(last.iov_len) == b.as_ptr().cast_mut()
        {
            last.iov_len += b.len();
            self.bytes += b.len();
            return true;
        }
        if self.n == N {
            return false;
        }
        self.iov[self.n] = libc::iovec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        };
        self.n += 1;
        self.bytes += b.len();
        true
    }
}

/// One buffer in one `send` (a fresh connection's challenge: its socket
/// buffer is empty, so a short count means the connection is no good).
/// Returns the bytes sent; 0 when the socket buffer is full.
pub(crate) fn send_one(fd: RawFd, b: &[u8]) -> io::Result<usize> {
    let a = libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    };
    send1(fd, &a)
}

/// Writes what `g` gathered in one system call: `send` for one range (no
/// message header or iovec for the kernel to copy in), else one `sendmsg`,
/// with `MSG_NOSIGNAL`. Returns the bytes sent, possibly fewer than gathered;
/// 0 when the socket buffer is full (or nothing was gathered).
pub(crate) fn sendv<const N: usize>(fd: RawFd, g: &Gather<'_, N>) -> io::Result<usize> {
    match g.n {
        0 => return Ok(0),
        1 => return send1(fd, &g.iov[0]),
        _ => {}
    }
    // SAFETY: msghdr is plain old data; all-zero is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = g.iov.as_ptr().cast_mut();
    msg.msg_iovlen = g.n as _;
    loop {
        // SAFETY: the first `g.n` iovecs point into slices borrowed for the
        // gather's lifetime (`Gather::push`); sendmsg only reads them.
        let r =
            unsafe { libc::sendmsg(fd, &raw const msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(0),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Reads into `buf`: `Ok(Some(n))` with `n > 0` bytes, `Ok(Some(0))` at end of
/// stream, `Ok(None)` when nothing is there now.
pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(Some(r as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(None),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Whether the peer closed (or reset) the connection on `fd` and nothing
/// is left to read before the end: a one-byte `MSG_PEEK`, which consumes
/// nothing. Cold path (a handshake completing a rail).
pub(crate) fn hung_up(fd: RawFd) -> bool {
    let mut b = [0u8; 1];
    loop {
        // SAFETY: `b` is valid for writes of its length.
        let r = unsafe {
            libc::recv(
                fd,
                b.as_mut_ptr().cast(),
                b.len(),
                libc::MSG_DONTWAIT | libc::MSG_PEEK,
            )
        };
        if r >= 0 {
            return r == 0;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) => return false,
            Some(libc::EINTR) => continue,
            _ => return true,
        }
    }
}

/// An epoll instance the driver parks on (readability of its sockets).
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    /// A new instance.
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain epoll_create1; the descriptor is owned below.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fresh descriptor nobody else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for readability (level triggered). Closing `fd` removes it.
    pub(crate) fn add(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: fd as u64,
        };
        // SAFETY: valid epoll and socket descriptors; `ev` lives for the call.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) })
            .map(|_| ())
    }

    /// Stops watching `fd` (no error when it was not watched).
    pub(crate) fn remove(&self, fd: RawFd) {
        // SAFETY: valid epoll and socket descriptors; a null event is
        // allowed for EPOLL_CTL_DEL (Linux 2.6.9 and later).
        let _ = unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                core::ptr::null_mut(),
            )
        };
    }

    /// Another descriptor for the same epoll instance (its own lifetime).
    pub(crate) fn try_clone(&self) -> io::Result<Epoll> {
        Ok(Epoll(self.0.try_clone()?))
    }

    /// Waits up to `timeout_ms` for any watched descriptor to be readable.
    /// Returns whether one is.
    pub(crate) fn wait(&self, timeout_ms: i32) -> bool {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: `evs` is writable for 8 events.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 8, timeout_ms) };
        n > 0
    }
}

/// A zeroed, page-aligned anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct AnonMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is memory owned by this value; moving it moves only the
// pointer. Accesses go through the driver's heap accessors.
unsafe impl Send for AnonMap {}

impl AnonMap {
    /// Maps `len` (> 0) zeroed bytes.
    pub(crate) fn new(len: usize) -> io::Result<AnonMap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty heap"));
        }
        // SAFETY: a fresh anonymous mapping chosen by the kernel.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(AnonMap { base, len })
    }

    /// Start of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; nothing borrowed outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
