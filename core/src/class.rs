//! Path classes, their wire encoding, transport ids and where classes come from.

use core::fmt;

/// Version of the path-class encoding carried in frames and bootstrap cards.
///
/// Version 1: [`PathClass::to_wire`] codes 0..=4 in declaration order, and the
/// 2-bit row code described at [`PathClass::row_code`]. A receiver that gets a
/// newer version refuses it with [`ClassDecodeError::UnsupportedVersion`]
/// instead of guessing.
pub const CLASS_ENCODING_VERSION: u8 = 1;

/// How a PE reaches a peer. Ordered from best to worst.
///
/// `Routed` and `Unreachable` are distinct on purpose: a routed peer is
/// reachable over TCP through a router, an unreachable one has no usable link
/// and [`select`](crate::route::Selector::select) fails at once for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum PathClass {
    /// The same PE.
    Local = 0,
    /// Another PE on the same node: shared memory.
    Shm = 1,
    /// Another node behind the same switch: RDMA's home ground.
    Near = 2,
    /// Another node behind another switch, reached through a router.
    Routed = 3,
    /// No usable link.
    Unreachable = 4,
}

impl PathClass {
    /// All classes, best first.
    pub const ALL: [PathClass; 5] = [
        PathClass::Local,
        PathClass::Shm,
        PathClass::Near,
        PathClass::Routed,
        PathClass::Unreachable,
    ];

    /// The class as a byte on the wire (encoding version [`CLASS_ENCODING_VERSION`]).
    #[inline]
    pub const fn to_wire(self) -> u8 {
        self as u8
    }

    /// Decodes a class byte received with encoding `version`.
    ///
    /// # Errors
    /// [`ClassDecodeError::UnsupportedVersion`] for a version this build does not
    /// know, [`ClassDecodeError::UnknownClass`] for a byte outside 0..=4.
    pub const fn from_wire(byte: u8, version: u8) -> Result<PathClass, ClassDecodeError> {
        if version != CLASS_ENCODING_VERSION {
            return Err(ClassDecodeError::UnsupportedVersion(version));
        }
        match byte {
            0 => Ok(PathClass::Local),
            1 => Ok(PathClass::Shm),
            2 => Ok(PathClass::Near),
            3 => Ok(PathClass::Routed),
            4 => Ok(PathClass::Unreachable),
            other => Err(ClassDecodeError::UnknownClass(other)),
        }
    }

    /// The 2-bit code stored per peer in a topology row.
    ///
    /// `Local` needs no code of its own: it is exactly the row owner's own index,
    /// so it is stored as `Shm` (0) and recognised by index on lookup. Codes:
    /// 0 `Shm`/`Local`, 1 `Near`, 2 `Routed`, 3 `Unreachable`.
    #[inline]
    pub const fn row_code(self) -> usize {
        match self {
            PathClass::Local | PathClass::Shm => 0,
            PathClass::Near => 1,
            PathClass::Routed => 2,
            PathClass::Unreachable => 3,
        }
    }

    /// Inverse of [`row_code`](Self::row_code) for a peer that is not the row owner.
    #[inline]
    pub const fn from_row_code(code: usize) -> PathClass {
        match code & 3 {
            0 => PathClass::Shm,
            1 => PathClass::Near,
            2 => PathClass::Routed,
            _ => PathClass::Unreachable,
        }
    }

    /// Short upper-case name, as printed by `switchyard topo`.
    pub const fn name(self) -> &'static str {
        match self {
            PathClass::Local => "LOCAL",
            PathClass::Shm => "SHM",
            PathClass::Near => "NEAR",
            PathClass::Routed => "ROUTED",
            PathClass::Unreachable => "UNREACHABLE",
        }
    }

    /// Index 0..5, for per-class tables.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A path-class byte that could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassDecodeError {
    /// The sender uses an encoding version this build does not know.
    UnsupportedVersion(u8),
    /// The byte is not a class of the known encoding.
    UnknownClass(u8),
}

impl fmt::Display for ClassDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnsupportedVersion(v) => write!(
                f,
                "path-class encoding version {v} is not supported (this build speaks {CLASS_ENCODING_VERSION})"
            ),
            Self::UnknownClass(b) => write!(f, "unknown path-class code {b}"),
        }
    }
}

