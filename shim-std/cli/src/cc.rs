//! `switchyard cc [--show] [--static] [--pkg-config] [CC ARGS]...`: compiles and links
//! OpenSHMEM C programs against `libswitchyard_shmem` (an `oshcc`
//! equivalent). It runs the C compiler (`$SWITCHYARD_CC`, else `$CC`, else
//! `cc`, split at whitespace as make does: `CC="c++ -std=gnu++11"` runs `c++`
//! with `-std=gnu++11` first; no quoting) with `-I` for `shmem.h`, then the caller's arguments, then `-L`,
//! an rpath, `-lswitchyard_shmem` and the system libraries the Rust library
//! needs (`-lpthread -ldl -lm`, and with `--static` `-libverbs` in a build
//! with the `verbs` feature, `-lpmix` in one with `pmix`: build the C API
//! with the same features).
//!
//! Where the pieces are found, first match wins:
//!
//! | what | override | install prefix | cargo build tree |
//! |---|---|---|---|
//! | `shmem.h` | `$SWITCHYARD_SHMEM_INCLUDE` | `BIN/../include` | `shim-std/capi/include` of the source the binary was built from |
//! | the library | `$SWITCHYARD_SHMEM_LIB` | `BIN/../lib` | `BIN` itself (`target/<profile>/`, where cargo puts both) |
//!
//! where `BIN` is the directory of the running `switchyard` executable. An
//! install prefix is `PREFIX/bin/switchyard`, `PREFIX/lib/libswitchyard_shmem.so`
//! (or `.a`) and `PREFIX/include/shmem.h`.
//!
//! Our flags come first; the first argument that is not one of them, and
//! everything after it, goes to the compiler untouched. `--show` prints the
//! command instead of running it; `--static` links
//! `libswitchyard_shmem.a` into the program instead of the shared library;
//! `--pkg-config` prints a `switchyard-shmem.pc` for the same paths.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use crate::Output;

/// Include and library directories of the C API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Holds `shmem.h`.
    pub include: PathBuf,
    /// Holds `libswitchyard_shmem.so` / `.a`.
    pub lib: PathBuf,
}

const LIB_NAMES: [&str; 2] = ["libswitchyard_shmem.so", "libswitchyard_shmem.a"];

/// What the static library's verbs driver calls (the shared library brings
/// it along by itself): `libibverbs`, in a build with RDMA verbs.
const VERBS_LIB: Option<&str> = if cfg!(feature = "verbs") {
    Some("-libverbs")
} else {
    None
};

/// What the static library's PMIx bootstrap calls: `libpmix`, in a build
/// with PMIx (the `pmix` feature).
const PMIX_LIB: Option<&str> = if cfg!(feature = "pmix") {
    Some("-lpmix")
} else {
    None
};

/// The system libraries the static library needs beyond libc's.
fn static_libs() -> impl Iterator<Item = &'static str> {
    VERBS_LIB.into_iter().chain(PMIX_LIB)
}

/// Finds the include and library directories for the executable in `bin`
/// (see the module doc), with `var` reading the environment.
///
/// # Errors
///
/// A message saying where it looked when either is missing.
pub fn locate(bin: &Path, var: impl Fn(&str) -> Option<OsString>) -> Result<Paths, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/include");
    let include = match var("SWITCHYARD_SHMEM_INCLUDE") {
        Some(d) => vec![PathBuf::from(d)],
        None => vec![bin.join("../include"), source],
    };
    let lib = match var("SWITCHYARD_SHMEM_LIB") {
        Some(d) => vec![PathBuf::from(d)],
        None => vec![bin.to_path_buf(), bin.join("../lib")],
    };
    let inc = include.iter().find(|d| d.join("shmem.h").is_file());
    let lb = lib
        .iter()
        .find(|d| LIB_NAMES.iter().any(|n| d.join(n).is_file()));
    let show = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (inc, lb) {
        (Some(i), Some(l)) => Ok(Paths {
            include: clean(i),
            lib: clean(l),
        }),
        (None, _) => Err(format!(
            "shmem.h not found in {} (set SWITCHYARD_SHMEM_INCLUDE)",
            show(&include)
        )),
        (_, None) => Err(format!(
            "libswitchyard_shmem (.so or .a) not found in {} (build it with \
             `cargo build -p switchyard-shmem`, or set SWITCHYARD_SHMEM_LIB)",
            show(&lib)
        )),
    }
}

