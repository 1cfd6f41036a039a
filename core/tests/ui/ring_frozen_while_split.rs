use switchyard_core::ring::Ring;

fn main() {
    let mut ring = Ring::<u32, 4>::new();
    let (mut p, _c) = ring.split();
    // The ring is frozen while its handles live.
    let _ = ring.len();
    p.push(1).unwrap();
}
