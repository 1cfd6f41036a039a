use switchyard_core::ring::Ring;

fn require_sync<T: Sync>(_: &T) {}

fn main() {
    let mut ring = Ring::<u32, 4>::new();
    let (p, _c) = ring.split();
    // A producer is one end of the ring: it may move to another thread, never be shared.
    require_sync(&p);
}
