//! The root's connections on its one event loop: nonblocking sockets, the
//! bytes each has sent that do not make a frame yet, the frames queued for
//! it, and the `poll(2)` call that waits on all of them.

use std::{
    collections::{HashMap, VecDeque},
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    os::fd::AsRawFd,
    rc::Rc,
    time::{Duration, Instant},
};

use crate::{
    auth::NONCE_LEN,
    frame::{MAX_FRAME_LEN, MAX_HELLO_FRAME_LEN},
    stream::ReadError,
};

/// Where a connection stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum State {
    /// Challenged; its hello is due by the deadline. Until then at most
    /// [`MAX_HELLO_FRAME_LEN`] bytes are read from it.
    AwaitHello { deadline: Instant },
    /// Its hello proved the secret: every frame it sends is an event.
    Admitted,
    /// Its end (or its refusal) is reported: nothing more is read from it
    /// until the coordinator forgets it.
    Silenced,
    /// The root failed: what it sends is read and dropped until it closes.
    Draining,
}

/// What reading a connection gave.
pub(super) enum Input {
    /// A whole frame: kind and payload.
    Frame(u8, Vec<u8>),
    /// The connection ended, or sent what no frame may be.
    End(ReadError),
}

/// One connection of the root.
pub(super) struct Conn {
    pub(super) peer: SocketAddr,
    pub(super) root_nonce: [u8; NONCE_LEN],
    pub(super) stream: TcpStream,
    pub(super) rank: Option<u32>,
    pub(super) state: State,
    /// Its hello asked for lazy cards.
    pub(super) lazy: bool,
    /// Its hello said it takes cards and localities from a store: it gets
    /// the joined frame, not the localities.
    pub(super) store: bool,
    /// Its hello asked for its node's localities only: it gets the node
    /// localities frame, not every rank's.
    pub(super) node: bool,
    /// How often each card was served on this connection (only the cards
    /// it asked for: O(requests), not O(job)).
    pub(super) served: HashMap<u32, u8>,
    /// Bytes read that do not make a whole frame yet.
    inbuf: Vec<u8>,
    /// Frames (shared: the all-cards frame is one buffer for every PE) and
    /// how much of the first is sent.
    out: VecDeque<Rc<[u8]>>,
    out_off: usize,
    /// When output last made progress, while some is pending.
    pub(super) out_since: Option<Instant>,
}

/// How much one read takes at most.
pub(super) const READ_CHUNK: usize = 64 << 10;

