//! An application that embeds switchyard: the library's `tracing` events
//! reach the subscriber the application installs (with their fields), and
//! without one the library writes nothing to stderr by itself. Each case
//! runs in a child process of its own (a global subscriber is set once per
//! process).

use std::{
    fmt::Write as _,
    process::Command,
    sync::{Arc, Mutex},
};

use switchyard::{
    config::{Config, Key, Source},
    context::Context,
};
use tracing::{
    Event, Metadata, Subscriber,
    field::{Field, Visit},
    span,
};

/// Set in a child run: which case it is.
const CHILD: &str = "EMBEDDING_CHILD";

/// A subscriber of the application's own: keeps every event as a line.
struct Collect(Arc<Mutex<Vec<String>>>);

/// An event's fields as ` name=value` text.
struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={v:?}", f.name());
    }
}

impl Subscriber for Collect {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut f = Fields(String::new());
        e.record(&mut f);
        let m = e.metadata();
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}:{}", m.level(), m.target(), f.0));
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// What the application does with the library: a one-PE context, a few
/// puts, and a route trace dump (an event the library reports).
fn work() {
    let mut cfg = Config::default();
    cfg.set(Key::HeapSize, "1M", Source::Default).unwrap();
    let mut ctx = Context::with_config(&cfg).expect("a one-PE context");
    let sym = ctx.alloc::<u64>(4).unwrap();
    let me = ctx.my_pe();
    for i in 0..100 {
        ctx.put(&sym, 0, &[i], me).unwrap();
    }
    let dump = ctx.trace_dumper().dump("embedding").expect("dumped");
    if let Some(dir) = dump.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    ctx.finalize().unwrap();
}

/// Runs this test binary again for `case`; returns its stderr.
fn child(test: &str, case: &str) -> String {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test, "--nocapture"])
        .env(CHILD, case)
        .env_remove("SWITCHYARD_LOG")
        .output()
        .expect("the child run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child {case}: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

#[test]
fn the_applications_subscriber_gets_the_librarys_events() {
    if std::env::var_os(CHILD).is_some() {
        let events = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::set_global_default(Collect(Arc::clone(&events)))
            .expect("the application's subscriber");
        work();
        let events = events.lock().unwrap();
        let dumped = events
            .iter()
            .find(|e| e.contains("route trace dumped"))
            .unwrap_or_else(|| panic!("no dump event in {events:?}"));
        assert!(dumped.starts_with("WARN switchyard"), "{dumped}");
        assert!(
            dumped.contains(" pe=0") && dumped.contains("reason=\"embedding\""),
            "{dumped}"
        );
        return;
    }
    let stderr = child(
        "the_applications_subscriber_gets_the_librarys_events",
        "sub",
    );
    assert!(!stderr.contains("route trace"), "printed: {stderr}");
}

#[test]
fn without_a_subscriber_the_library_prints_nothing() {
    if std::env::var_os(CHILD).is_some() {
        work();
        return;
    }
    let stderr = child("without_a_subscriber_the_library_prints_nothing", "none");
    assert!(stderr.is_empty(), "the library wrote to stderr: {stderr}");
}
