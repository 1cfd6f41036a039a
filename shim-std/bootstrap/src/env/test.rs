use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn info(vars: &[(&str, &str)]) -> Result<RankInfo, BootstrapError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    RankInfo::from_lookup(|k| map.get(k).cloned())
}

fn err(vars: &[(&str, &str)]) -> String {
    match info(vars) {
        Ok(i) => panic!("expected an error for {vars:?}, got {i:?}"),
        Err(e) => e.to_string(),
    }
}

const JOB: (&str, &str) = ("SWITCHYARD_JOB_ID", "00000000deadbeef");

#[test]
fn launcher_env() {
    let i = info(&[
        ("SWITCHYARD_RANK", "2"),
        ("SWITCHYARD_SIZE", "4"),
        ("SWITCHYARD_LOCAL_RANK", "0"),
        ("SWITCHYARD_LOCAL_SIZE", "2"),
        JOB,
        ("SWITCHYARD_ROOT", "127.0.0.1:4000"),
        ("SWITCHYARD_ROOT_HOST", "launcher"),
    ])
    .unwrap();
    assert_eq!(i.source, EnvSource::Launcher);
    assert_eq!((i.rank, i.size), (2, 4));
    assert_eq!((i.local_rank, i.local_size), (Some(0), Some(2)));
    assert_eq!(i.job_id, 0xdead_beef);
    assert_eq!(i.job_id_source, JobIdSource::Launcher);
    assert_eq!(i.job_id_hex(), "00000000deadbeef");
    assert_eq!(i.root.as_deref(), Some("127.0.0.1:4000"));
    assert_eq!(i.root_host, RootHost::Launcher);
    assert!(!i.hosts_root());
    assert_eq!(i.root_addr().unwrap(), "127.0.0.1:4000".parse().unwrap());
}

#[test]
fn open_mpi_env() {
    let i = info(&[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ("OMPI_MCA_ess_base_jobid", "1234"),
        ("SLURM_JOB_ID", "99"),
    ])
    .unwrap();
    assert_eq!(i.source, EnvSource::OpenMpi);
    assert_eq!(
        (i.rank, i.size, i.local_rank, i.local_size),
        (5, 8, Some(1), Some(4))
    );
    // Open MPI's own job id wins over the allocation's under mpirun.
    assert_eq!(i.job_id_source, JobIdSource::OpenMpi);
    assert_eq!(i.job_id, fnv1a(&[b"ompi", b"1234"]));
    assert_eq!(i.root_host, RootHost::Rank0);
}

#[test]
fn slurm_env() {
    let i = info(&[
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NTASKS_PER_NODE", "2"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_STEP_ID", "0"),
        ("OMPI_MCA_ess_base_jobid", "7"),
        ("SWITCHYARD_ROOT", "node01:5000"),
    ])
    .unwrap();
    assert_eq!(i.source, EnvSource::Slurm);
    assert_eq!(
        (i.rank, i.size, i.local_rank, i.local_size),
        (3, 4, Some(1), Some(2))
    );
    assert_eq!(i.job_id_source, JobIdSource::Slurm);
    assert_eq!(i.job_id, fnv1a(&[b"slurm", b"4242", b"0"]));
    // Another step of the same job is another bootstrap job.
    let other = info(&[
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_STEP_ID", "1"),
    ])
    .unwrap();
    assert_ne!(other.job_id, i.job_id);
    assert_eq!((other.local_rank, other.local_size), (None, None));
    // Best effort: the local id alone.
    let lone = info(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_LOCALID", "0"),
    ])
    .unwrap();
    assert_eq!((lone.local_rank, lone.local_size), (Some(0), None));
}

#[test]
fn pmi_env_and_root_job_id() {
    let i = info(&[
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
        ("SWITCHYARD_ROOT", "[::1]:7000"),
    ])
    .unwrap();
    assert_eq!(i.source, EnvSource::Pmi);
    assert_eq!((i.rank, i.size, i.local_rank), (1, 2, None));
    assert_eq!(i.job_id_source, JobIdSource::Root);
    assert_eq!(i.job_id, fnv1a(&[b"root", b"[::1]:7000"]));
    assert_eq!(i.root_addr().unwrap(), "[::1]:7000".parse().unwrap());
}

