//! A second `Context::from_env` in a process under a launcher (a job id
//! given, as `switchyard run` gives it) makes no second PE, whose
//! shared-memory object would already exist: it returns a context on the
//! PE the first call made. Runs itself again as a one-PE job with the
//! launcher's variables (so nothing here sets the environment of a running
//! test).

use std::process::Command;

use switchyard::context::Context;

/// Set in the child run.
const CHILD: &str = "SECOND_INIT_CHILD";

#[test]
fn a_second_from_env_is_a_context_on_the_same_pe() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let job = format!(
        "{:016x}",
        0x5EC0_0000_0000_0000u64 | u64::from(std::process::id())
    );
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "a_second_from_env_is_a_context_on_the_same_pe"])
        .env(CHILD, "1")
        .env("SWITCHYARD_JOB_ID", &job)
        .env("SWITCHYARD_RANK", "0")
        .env("SWITCHYARD_SIZE", "1")
        .env("SWITCHYARD_HEAP_SIZE", "1M")
        .output()
        .expect("the child run");
    assert!(
        out.status.success(),
        "child: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn child() {
    let mut first = Context::from_env().expect("the first init");
    let mut second = Context::from_env().expect("a second from_env: a context on the same PE");
    assert_eq!(
        (second.job_id(), second.my_pe(), second.n_pes()),
        (first.job_id(), first.my_pe(), first.n_pes())
    );
    // One heap: a handle of the first context is valid in the second, and
    // what the second (in another thread) writes, the first reads.
    let sym = first.alloc::<u64>(1).expect("alloc");
    std::thread::scope(|s| {
        s.spawn(|| {
            second.put(&sym, 0, &[7], 0).expect("a put from the second");
            second.quiet().expect("quiet");
        });
    });
    let mut v = [0u64];
    first.read_local(&sym, 0, &mut v).expect("read");
    assert_eq!(v, [7]);
    drop(second);
    first.finalize().expect("finalize");
}