fn clean(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// The compiler command line: the words of `compiler` (split at whitespace),
/// `-I`, `args`, then the link flags
/// (the static library itself when `static_lib`, else `-L`, an rpath and
/// `-lswitchyard_shmem`).
pub fn command(compiler: &str, paths: &Paths, args: &[String], static_lib: bool) -> Vec<String> {
    let lib = paths.lib.display().to_string();
    // `CC="gcc -m32"`: the program, then its own words, as make runs it.
    let mut v: Vec<String> = compiler.split_whitespace().map(String::from).collect();
    if v.is_empty() {
        v.push("cc".into());
    }
    v.push(format!("-I{}", paths.include.display()));
    v.extend(args.iter().cloned());
    if static_lib {
        v.push(paths.lib.join(LIB_NAMES[1]).display().to_string());
        v.extend(static_libs().map(String::from));
    } else {
        v.extend([
            format!("-L{lib}"),
            format!("-Wl,-rpath,{lib}"),
            "-lswitchyard_shmem".into(),
        ]);
    }
    v.extend(["-lpthread".into(), "-ldl".into(), "-lm".into()]);
    v
}

/// A pkg-config file for `paths`.
pub fn pkg_config(paths: &Paths) -> String {
    format!(
        "includedir={}\nlibdir={}\n\nName: switchyard-shmem\n\
         Description: switchyard's OpenSHMEM 1.5 C API\nVersion: {}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lswitchyard_shmem\n\
         Libs.private: {}-lpthread -ldl -lm\n",
        paths.include.display(),
        paths.lib.display(),
        env!("CARGO_PKG_VERSION"),
        static_libs().map(|l| format!("{l} ")).collect::<String>()
    )
}

/// What `switchyard cc --help` says before the options.
pub(crate) const ABOUT: &str = "\
Compiles and links an OpenSHMEM C program against libswitchyard_shmem (an oshcc
equivalent): runs the C compiler with -I for shmem.h, then CC ARGS untouched,
then the library and the system libraries it needs.

The compiler is $SWITCHYARD_CC, else $CC, else cc, split at whitespace as make
does (CC=\"gcc -m32\" runs gcc with -m32 first). shmem.h and the library are
found next to this executable (a cargo target directory) or in ../include and
../lib (an install prefix); $SWITCHYARD_SHMEM_INCLUDE and $SWITCHYARD_SHMEM_LIB
override them.";

/// `switchyard cc` arguments. Ours come first; from the first argument that
/// is not one of them on, everything goes to the compiler untouched.
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
#[command(
    override_usage = "switchyard cc [--show] [--static] [CC ARGS]...\n       \
                      switchyard cc --pkg-config",
    after_help = "Exit status: the compiler's; 1 when the library or shmem.h is not found."
)]
pub struct CcArgs {
    /// Print the compiler command instead of running it
    #[arg(long)]
    pub show: bool,
    /// Link libswitchyard_shmem.a into the program instead of the shared
    /// library
    #[arg(long = "static")]
    pub static_lib: bool,
    /// Print switchyard-shmem.pc for this installation
    #[arg(long = "pkg-config")]
    pub pkg_config: bool,
    /// Arguments for the C compiler, passed through untouched
    #[arg(
        value_name = "CC ARGS",
        num_args = 0..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,
}

