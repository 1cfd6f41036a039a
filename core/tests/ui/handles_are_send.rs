use switchyard_core::ring::Ring;

fn require_send<T: Send>(_: T) {}

fn main() {
    let ring: &'static mut Ring<u64, 8> = Box::leak(Box::new(Ring::new()));
    let (p, c) = ring.split();
    require_send(p);
    require_send(c);
}