#[test]
fn singleton_env() {
    let i = info(&[("SLURM_NTASKS", "4")]).unwrap();
    assert_eq!(i.source, EnvSource::Singleton);
    assert_eq!((i.rank, i.size), (0, 1));
    assert_eq!(i.job_id_source, JobIdSource::Process);
    assert!(i.hosts_root());
    assert!(matches!(i.root_addr(), Err(BootstrapError::NoRoot)));
}

#[test]
fn priority_and_whole_sources() {
    let all = [
        ("SWITCHYARD_RANK", "0"),
        ("SWITCHYARD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "3"),
        ("SLURM_PROCID", "2"),
        ("SLURM_NTASKS", "4"),
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "5"),
        JOB,
    ];
    let sizes = [
        (EnvSource::Launcher, 2),
        (EnvSource::OpenMpi, 3),
        (EnvSource::Slurm, 4),
        (EnvSource::Pmi, 5),
    ];
    for skip in 0..4 {
        let i = info(&all[skip * 2..]).unwrap();
        assert_eq!((i.source, i.size), sizes[skip]);
    }
    // Garbage in a lower-priority source is never read.
    let i = info(&[
        ("SWITCHYARD_RANK", "0"),
        ("SWITCHYARD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "x"),
        ("SLURM_PROCID", "-1"),
        JOB,
    ])
    .unwrap();
    assert_eq!(i.source, EnvSource::Launcher);
}

#[test]
fn bad_values_name_the_variable() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("SWITCHYARD_RANK", "7"), ("SWITCHYARD_SIZE", "4"), JOB],
            "SWITCHYARD_RANK=7 is not below SWITCHYARD_SIZE=4",
        ),
        (
            &[("SWITCHYARD_RANK", "x1"), ("SWITCHYARD_SIZE", "4"), JOB],
            "SWITCHYARD_RANK=\"x1\" is not a decimal integer below 2^32",
        ),
        (
            &[
                ("SWITCHYARD_RANK", "0"),
                ("SWITCHYARD_SIZE", "4294967296"),
                JOB,
            ],
            "SWITCHYARD_SIZE=\"4294967296\" is not a decimal integer below 2^32",
        ),
        (
            &[("SWITCHYARD_RANK", "0"), ("SWITCHYARD_SIZE", " 4"), JOB],
            "SWITCHYARD_SIZE=\" 4\" is not a decimal integer below 2^32",
        ),
        (
            &[("SWITCHYARD_RANK", "0"), ("SWITCHYARD_SIZE", ""), JOB],
            "SWITCHYARD_SIZE=\"\" is not a decimal integer below 2^32",
        ),
        (
            &[("SWITCHYARD_RANK", "0"), ("SWITCHYARD_SIZE", "0"), JOB],
            "SWITCHYARD_SIZE=0: expected a size of at least 1",
        ),
        (
            &[("SWITCHYARD_RANK", "3")],
            "SWITCHYARD_RANK=\"3\" is set but SWITCHYARD_SIZE is not (expected both or neither)",
        ),
        (
            &[("SWITCHYARD_SIZE", "3")],
            "SWITCHYARD_SIZE=\"3\" is set but SWITCHYARD_RANK is not (expected both or neither)",
        ),
        (
            &[
                ("SWITCHYARD_RANK", "0"),
                ("SWITCHYARD_SIZE", "4"),
                ("SWITCHYARD_LOCAL_RANK", "0"),
                JOB,
            ],
            "SWITCHYARD_LOCAL_RANK=\"0\" is set but SWITCHYARD_LOCAL_SIZE is not (expected both or neither)",
        ),
        (
            &[
                ("SWITCHYARD_RANK", "0"),
                ("SWITCHYARD_SIZE", "4"),
                ("SWITCHYARD_LOCAL_RANK", "2"),
                ("SWITCHYARD_LOCAL_SIZE", "2"),
                JOB,
            ],
            "SWITCHYARD_LOCAL_RANK=2 is not below SWITCHYARD_LOCAL_SIZE=2",
        ),
        (
            &[
                ("SWITCHYARD_RANK", "0"),
                ("SWITCHYARD_SIZE", "4"),
                ("SWITCHYARD_LOCAL_RANK", "0"),
                ("SWITCHYARD_LOCAL_SIZE", "8"),
                JOB,
            ],
            "SWITCHYARD_LOCAL_SIZE=8 is above SWITCHYARD_SIZE=4",
        ),
        (
            &[
                ("OMPI_COMM_WORLD_RANK", "4"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                JOB,
            ],
            "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4",
        ),
        (
            &[("OMPI_COMM_WORLD_RANK", "1")],
            "OMPI_COMM_WORLD_RANK=\"1\" is set but OMPI_COMM_WORLD_SIZE is not (expected both or neither)",
        ),
        (
            &[("SLURM_PROCID", "0")],
            "SLURM_PROCID=\"0\" is set but SLURM_NTASKS is not (expected both or neither)",
        ),
        (
            &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "0")],
            "SLURM_NTASKS=0: expected a size of at least 1",
        ),
        (
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_LOCALID", "a"),
                JOB,
            ],
            "SLURM_LOCALID=\"a\" is not a decimal integer below 2^32",
        ),
        (
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_LOCALID", "3"),
                ("SLURM_NTASKS_PER_NODE", "2"),
                JOB,
            ],
            "SLURM_LOCALID=3 is not below SLURM_NTASKS_PER_NODE=2",
        ),
        (
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_NTASKS_PER_NODE", "8"),
                JOB,
            ],
            "SLURM_NTASKS_PER_NODE=8 is above SLURM_NTASKS=4",
        ),
        (
            &[("PMI_RANK", "9"), ("PMI_SIZE", "2"), JOB],
            "PMI_RANK=9 is not below PMI_SIZE=2",
        ),
        (
            &[("PMI_SIZE", "2")],
            "PMI_SIZE=\"2\" is set but PMI_RANK is not (expected both or neither)",
        ),
        (
            &[("SWITCHYARD_JOB_ID", "xyz")],
            "SWITCHYARD_JOB_ID=\"xyz\" is not 16 hex digits",
        ),
        (
            &[("SWITCHYARD_JOB_ID", "+00000000000000f")],
            "SWITCHYARD_JOB_ID=\"+00000000000000f\" is not 16 hex digits",
        ),
        (
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", ""),
            ],
            "SLURM_JOB_ID=\"\" is not a non-empty job id",
        ),
        (
            &[("SWITCHYARD_ROOT", "nohost")],
            "SWITCHYARD_ROOT=\"nohost\" is not host:port (port 1-65535, an IPv6 address in brackets)",
        ),
        (
            &[("SWITCHYARD_ROOT", "::1:80")],
            "SWITCHYARD_ROOT=\"::1:80\" is not host:port (port 1-65535, an IPv6 address in brackets)",
        ),
        (
            &[("SWITCHYARD_ROOT", "h:0")],
            "SWITCHYARD_ROOT=\"h:0\" is not host:port (port 1-65535, an IPv6 address in brackets)",
        ),
        (
            &[("SWITCHYARD_ROOT", "h:65536")],
            "SWITCHYARD_ROOT=\"h:65536\" is not host:port (port 1-65535, an IPv6 address in brackets)",
        ),
        (
            &[("SWITCHYARD_ROOT_HOST", "rank1")],
            "SWITCHYARD_ROOT_HOST=\"rank1\" is not `launcher` or `rank0`",
        ),
    ];
    for (vars, want) in cases {
        assert_eq!(err(vars), *want, "for {vars:?}");
    }
    assert!(
        err(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]).starts_with("no job id for a job of 2 PEs"),
    );
}