/// Runs `switchyard cc`: prints the command or the pkg-config file, or runs
/// the compiler (which writes for itself) and passes on its status.
pub fn run(args: &CcArgs) -> Output {
    let fail = |code: u8, message: String| Output {
        code,
        stdout: String::new(),
        stderr: format!("switchyard cc: {message}\n"),
    };
    let bin = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let paths = match locate(&bin, |k| std::env::var_os(k)) {
        Ok(p) => p,
        Err(e) => return fail(1, e),
    };
    if args.pkg_config {
        return Output::ok(pkg_config(&paths));
    }
    if args.static_lib && !paths.lib.join(LIB_NAMES[1]).is_file() {
        let missing = paths.lib.join(LIB_NAMES[1]);
        return fail(1, format!("--static: {} not found", missing.display()));
    }
    let compiler = ["SWITCHYARD_CC", "CC"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "cc".into());
    let cmd = command(compiler.trim(), &paths, &args.args, args.static_lib);
    if args.show {
        return Output::ok(format!("{}\n", cmd.join(" ")));
    }
    match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(st) => Output::status(st.code().map_or(1, |c| c.clamp(0, 255) as u8)),
        Err(e) => fail(127, format!("cannot run {}: {e}", cmd[0])),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn finds_a_prefix_and_builds_the_command() {
        let dir = std::env::temp_dir().join(format!("sy-cc-test-{}", std::process::id()));
        for d in ["bin", "lib", "include"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join("include/shmem.h"), "").unwrap();
        std::fs::write(dir.join("lib/libswitchyard_shmem.so"), "").unwrap();
        let p = locate(&dir.join("bin"), |_| None).unwrap();
        assert_eq!(p.include, dir.join("include").canonicalize().unwrap());
        assert_eq!(p.lib, dir.join("lib").canonicalize().unwrap());
        let c = command("gcc", &p, &["x.c".into(), "-o".into(), "x".into()], false);
        assert_eq!(c[0], "gcc");
        assert!(c[1].starts_with("-I") && c[2] == "x.c");
        // A compiler with its own flags, as in `CC="c++ -std=gnu++11"`.
        let c = command(" c++  -std=gnu++11\t-m64 ", &p, &["x.cpp".into()], false);
        assert_eq!(c[..3], ["c++", "-std=gnu++11", "-m64"]);
        assert!(c[3].starts_with("-I") && c[4] == "x.cpp", "{c:?}");
        assert!(c.contains(&"-lswitchyard_shmem".to_string()));
        let s = command("gcc", &p, &["x.c".into()], true);
        assert!(s.iter().any(|a| a.ends_with("/libswitchyard_shmem.a")));
        assert!(!s.contains(&"-lswitchyard_shmem".to_string()));
        // libibverbs only where the library has RDMA verbs.
        let verbs = cfg!(feature = "verbs");
        assert_eq!(s.contains(&"-libverbs".to_string()), verbs, "{s:?}");
        // libpmix only where the library has the PMIx bootstrap.
        let pmix = cfg!(feature = "pmix");
        assert_eq!(s.contains(&"-lpmix".to_string()), pmix, "{s:?}");
        let pc = pkg_config(&p);
        assert!(pc.contains("Libs: -L${libdir}"));
        let private = format!(
            "Libs.private: {}{}-lpthread",
            if verbs { "-libverbs " } else { "" },
            if pmix { "-lpmix " } else { "" }
        );
        assert!(pc.contains(&private), "{pc}");
        assert!(pc.contains("-lpthread -ldl -lm\n"), "{pc}");
        let e = locate(&dir.join("bin"), |k| {
            (k == "SWITCHYARD_SHMEM_LIB").then(|| dir.join("nowhere").into())
        })
        .unwrap_err();
        assert!(e.contains("SWITCHYARD_SHMEM_LIB"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn compiler_arguments_pass_through_untouched() {
        let parse = |a: &[&str]| {
            let mut all = vec!["cc"];
            all.extend_from_slice(a);
            match crate::cli::parse_strs(&all) {
                Ok(crate::cli::Command::Cc(c)) => c,
                other => panic!("{a:?}: {other:?}"),
            }
        };
        let c = parse(&["--show", "--static", "-std=c11", "-Wall", "x.c", "-o", "x"]);
        assert!(c.show && c.static_lib && !c.pkg_config);
        assert_eq!(c.args, ["-std=c11", "-Wall", "x.c", "-o", "x"]);
        // From the first compiler argument on, ours are the compiler's too.
        let c = parse(&["-O2", "--show", "-h", "--help", "-V", "--version", "x.c"]);
        assert!(!c.show);
        assert_eq!(
            c.args,
            ["-O2", "--show", "-h", "--help", "-V", "--version", "x.c"]
        );
        let c = parse(&["--frobnicate", "-shared", "-static", "-s", "--", "x.c"]);
        assert_eq!(
            c.args,
            ["--frobnicate", "-shared", "-static", "-s", "--", "x.c"]
        );
        assert!(parse(&["--pkg-config"]).pkg_config);
        assert_eq!(parse(&[]), CcArgs::default());
        let help = crate::run(&["cc".into(), "--help".into()]);
        assert_eq!(help.code, 0);
        assert!(
            help.stdout.starts_with("Usage: switchyard cc [--show]"),
            "{}",
            help.stdout
        );
    }
}
