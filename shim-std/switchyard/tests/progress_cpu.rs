//! `progress_cpu` naming a CPU this process may not run on is a typed
//! configuration error at init, before anything is made (a one-PE job: no
//! launcher variables are needed).

use switchyard::{
    config::{Config, ConfigError, Key, Source},
    context::{Context, Error},
};

#[test]
fn a_progress_cpu_outside_the_allowed_set_fails_init_with_a_config_error() {
    let cpu = switchyard::config::ProgressCpu::MAX_CPU;
    if switchyard::cpus::allowed().contains(&cpu) {
        return;
    }
    let mut cfg = Config::default();
    let from = Source::Env("SWITCHYARD_PROGRESS_CPU");
    cfg.set(Key::ProgressCpu, &cpu.to_string(), from.clone())
        .unwrap();
    cfg.set(Key::HeapSize, "1M", Source::Default).unwrap();
    let e = Context::with_config(&cfg).unwrap_err();
    match e {
        Error::Config(ConfigError::ProgressCpu {
            cpu: c, from: f, ..
        }) => {
            assert_eq!((c, f), (cpu, from));
        }
        e => panic!("{e}"),
    }
}
