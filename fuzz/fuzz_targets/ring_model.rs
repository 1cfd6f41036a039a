//! The SPSC ring against a `VecDeque` model: an arbitrary sequence of pushes,
//! slice pushes, pops, slice pops, peeks and slot queries on a split
//! `Ring<u32, 8>` in one thread must give the model's answer at every step.
#![no_main]

use std::collections::VecDeque;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use switchyard_core::ring::{PopError, PushError, Ring};

const CAP: usize = 8;

#[derive(Debug, Arbitrary)]
enum Step {
    Push(u32),
    PushSlice(Vec<u32>),
    Pop,
    PopSlice(u8),
    Peek,
    Slots,
}

fuzz_target!(|steps: Vec<Step>| {
    let mut ring = Ring::<u32, CAP>::new();
    let mut model = VecDeque::with_capacity(CAP);
    {
        let (mut p, mut c) = ring.split();
        for step in steps {
            match step {
                Step::Push(v) => {
                    let got = p.push(v);
                    if model.len() < CAP {
                        assert_eq!(got, Ok(()));
                        model.push_back(v);
                    } else {
                        assert_eq!(got, Err(PushError::Full(v)));
                    }
                }
                Step::PushSlice(vs) => {
                    let vs = &vs[..vs.len().min(4 * CAP)];
                    let want = vs.len().min(CAP - model.len());
                    assert_eq!(p.push_slice(vs), want);
                    model.extend(&vs[..want]);
                }
                Step::Pop => match model.pop_front() {
                    Some(v) => assert_eq!(c.pop(), Ok(v)),
                    None => assert_eq!(c.pop(), Err(PopError::Empty)),
                },
                Step::PopSlice(k) => {
                    let mut buf = vec![u32::MAX; usize::from(k) % (2 * CAP + 1)];
                    let n = c.pop_slice(&mut buf);
                    assert_eq!(n, buf.len().min(model.len()));
                    let want: Vec<u32> = model.drain(..n).collect();
                    assert_eq!(&buf[..n], &want[..]);
                    assert!(buf[n..].iter().all(|&x| x == u32::MAX), "wrote past n");
                }
                Step::Peek => assert_eq!(c.peek(), model.front().copied()),
                Step::Slots => {
                    assert_eq!(p.slots(), CAP - model.len());
                    assert_eq!(c.slots(), model.len());
                }
            }
        }
    }
    assert_eq!(ring.len(), model.len());
    assert_eq!(ring.is_empty(), model.is_empty());
});
