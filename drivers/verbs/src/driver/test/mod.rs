//! The driver's tests: here the helpers (a connected pair on the fake HCA,
//! the receipts handshake by hand, blocking quiet, get and fetch-add) and
//! the unit tests; on the fake HCA, by theme: the data path
//! ([`data_path`]), failures, failover and rebuilds ([`failover`]), the
//! receipts of puts in doubt ([`receipts`]), and the backlog report
//! ([`load`]).

mod data_path;
mod failover;
mod lazy;
mod load;
mod receipts;
mod sets;

use switchyard_core::{
    route::ContextId,
    transport::{AtomicWidth, ErrorKind, PollResult, TransportError},
    wire::AtomicKind,
};

use super::*;
use crate::{Withheld, fake::Fabric, params::Template, probe, sys::POLL_BATCH};

const CTX: ContextId = ContextId { pe: 0, seq: 1 };

#[test]
fn wr_ids_round_trip() {
    for (peer, qp, inc, idx) in [
        (0u32, 0u8, 0u8, 0u64),
        (MAX_PES - 1, 8, 255, 0xFFFF_FFFF),
        (12345, 3, 7, 1 << 40 | 99),
    ] {
        let id = wr_id(peer, qp, inc, idx);
        assert_eq!(split_wr_id(id), (peer, qp, inc, idx as u32));
    }
}

/// Without a device (as on the machine this was written on), creating
/// a driver fails with the probe's reason, and nothing panics.
#[test]
fn new_without_a_device_says_why() {
    let p = probe::probe();
    if p.unavailable.is_none() {
        return; // a device is present: the conformance suite covers it
    }
    match VerbsDriver::with_owned_heap(VerbsConfig::default(), 0, 2, 1, 4096) {
        Err(VerbsError::Unavailable { reason }) => {
            assert_eq!(reason, p.unavailable.unwrap().to_string());
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a driver without a device"),
    }
    assert!(matches!(
        VerbsDriver::with_owned_heap(VerbsConfig::default(), 2, 2, 1, 4096),
        Err(VerbsError::InvalidPe { peer: 2, n_pes: 2 })
    ));
}

#[test]
fn the_qpn_table_finds_every_data_qp() {
    use crate::recv::{qpn_lookup, qpn_table};
    let entries: Vec<(u32, u32)> = (0..300u32)
        .map(|i| ((i * 7919 + 0x11) & 0xFF_FFFF, i << 8 | (i % 8 + 1)))
        .collect();
    let t = qpn_table(&entries, entries.len());
    assert!(t.len() >= 2 * entries.len());
    for &(qpn, tag) in &entries {
        assert_eq!(qpn_lookup(&t, qpn), Some(tag));
    }
    assert_eq!(qpn_lookup(&t, 0), None);
    assert_eq!(qpn_lookup(&t, 0xFF_FFFF), None);
}

/// PE 0 and PE 1 on a fake fabric, connected.
fn pair(cfg: VerbsConfig, heap: u64) -> (VerbsDriver, VerbsDriver, Fabric) {
    let f = Fabric::new();
    let mut a = VerbsDriver::fake_with_owned_heap(cfg.clone(), 0, 2, 7, heap, &f).unwrap();
    let mut b = VerbsDriver::fake_with_owned_heap(cfg, 1, 2, 7, heap, &f).unwrap();
    a.set_peer_card(1, b.card_for(0).unwrap()).unwrap();
    b.set_peer_card(0, a.card_for(1).unwrap()).unwrap();
    b.connect(0).unwrap();
    a.connect(1).unwrap();
    assert_eq!(
        a.poll_event(),
        Some(Event::Link {
            peer: 1,
            state: LinkState::Up
        })
    );
    (a, b, f)
}

/// The shim's receipts handshake, by hand: `b` (PE `b_pe`) hears that
/// the link from `a` (PE `a_pe`) failed and collects its receipts; `a`
/// settles its in-doubt puts with them. Returns the puts known landed.
fn handshake(a: &mut VerbsDriver, b: &mut VerbsDriver, a_pe: u32, b_pe: u32) -> u64 {
    b.peer_failed(a_pe).unwrap();
    for _ in 0..1000 {
        b.progress(Instant::default());
        if let Some((generation, r)) = b.receipts(a_pe) {
            return a.settle_receipts(b_pe, generation, r.as_slice()).unwrap();
        }
    }
    panic!("no receipts");
}

fn quiet(a: &mut VerbsDriver) -> Result<()> {
    for _ in 0..10_000 {
        if a.quiet_poll()? {
            return Ok(());
        }
    }
    panic!("quiet did not complete");
}

fn get(a: &mut VerbsDriver, pe: u32, off: u64, len: u32) -> Result<Vec<u8>> {
    let t = a.get_start(pe, off, len, CTX)?;
    let mut v = vec![0; len as usize];
    for _ in 0..10_000 {
        if a.get_poll(&t, &mut v)? {
            return Ok(v);
        }
    }
    panic!("get did not complete");
}

fn fadd(a: &mut VerbsDriver, off: u64, n: u64) -> Result<u64> {
    let op = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: n,
        compare: 0,
        fetch: true,
    };
    let t = a.atomic_start(1, off, op, CTX)?;
    for _ in 0..10_000 {
        if let Some(v) = a.atomic_poll(&t)? {
            return Ok(v);
        }
    }
    panic!("atomic did not complete");
}

fn ms(m: u64) -> Instant {
    Instant::from_nanos(m * 1_000_000)
}

fn events(d: &mut VerbsDriver) -> Vec<Event> {
    std::iter::from_fn(|| d.poll_event()).collect()
}

impl Replay<'_> {
    fn to_owned_kind(self) -> &'static str {
        match self {
            Replay::Put { .. } | Replay::PutFromHeap { .. } => "put",
            Replay::GetIntoHeap { .. } => "get",
            Replay::Atomic { .. } => "atomic",
        }
    }
}
