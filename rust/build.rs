// build.rs: links librankd.so (the C ABI) dynamically. The folder holding
// it comes from $RANKD_LIB_DIR (a Bazel build: `$(bazel info
// bazel-bin)/capi`; an installed rankd: `<prefix>/lib`), else the default
// install prefix /usr/local/lib when it has one. The folder also goes into
// the binaries' rpath so they run without LD_LIBRARY_PATH.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=RANKD_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = match env::var_os("RANKD_LIB_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => {
            let installed = PathBuf::from("/usr/local/lib");
            if installed.join("librankd.so").exists() {
                installed
            } else {
                panic!(
                    "\n\nrankd: set RANKD_LIB_DIR to the folder holding librankd.so, e.g.\n  \
                     bazel build //capi:librankd.so && \
                     export RANKD_LIB_DIR=$(bazel info bazel-bin)/capi\n\
                     or, for an installed rankd, RANKD_LIB_DIR=<prefix>/lib \
                     (/usr/local/lib/librankd.so is used when it exists).\n\n"
                );
            }
        }
    };
    if !dir.join("librankd.so").exists() {
        panic!(
            "\n\nrankd: RANKD_LIB_DIR={} has no librankd.so (bazel build //capi:librankd.so)\n\n",
            dir.display()
        );
    }
    // Canonical, so that the rpath stays valid from wherever binaries run.
    let dir = dir.canonicalize().unwrap_or(dir);
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=rankd");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    // The tests find rankd and rankctl next to it when $RANKD_BIN and
    // $RANKCTL_BIN are unset (tests/common/mod.rs).
    println!("cargo:rustc-env=RANKD_BUILD_LIB_DIR={}", dir.display());
    // Dependents (none here) could read it as DEP_RANKD_LIB_DIR.
    println!("cargo:lib_dir={}", dir.display());
}
