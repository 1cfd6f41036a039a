//! The OpenSHMEM C API end to end: builds `switchyard` and
//! `libswitchyard_shmem` (same profile as this test), compiles every
//! `tests/c/*.c` (and `*.cpp`, as C++ with `c++`) with `switchyard cc`, and
//! runs each under `switchyard run`
//! with 2 and 4 PEs. Every run is bounded (`--timeout`, op timeout).
//!
//! A program's expectations are comment lines in its source:
//!
//! * `// expect-status: N`: the job's exit status (default 0);
//! * `// expect-stderr: TEXT`: text the job must print on stderr;
//! * `// expect-stdout: TEXT`: text the job must print on stdout;
//! * `// expect-no-stderr: TEXT`: text the job must not print on stderr;
//! * `// env: NAME=VALUE`: set for the job;
//! * `// pes: 2 4`: the PE counts to run it with (default 2 and 4);
//! * `// tcp: yes`: also run it with 2 PEs over TCP only
//!   (`SWITCHYARD_TRANSPORTS=tcp`), so TCP target-side progress serves it.
//!
//! A program that exits with status 77 skips itself, with the reason it
//! prints on a line holding `SKIP` (none does today). Like every skip in
//! the tests ([`switchyard_tests::skip`]), that passes only on a machine
//! where skips are allowed: as root (CI), or with `CI` or
//! `SWITCHYARD_NO_SKIP` set, it is a failure naming the reason. So is a
//! missing C compiler or `pkg-config`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

use switchyard_tests::skip::{self, cargo_build, workspace};

/// Exit status of a program that skips itself (the automake convention).
const SKIP: i32 = 77;

struct Tree {
    /// `target/<profile>`: the `switchyard` binary and the library.
    bin: PathBuf,
    /// Where compiled test programs go.
    out: PathBuf,
}

fn repo() -> PathBuf {
    workspace()
}

/// Whether a C compiler is installed; without one the tests skip (a failure
/// where skips are not allowed, see [`skip`]).
fn have_cc() -> bool {
    let ok = Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip::skip("no C compiler (`cc`) on this machine");
    }
    ok
}

/// Builds the command and the library once, in this test's profile.
fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| {
        let bin = cargo_build(&["-p", "switchyard-cli", "-p", "switchyard-shmem"]);
        let out = bin.join("capi-tests");
        std::fs::create_dir_all(&out).expect("output dir");
        Tree { bin, out }
    })
}

fn switchyard() -> Command {
    let mut c = Command::new(tree().bin.join("switchyard"));
    c.env_remove("SWITCHYARD_SHMEM_INCLUDE")
        .env_remove("SWITCHYARD_SHMEM_LIB");
    c
}