#[cfg(unix)]
#[test]
fn non_utf8_value_is_an_error() {
    use std::os::unix::ffi::OsStringExt;
    let e = RankInfo::from_os_lookup(
        |k| (k == "SWITCHYARD_RANK").then(|| OsString::from_vec(vec![b'1', 0xff])),
        false,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "SWITCHYARD_RANK=\"1\u{fffd}\" is not valid UTF-8"
    );
}

#[test]
fn node_id() {
    assert_eq!(node_id_from("a", "b"), node_id_from("a\n", "b\n"));
    assert_ne!(node_id_from("ab", ""), node_id_from("a", "b"));
    let here = node_id_here().unwrap();
    assert_eq!(here, node_id_here().unwrap());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]


        #[test]
        fn env_never_panics(
            values in proptest::collection::vec(proptest::option::of("[0-9a-fx: \\[\\]]{0,20}"), 20),
        ) {
            let names = [
                vars::RANK, vars::SIZE, vars::LOCAL_RANK, vars::LOCAL_SIZE, vars::JOB_ID,
                vars::ROOT, vars::ROOT_HOST, vars::OMPI_RANK, vars::OMPI_SIZE,
                vars::OMPI_LOCAL_RANK, vars::OMPI_LOCAL_SIZE, vars::OMPI_JOB_ID,
                vars::SLURM_RANK, vars::SLURM_SIZE, vars::SLURM_LOCAL_RANK,
                vars::SLURM_LOCAL_SIZE, vars::SLURM_JOB_ID, vars::SLURM_STEP_ID,
                vars::PMI_RANK, vars::PMI_SIZE,
            ];
            let lookup = |k: &str| names.iter().position(|n| *n == k).and_then(|i| values[i].clone());
            if let Ok(i) = RankInfo::from_lookup(lookup) {
                prop_assert!(i.rank < i.size);
                if let (Some(r), Some(s)) = (i.local_rank, i.local_size) {
                    prop_assert!(r < s && s <= i.size);
                }
            }
        }
}