impl core::error::Error for ClassDecodeError {}

/// Most transports one PE can route over (health bits per peer).
pub const MAX_TRANSPORTS: usize = 8;

/// A transport instance of this job, as an index `0..MAX_TRANSPORTS` into the
/// health bits. The core never names a driver: which id is shared memory, RDMA or
/// a TCP rail is said once, in [`TransportRoles`](crate::route::TransportRoles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransportId(pub(crate) u8);

impl TransportId {
    /// The id `index`, or `None` when `index >= MAX_TRANSPORTS`.
    pub const fn new(index: u8) -> Option<TransportId> {
        if (index as usize) < MAX_TRANSPORTS {
            Some(TransportId(index))
        } else {
            None
        }
    }

    /// The index `0..MAX_TRANSPORTS`.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for TransportId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// Switch id meaning "this node has no uplink": every other node is unreachable.
pub const NO_SWITCH: u32 = u32::MAX;

/// Where a PE runs: its node and its switch (leaf switch / L2 domain), learned at
/// bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Locality {
    /// Node (machine) id: PEs with equal node ids can share memory.
    pub node: u32,
    /// Switch id, or [`NO_SWITCH`].
    pub switch: u32,
}

/// Whether traffic between different switches can be routed at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterSwitch {
    /// A router joins the switches: cross-switch pairs are [`PathClass::Routed`].
    Routed,
    /// No router: cross-switch pairs are [`PathClass::Unreachable`].
    None,
}

/// The class of the ordered pair (`me`, `peer`) from their localities.
///
/// This is the whole rule; link-state overrides are applied on top of it.
#[inline]
pub const fn class_between(
    me: u32,
    my: Locality,
    peer: u32,
    their: Locality,
    inter: InterSwitch,
) -> PathClass {
    if me == peer {
        PathClass::Local
    } else if my.node == their.node {
        PathClass::Shm
    } else if my.switch == NO_SWITCH || their.switch == NO_SWITCH {
        PathClass::Unreachable
    } else if my.switch == their.switch {
        PathClass::Near
    } else {
        match inter {
            InterSwitch::Routed => PathClass::Routed,
            InterSwitch::None => PathClass::Unreachable,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn wire_roundtrip_and_errors() {
        for c in PathClass::ALL {
            assert_eq!(
                PathClass::from_wire(c.to_wire(), CLASS_ENCODING_VERSION),
                Ok(c)
            );
        }
        assert_eq!(
            PathClass::from_wire(5, CLASS_ENCODING_VERSION),
            Err(ClassDecodeError::UnknownClass(5))
        );
        assert_eq!(
            PathClass::from_wire(0, 2),
            Err(ClassDecodeError::UnsupportedVersion(2))
        );
    }

    #[test]
    fn row_codes_roundtrip_except_local() {
        for c in [
            PathClass::Shm,
            PathClass::Near,
            PathClass::Routed,
            PathClass::Unreachable,
        ] {
            assert_eq!(PathClass::from_row_code(c.row_code()), c);
        }
        assert_eq!(PathClass::Local.row_code(), PathClass::Shm.row_code());
    }

    #[test]
    fn classes_from_localities() {
        let a = Locality { node: 0, switch: 0 };
        let b = Locality { node: 1, switch: 0 };
        let c = Locality { node: 2, switch: 1 };
        let lone = Locality {
            node: 3,
            switch: NO_SWITCH,
        };
        let r = InterSwitch::Routed;
        assert_eq!(class_between(0, a, 0, a, r), PathClass::Local);
        assert_eq!(class_between(0, a, 1, a, r), PathClass::Shm);
        assert_eq!(class_between(0, a, 2, b, r), PathClass::Near);
        assert_eq!(class_between(0, a, 3, c, r), PathClass::Routed);
        assert_eq!(
            class_between(0, a, 3, c, InterSwitch::None),
            PathClass::Unreachable
        );
        assert_eq!(class_between(0, a, 4, lone, r), PathClass::Unreachable);
        assert_eq!(class_between(4, lone, 0, a, r), PathClass::Unreachable);
    }

    #[test]
    fn transport_id_bounds() {
        assert!(TransportId::new(7).is_some());
        assert!(TransportId::new(8).is_none());
    }
}