impl Conn {
    /// A new connection, nonblocking, awaiting its hello until `deadline`.
    pub(super) fn new(
        stream: TcpStream,
        peer: SocketAddr,
        root_nonce: [u8; NONCE_LEN],
        deadline: Instant,
    ) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            peer,
            root_nonce,
            stream,
            rank: None,
            state: State::AwaitHello { deadline },
            lazy: false,
            store: false,
            node: false,
            served: HashMap::new(),
            inbuf: Vec::new(),
            out: VecDeque::new(),
            out_off: 0,
            out_since: None,
        })
    }

    /// Whether frames wait to be sent.
    pub(super) fn wants_write(&self) -> bool {
        !self.out.is_empty()
    }

    /// Queues `bytes` and sends what the socket takes now.
    pub(super) fn send(&mut self, bytes: Rc<[u8]>, now: Instant) -> io::Result<()> {
        if self.out.is_empty() {
            self.out_since = Some(now);
        }
        self.out.push_back(bytes);
        self.flush(now)
    }

    /// Sends queued bytes until the socket would block.
    pub(super) fn flush(&mut self, now: Instant) -> io::Result<()> {
        while let Some(front) = self.out.front() {
            let Some(rest) = front.get(self.out_off..) else {
                break;
            };
            match self.stream.write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_since = Some(now);
                    self.out_off += n;
                    if self.out_off >= front.len() {
                        self.out.pop_front();
                        self.out_off = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.out_since = None;
        Ok(())
    }

    /// Gives up on what is queued (its peer stopped reading).
    pub(super) fn abandon_output(&mut self) {
        self.out.clear();
        self.out_off = 0;
        self.out_since = None;
    }

    /// Sends what is queued and then `last`, blocking for at most `timeout`
    /// per write, then closes the sending side (the failing root's verdict).
    pub(super) fn send_last(&mut self, last: &Rc<[u8]>, timeout: Duration) {
        self.out.push_back(Rc::clone(last));
        let blocking = self
            .stream
            .set_nonblocking(false)
            .and_then(|()| self.stream.set_write_timeout(Some(timeout)));
        if blocking.is_ok() {
            while let Some(front) = self.out.pop_front() {
                let rest = front.get(self.out_off..).unwrap_or_default();
                self.out_off = 0;
                if self.stream.write_all(rest).is_err() {
                    break;
                }
            }
        }
        self.out.clear();
        self.out_since = None;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let _ = self.stream.set_nonblocking(true);
    }

    /// One read (the socket said it is readable), then every whole frame
    /// in what was read, or the end. Before the hello at most
    /// [`MAX_HELLO_FRAME_LEN`] bytes are read: the bound on what an
    /// unauthenticated peer can make the root hold.
    pub(super) fn read(&mut self, scratch: &mut [u8], inputs: &mut Vec<Input>) {
        let room = match self.state {
            State::AwaitHello { .. } => MAX_HELLO_FRAME_LEN.saturating_sub(self.inbuf.len()),
            _ => scratch.len(),
        };
        let Some(buf) = scratch.get_mut(..room.min(READ_CHUNK)) else {
            return;
        };
        if buf.is_empty() {
            return;
        }
        match self.stream.read(buf) {
            Ok(0) => inputs.push(Input::End(ReadError::Eof)),
            Ok(n) => {
                if self.state == State::Draining {
                    return;
                }
                self.inbuf
                    .extend_from_slice(buf.get(..n).unwrap_or_default());
                self.frames(inputs);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => inputs.push(Input::End(ReadError::Io(e))),
        }
    }

    /// The whole frames at the start of the input buffer. The first frame is
    /// capped at the hello's size, later ones at [`MAX_FRAME_LEN`].
    fn frames(&mut self, inputs: &mut Vec<Input>) {
        let mut off = 0;
        let mut awaiting = matches!(self.state, State::AwaitHello { .. });
        while let Some(head) = self.inbuf.get(off..off + 4) {
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let cap = if awaiting {
                MAX_HELLO_FRAME_LEN - 4
            } else {
                MAX_FRAME_LEN
            };
            if len == 0 {
                inputs.push(Input::End(ReadError::Empty));
                break;
            }
            if len > cap {
                inputs.push(Input::End(ReadError::TooLong { len, cap }));
                break;
            }
            let Some(body) = self.inbuf.get(off + 4..off + 4 + len) else {
                break;
            };
            inputs.push(Input::Frame(body[0], body[1..].to_vec()));
            off += 4 + len;
            if awaiting {
                // What follows the hello is a frame of the admitted
                // connection (or ignored, once the coordinator refuses it).
                awaiting = false;
                self.state = State::Admitted;
            }
        }
        self.inbuf.drain(..off);
    }
}

/// Waits for the descriptors in `fds` (their `revents` filled) for at most
/// `timeout` (none: until one is ready).
pub(super) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<()> {
    let ms = timeout.map_or(-1, |t| {
        // Rounded up, so a wait never ends just before its deadline.
        libc::c_int::try_from(t.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
    });
    let n = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
    // SAFETY: `fds` is a valid, writable slice of `n` pollfd entries for the
    // whole call; poll(2) writes only their `revents`.
    #[allow(unsafe_code)]
    let r = unsafe { libc::poll(fds.as_mut_ptr(), n, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// The pollfd entry for `fd` waiting for `events`.
pub(super) fn pollfd(fd: &impl AsRawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }
}
