//! Frames on a TCP stream: [`read_frame`] with an optional deadline (the
//! length checked against a cap before anything is allocated, the body read
//! in bounded chunks) and [`write_frame`] with a timeout. What the frames say
//! is [`crate::frame`]'s.

use std::{
    fmt,
    io::{self, Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

pub(crate) enum ReadError {
    Io(io::Error),
    Timeout,
    Eof,
    TooLong { len: usize, cap: usize },
    Empty,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Timeout => f.write_str("timed out"),
            ReadError::Eof => f.write_str("connection closed"),
            ReadError::TooLong { len, cap } => {
                write!(f, "frame of {len} bytes announced, at most {cap} allowed")
            }
            ReadError::Empty => f.write_str("frame of length 0"),
        }
    }
}

/// Fills `buf`, with every read bounded by `deadline` when there is one.
pub(crate) fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<(), ReadError> {
    let mut off = 0;
    while off < buf.len() {
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Err(ReadError::Timeout);
            }
            stream
                .set_read_timeout(Some((d - now).max(Duration::from_millis(1))))
                .map_err(ReadError::Io)?;
        }
        let Some(rest) = buf.get_mut(off..) else {
            break;
        };
        match stream.read(rest) {
            Ok(0) => return Err(ReadError::Eof),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if deadline.is_some()
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(())
}

/// Reads one frame: its kind and payload. The length is checked against
/// `cap` before anything is allocated, and the body is read in chunks.
pub(crate) fn read_frame(
    stream: &mut TcpStream,
    deadline: Option<Instant>,
    cap: usize,
) -> Result<(u8, Vec<u8>), ReadError> {
    const CHUNK: usize = 64 << 10;
    let mut head = [0u8; 5];
    // The length first: refuse a long frame before its kind arrives.
    read_full(stream, &mut head[..4], deadline)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 {
        return Err(ReadError::Empty);
    }
    if len > cap {
        return Err(ReadError::TooLong { len, cap });
    }
    read_full(stream, &mut head[4..], deadline)?;
    let want = len - 1;
    let mut body = Vec::with_capacity(want.min(CHUNK));
    while body.len() < want {
        let start = body.len();
        let n = (want - start).min(CHUNK);
        body.resize(start + n, 0);
        read_full(stream, &mut body[start..], deadline)?;
    }
    Ok((head[4], body))
}

pub(crate) fn write_frame(
    stream: &mut TcpStream,
    bytes: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    stream.write_all(bytes)?;
    stream.flush()
}
