//! Writes `switchyard-shmem.pc` for the cargo build tree: into
//! `target/<profile>/pkgconfig/`, with `includedir` this crate's `include/`
//! and `libdir` `target/<profile>/` (where cargo puts the library). So
//! `PKG_CONFIG_PATH=target/debug/pkgconfig pkg-config --cflags --libs
//! switchyard-shmem` works right after `cargo build -p switchyard-shmem`.
//! (For an install prefix, `switchyard cc --pkg-config` prints one.)
//! `Libs.private` names `libibverbs` only with the `verbs` feature.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    // OUT_DIR is target/<profile>/build/switchyard-shmem-<hash>/out.
    let Some(profile) = out.ancestors().nth(3) else {
        return;
    };
    if !profile.join("build").is_dir() {
        return;
    }
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let pc = format!(
        "includedir={}\nlibdir={}\n\nName: switchyard-shmem\n\
         Description: switchyard's OpenSHMEM 1.5 C API\nVersion: {}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lswitchyard_shmem\n\
         Libs.private: {}-lpthread -ldl -lm\n",
        include.display(),
        profile.display(),
        env!("CARGO_PKG_VERSION"),
        // What the static library's verbs driver calls, with RDMA verbs.
        if std::env::var_os("CARGO_FEATURE_VERBS").is_some() {
            "-libverbs "
        } else {
            ""
        }
    );
    let dir = profile.join("pkgconfig");
    // Best effort: a read-only target tree only loses the convenience.
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("switchyard-shmem.pc"), pc);
    }
}
