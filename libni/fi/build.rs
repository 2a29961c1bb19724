//! libfabric loads external providers only by the name `lib<name>-fi.so`, which a cargo
//! `cdylib` cannot have (`libni_fi.so`). So the build leaves a directory to put in
//! `FI_PROVIDER_PATH` beside the library: `target/<profile>/libfabric/libni-fi.so`, a symlink
//! to `../libni_fi.so`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/ni-fi-<hash>/out.
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    let dir = profile_dir.join("libfabric");
    let link = dir.join("libni-fi.so");
    if std::fs::create_dir_all(&dir).is_err() {
        println!(
            "cargo:warning=cannot create {}: FI_PROVIDER_PATH needs a libni-fi.so symlink",
            dir.display()
        );
        return;
    }
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::os::unix::fs::symlink("../libni_fi.so", &link) {
        println!("cargo:warning=cannot link {}: {e}", link.display());
    }
}
