//! `switchyard perf broadcast-bw`: the publisher's cost per message of a
//! [`Broadcast`] stream to `--subscribers` PEs (1 to N), beside one SPSC
//! channel's send in the same launch.
//!
//! One launch of `1 + subscribers` PEs measures, for each size, in turn:
//!
//! * `channel-bw`: PE 0 to PE 1 over an [`Spsc`]
//!   channel, exactly as `perf channel-bw` does (its row's baseline is the
//!   raw ring, run by the driver right before and right after);
//! * `broadcast-bw`: PE 0 publishes `iters` stamped messages, one `send` at a
//!   time, to PEs 1 to N under [`SlowSubscriber::Backpressure`]; each
//!   subscriber receives them with `recv_into` (checking every stamp: all of
//!   them, in order) and, after the last, sends one message back over an SPSC
//!   channel of its own; PE 0's clock runs from the first send to the last
//!   answer (messages per second the publisher sustains);
//! * `broadcast-bw-drop`: the same under [`SlowSubscriber::Drop`] (the
//!   publisher never waits; a subscriber checks that the stamps it gets
//!   rise, and at the end that what it received and lost make what was
//!   sent).
//!
//! The broadcast rows' baseline is that `channel-bw`: their ratio is the
//! publisher's rate over one SPSC producer's, the inverse of the cost of a
//! broadcast send in SPSC sends.

use switchyard::{
    channel::{Broadcast, Consumer, Producer, SlowSubscriber, Spsc},
    context::Context,
};

use super::{Measurement, Which, stamp_of, stamped};

/// One size of the test on this PE: PE 0's measurements (`channel-bw`, then
/// the two broadcast rows).
pub(super) fn measure<const N: usize>(
    ctx: &mut Context,
    subscribers: u32,
    iters: u64,
    warmup: u64,
) -> Result<Vec<Measurement>, String> {
    let mut ms = Vec::new();
    ms.extend(super::measure::<N>(ctx, Which::Bw, iters, warmup)?);
    for policy in [SlowSubscriber::Backpressure, SlowSubscriber::Drop] {
        ms.extend(stream::<N>(ctx, subscribers, policy, iters, warmup)?);
    }
    Ok(ms)
}

/// This PE's part of one broadcast stream, and its answer channels.
enum End<const N: usize> {
    /// PE 0: the stream, and one answer per subscriber.
    Publisher(switchyard::channel::Publisher<[u8; N]>, Vec<Consumer<u64>>),
    /// A subscriber: the stream, and its answer channel to PE 0.
    Subscriber(switchyard::channel::Subscriber<[u8; N]>, Producer<u64>),
    /// Neither.
    None,
}

/// Makes the stream to PEs 1 to `subscribers` and an answer channel from
/// each of them to PE 0 (collective).
fn ends<const N: usize>(
    ctx: &mut Context,
    subscribers: u32,
    policy: SlowSubscriber,
) -> Result<End<N>, String> {
    let e = |e: switchyard::context::Error| e.to_string();
    let stream = ctx
        .broadcast::<[u8; N], _>(0, 1..=subscribers, super::CAPACITY, policy)
        .map_err(e)?;
    let mut backs = Vec::new();
    let mut mine = None;
    for k in 1..=subscribers {
        match ctx.spsc::<u64>(k, 0, 2).map_err(e)? {
            Spsc::Consumer(rx) => backs.push(rx),
            Spsc::Producer(tx) => mine = Some(tx),
            Spsc::Bystander => {}
        }
    }
    Ok(match (stream, mine) {
        (Broadcast::Publisher(p), _) => End::Publisher(p, backs),
        (Broadcast::Subscriber(s), Some(tx)) => End::Subscriber(s, tx),
        _ => End::None,
    })
}

/// One broadcast stream under `policy` (module doc): PE 0's measurement.
fn stream<const N: usize>(
    ctx: &mut Context,
    subscribers: u32,
    policy: SlowSubscriber,
    iters: u64,
    warmup: u64,
) -> Result<Option<Measurement>, String> {
    let e = |e: switchyard::context::Error| e.to_string();
    let drop = policy == SlowSubscriber::Drop;
    let name = if drop {
        "broadcast-bw-drop"
    } else {
        "broadcast-bw"
    };
    let total = warmup + iters;
    let mut m = None;
    match ends::<N>(ctx, subscribers, policy)? {
        End::Publisher(mut tx, mut backs) => {
            let mut phase = |from: u64, n: u64| -> Result<(), String> {
                for i in from..from + n {
                    tx.send(ctx, stamped::<N>(i)).map_err(e)?;
                }
                backs
                    .iter_mut()
                    .try_for_each(|b| b.recv(ctx).map(drop_value))
                    .map_err(e)
            };
            phase(0, warmup)?;
            let t0 = std::time::Instant::now();
            phase(warmup, iters)?;
            let secs = t0.elapsed().as_secs_f64();
            m = Some(Measurement::throughput(name, N as u64, iters, secs));
        }
        End::Subscriber(mut rx, mut back) => {
            let mut buf = [[0u8; N]; 64];
            let mut next = 0u64;
            for end in [warmup, total] {
                while next < end {
                    let k = rx.recv_into(ctx, &mut buf).map_err(e)?;
                    for got in &buf[..k] {
                        let s = stamp_of(got);
                        // In order; under `Drop` perhaps with gaps.
                        if s < next || (s > next && !drop) {
                            return Err(format!("{name}: message {next} arrived as {s}"));
                        }
                        next = s + 1;
                    }
                }
                back.send(ctx, next).map_err(e)?;
            }
            let st = rx.stats();
            if st.received + st.lost != total {
                return Err(format!(
                    "{name}: a subscriber received {} and lost {} of {total}",
                    st.received, st.lost
                ));
            }
        }
        End::None => {}
    }
    ctx.barrier_all().map_err(e)?;
    Ok(m)
}

/// Throws an answer's value away.
fn drop_value(_: u64) {}
