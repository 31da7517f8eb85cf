// build.rs: finds librankd.so (the C ABI) and links it dynamically, so that
// every binary that uses the crate runs without LD_LIBRARY_PATH.
//
// Where the library is, first match wins:
//   1. $RANKD_LIB_DIR, the override (a Bazel build: `$(bazel info
//      bazel-bin)/capi`; an installed rankd: `<prefix>/lib`);
//   2. an installed rankd's pkg-config file, as C programs find it:
//      `pkg-config --variable=libdir rankd`, so PKG_CONFIG_PATH=
//      <prefix>/lib/pkgconfig finds any prefix ($PKG_CONFIG names another
//      pkg-config binary);
//   3. /usr/local/lib (the default prefix) when it has the library.
//
// How binaries find it at run time: `cargo:rustc-link-arg=-Wl,-rpath,...`
// reaches only this package's own binaries (examples, tests), never those
// of a package that depends on the crate. What does reach them is the
// library search path and `-lrankd`: so the folder searched is OUT_DIR,
// whose librankd.so is a one-line linker script naming the real library by
// its full path. librankd.so has no SONAME (capi/BUILD.bazel), so the
// linker (GNU ld or lld) records that full path as the binary's DT_NEEDED
// and the dynamic loader opens it without searching. A binary built so
// needs the library where it was at build time: rebuild after moving it.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RANKD_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = match env::var_os("RANKD_LIB_DIR") {
        Some(d) if !d.is_empty() => {
            let dir = PathBuf::from(d);
            if !dir.join("librankd.so").exists() {
                panic!(
                    "\n\nrankd: RANKD_LIB_DIR={} has no librankd.so \
                     (a Bazel build: bazel build //capi:librankd.so; an \
                     installed rankd: <prefix>/lib)\n\n",
                    dir.display()
                );
            }
            dir
        }
        _ => match from_pkg_config() {
            Some(dir) => dir,
            None => {
                let installed = PathBuf::from("/usr/local/lib");
                if !installed.join("librankd.so").exists() {
                    panic!(
                        "\n\nrankd: no librankd.so found. For an installed rankd \
                         (tools/install.sh --prefix=DIR), let pkg-config find it:\n  \
                         export PKG_CONFIG_PATH=DIR/lib/pkgconfig\n\
                         or set RANKD_LIB_DIR to the folder holding librankd.so, e.g. for \
                         a Bazel build:\n  \
                         bazel build //capi:librankd.so && \
                         export RANKD_LIB_DIR=$(bazel info bazel-bin)/capi\n\n"
                    );
                }
                installed
            }
        },
    };
    // Canonical, so that the recorded path stays valid from wherever
    // binaries run.
    let dir = dir.canonicalize().unwrap_or(dir);
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    write_link_script(&out, &dir.join("librankd.so"));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=dylib=rankd");
    // The tests find rankd and rankctl next to it when $RANKD_BIN and
    // $RANKCTL_BIN are unset (tests/common/mod.rs).
    println!("cargo:rustc-env=RANKD_BUILD_LIB_DIR={}", dir.display());
    // Dependents' build scripts read it as DEP_RANKD_LIB_DIR (`links`).
    println!("cargo:lib_dir={}", dir.display());
}

// The libdir of pkg-config's `rankd` package when it holds librankd.so.
// pkg-config missing, or not knowing rankd, is not an error: the next
// place is tried.
fn from_pkg_config() -> Option<PathBuf> {
    let program = env::var_os("PKG_CONFIG").unwrap_or_else(|| "pkg-config".into());
    let output = Command::new(&program)
        .args(["--variable=libdir", "rankd"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let libdir = String::from_utf8(output.stdout).ok()?;
    let dir = PathBuf::from(libdir.trim());
    if dir.as_os_str().is_empty() {
        return None;
    }
    if !dir.join("librankd.so").exists() {
        println!(
            "cargo:warning=pkg-config's rankd names {}, which has no librankd.so; ignored",
            dir.display()
        );
        return None;
    }
    Some(dir)
}

// OUT_DIR/librankd.so: `INPUT("<library>")`, which the linker reads in
// place of a library (GNU ld and lld both take such implicit scripts).
fn write_link_script(out: &Path, library: &Path) {
    let path = library
        .to_str()
        .unwrap_or_else(|| panic!("\n\nrankd: {} is not valid UTF-8\n\n", library.display()));
    if path.contains('"') {
        panic!(
            "\n\nrankd: the path {} has a '\"', which a linker script cannot quote\n\n",
            path
        );
    }
    let script = out.join("librankd.so");
    std::fs::write(&script, format!("INPUT(\"{}\")\n", path))
        .unwrap_or_else(|e| panic!("rankd: cannot write {}: {}", script.display(), e));
}