/// `switchyard cc` with the tests' warning flags; returns the program. A
/// `.cpp` source is compiled as C++11 by `c++` (`SWITCHYARD_CC`).
fn compile(src: &Path) -> PathBuf {
    let name = src
        .file_stem()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let exe = tree().out.join(&name);
    let cpp = src.extension().is_some_and(|x| x == "cpp");
    let mut cmd = switchyard();
    if cpp {
        cmd.env("SWITCHYARD_CC", "c++");
    }
    let out = cmd
        .args([
            "cc",
            if cpp { "-std=c++11" } else { "-std=c11" },
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-O1",
            "-g",
        ])
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run switchyard cc");
    assert!(
        out.status.success(),
        "switchyard cc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn run(exe: &Path, n: u32, env: &[(&str, &str)]) -> Output {
    let mut c = switchyard();
    c.args(["run", "-n", &n.to_string(), "--timeout", "60", "--"])
        .arg(exe)
        .env("SWITCHYARD_HEAP_SIZE", "8M")
        .env("SWITCHYARD_OP_TIMEOUT", "20s")
        .env_remove("SHMEM_SYMMETRIC_SIZE")
        .env_remove("SHMEM_INFO")
        .env_remove("SHMEM_DEBUG")
        .env_remove("SWITCHYARD_TRANSPORTS");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run switchyard run")
}

/// The expectations written in a program's comments.
struct Expect {
    status: i32,
    stderr: Vec<String>,
    stdout: Vec<String>,
    not_stderr: Vec<String>,
    pes: Vec<u32>,
    env: Vec<(String, String)>,
    tcp: bool,
}

fn expectations(src: &Path) -> Expect {
    let text = std::fs::read_to_string(src).expect("read source");
    let mut e = Expect {
        status: 0,
        stderr: Vec::new(),
        stdout: Vec::new(),
        not_stderr: Vec::new(),
        pes: vec![2, 4],
        env: Vec::new(),
        tcp: false,
    };
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("// expect-status:") {
            e.status = v.trim().parse().expect("expect-status: a number");
        } else if let Some(v) = l.strip_prefix("// expect-stderr:") {
            e.stderr.push(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("// expect-stdout:") {
            e.stdout.push(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("// expect-no-stderr:") {
            e.not_stderr.push(v.trim().to_string());
        } else if l == "// tcp: yes" {
            e.tcp = true;
        } else if let Some(v) = l.strip_prefix("// pes:") {
            e.pes = v
                .split_whitespace()
                .map(|p| p.parse().expect("pes: numbers"))
                .collect();
        } else if let Some(v) = l.strip_prefix("// env:")
            && let Some((k, val)) = v.trim().split_once('=')
        {
            e.env.push((k.to_string(), val.to_string()));
        }
    }
    e
}

/// Every C and C++ program in `tests/c`, sorted.
fn programs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("tests/c"))
        .expect("tests/c")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "cpp"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_c_program_under_2_and_4_pes() {
    if !have_cc() {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for src in programs() {
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        let exe = compile(&src);
        let e = expectations(&src);
        let tcp = e.tcp.then_some((2, true));
        for (n, over_tcp) in e.pes.iter().map(|&n| (n, false)).chain(tcp) {
            let mut env: Vec<(&str, &str)> = e
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            if over_tcp {
                env.push(("SWITCHYARD_TRANSPORTS", "tcp"));
            }
            let how = if over_tcp { " over TCP" } else { "" };
            let out = run(&exe, n, &env);
            let code = out.status.code().unwrap_or(-1);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if code == SKIP {
                let why = stdout
                    .lines()
                    .chain(stderr.lines())
                    .find(|l| l.contains("SKIP"))
                    .unwrap_or("(no reason printed)");
                match skip::forbidden() {
                    None => println!("skipped {name} on {n} PEs{how}: {why}"),
                    Some(rule) => failures.push(format!(
                        "{name} on {n} PEs{how} skipped itself ({why}); a skip is a failure here: {rule}"
                    )),
                }
                continue;
            }
            ran += 1;
            let missing: Vec<&String> = e
                .stderr
                .iter()
                .filter(|s| !stderr.contains(s.as_str()))
                .chain(e.stdout.iter().filter(|s| !stdout.contains(s.as_str())))
                .collect();
            let unwanted: Vec<&String> = e
                .not_stderr
                .iter()
                .filter(|s| stderr.contains(s.as_str()))
                .collect();
            if code != e.status || !missing.is_empty() || !unwanted.is_empty() {
                failures.push(format!(
                    "{name} on {n} PEs{how}: status {code} (want {}), missing output: {missing:?}, \
                     unwanted stderr: {unwanted:?}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                    e.status
                ));
            } else {
                println!("ok {name} on {n} PEs{how}");
            }
        }
    }
    assert!(ran > 0, "no C program ran");
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn header_compiles_as_c99_and_cpp() {
    if !have_cc() {
        return;
    }
    let t = tree();
    let inc = repo().join("shim-std/capi/include");
    let c = t.out.join("hdr.c");
    std::fs::write(
        &c,
        "#include <shmem.h>\nint main(void) { return SHMEM_MAJOR_VERSION != 1; }\n",
    )
    .unwrap();
    let cpp = t.out.join("hdr.cpp");
    std::fs::write(
        &cpp,
        "#include <shmem.h>\nint main() { return SHMEM_MINOR_VERSION != 5; }\n",
    )
    .unwrap();
    for (cc, std, src) in [("cc", "-std=c99", &c), ("c++", "-std=c++11", &cpp)] {
        let out = Command::new(cc)
            .args([
                std,
                "-Wall",
                "-Wextra",
                "-pedantic",
                "-Werror",
                "-fsyntax-only",
                "-I",
            ])
            .arg(&inc)
            .arg(src)
            .output()
            .expect("run the compiler");
        assert!(
            out.status.success(),
            "{cc} {std} shmem.h:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_cpp_program_links_and_runs() {
    if !have_cc() {
        return;
    }
    let t = tree();
    let src = t.out.join("cpp_ring.cpp");
    std::fs::write(
        &src,
        r#"#include <shmem.h>
#include <cstdio>
int main() {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *x = static_cast<long *>(shmem_malloc(sizeof(long)));
    shmem_long_p(x, me, (me + 1) % n);
    shmem_barrier_all();
    int bad = *x != (me + n - 1) % n;
    shmem_free(x);
    shmem_finalize();
    if (bad) std::fprintf(stderr, "PE %d: wrong value\n", me);
    return bad;
}
"#,
    )
    .unwrap();
    let exe = t.out.join("cpp_ring");
    build_and_run(
        switchyard().env("SWITCHYARD_CC", "c++"),
        &["-std=c++11"],
        &src,
        &exe,
        "SWITCHYARD_CC=c++ switchyard cc",
    );
}

/// Compiles `src` to `exe` with `cmd` (`switchyard` with its environment),
/// `cc`, `flags` and warnings as errors, then runs it on 2 PEs; both must
/// succeed (`what` names the build in the failure message).
fn build_and_run(cmd: &mut Command, flags: &[&str], src: &Path, exe: &Path, what: &str) {
    let out = cmd
        .arg("cc")
        .args(flags)
        .args(["-Wall", "-Wextra", "-pedantic", "-Werror"])
        .arg(src)
        .arg("-o")
        .arg(exe)
        .output()
        .expect("run switchyard cc");
    assert!(
        out.status.success(),
        "{what}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(exe, 2, &[]);
    assert!(
        out.status.success(),
        "{what}, run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn programs_linked_with_the_static_library_run() {
    if !have_cc() {
        return;
    }
    // globals.c too: with the static library, the library's own statics are
    // in the executable's data, which shmem_init moves into shared memory.
    for name in ["basics", "globals"] {
        let exe = tree().out.join(format!("{name}_static"));
        build_and_run(
            &mut switchyard(),
            &["--static", "-std=c11"],
            &repo().join(format!("tests/c/{name}.c")),
            &exe,
            &format!("switchyard cc --static {name}.c"),
        );
    }
}

#[test]
fn cc_show_and_pkg_config() {
    if !have_cc() {
        return;
    }
    let out = switchyard().args(["cc", "--show", "x.c"]).output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        line.contains("-lswitchyard_shmem") && line.contains(" x.c "),
        "{line}"
    );
    let pc = switchyard().args(["cc", "--pkg-config"]).output().unwrap();
    assert!(pc.status.success());
    let printed = String::from_utf8_lossy(&pc.stdout).into_owned();
    // The build script's file for the build tree names the same directories.
    let dir = tree().bin.join("pkgconfig");
    let built = std::fs::read_to_string(dir.join("switchyard-shmem.pc")).expect("the built .pc");
    let var = |text: &str, key: &str| {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} in {text}"));
        Path::new(v).canonicalize().expect("an existing directory")
    };
    for key in ["libdir=", "includedir="] {
        assert_eq!(var(&printed, key), var(&built, key), "{key}");
    }
    if let Ok(o) = Command::new("pkg-config")
        .args(["--cflags", "--libs", "switchyard-shmem"])
        .env("PKG_CONFIG_PATH", &dir)
        .output()
    {
        let flags = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && flags.contains("-lswitchyard_shmem"),
            "{flags}"
        );
        // A program built with those flags alone runs.
        let exe = tree().out.join("basics_pkg_config");
        let built = Command::new("cc")
            .arg(repo().join("tests/c/basics.c"))
            .arg("-o")
            .arg(&exe)
            .args(flags.split_whitespace())
            .status()
            .expect("run cc");
        assert!(built.success(), "cc with pkg-config's flags");
        let out = run(&exe, 2, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        skip::skip("pkg-config not installed: only the .pc file was checked");
    }
}