fn os_lookup(env: &'static [(&'static str, &'static str)]) -> impl FnMut(&str) -> Option<OsString> {
    move |k| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| OsString::from(v))
    }
}

/// Under mpirun: Open MPI's variables and PMIx's.
const MPIRUN: [(&str, &str); 5] = [
    ("OMPI_COMM_WORLD_RANK", "1"),
    ("OMPI_COMM_WORLD_SIZE", "2"),
    ("OMPI_MCA_ess_base_jobid", "1084096513"),
    ("PMIX_RANK", "1"),
    ("PMIX_NAMESPACE", "1084096513"),
];

#[test]
fn pmix_is_not_asked_when_turned_off_or_under_the_launcher() {
    const OFF: [(&str, &str); 6] = [
        MPIRUN[0],
        MPIRUN[1],
        MPIRUN[2],
        MPIRUN[3],
        MPIRUN[4],
        ("SWITCHYARD_PMIX", "off"),
    ];
    let info = RankInfo::from_os_lookup(os_lookup(&OFF), true).expect("off");
    assert_eq!(
        (info.source, info.rank, info.size),
        (EnvSource::OpenMpi, 1, 2)
    );
    const LAUNCHER: [(&str, &str); 4] = [
        ("SWITCHYARD_RANK", "0"),
        ("SWITCHYARD_SIZE", "3"),
        ("SWITCHYARD_JOB_ID", "00000000000000aa"),
        MPIRUN[3],
    ];
    let info = RankInfo::from_os_lookup(os_lookup(&LAUNCHER), true).expect("launcher");
    assert_eq!((info.source, info.size), (EnvSource::Launcher, 3));
    // `from_lookup` never asks a PMIx server.
    let info = RankInfo::from_os_lookup(os_lookup(&MPIRUN), false).expect("env");
    assert_eq!(info.source, EnvSource::OpenMpi);
    const BAD: [(&str, &str); 1] = [("SWITCHYARD_PMIX", "yes")];
    let e = RankInfo::from_os_lookup(os_lookup(&BAD), true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SWITCHYARD_PMIX=\"yes\" is not `auto` or `off`"
    );
}

/// With the feature, PMIx's variables but no server to reach (this test
/// runs outside any PMIx job): a typed error naming `PMIx_Init` and the way
/// out, no panic, no hang. Without it: the environment, as before.
#[test]
fn pmix_variables_without_a_server() {
    if std::env::var_os("PMIX_NAMESPACE").is_some() {
        return; // Run under a real PMIx server: PMIx_Init would succeed.
    }
    let got = RankInfo::from_os_lookup(os_lookup(&MPIRUN), true);
    if cfg!(feature = "pmix") {
        let e = got.unwrap_err();
        assert!(
            matches!(&e, BootstrapError::Pmix { call, status, .. } if call == "PMIx_Init" && *status < 0),
            "{e:?}"
        );
        assert!(e.to_string().contains("SWITCHYARD_PMIX=off"), "{e}");
    } else {
        assert_eq!(got.expect("env").source, EnvSource::OpenMpi);
    }
}
