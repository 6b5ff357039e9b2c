//! Which cfn-once this is: `cfn-once --version` names the version and the commit, and the commit
//! compiled in is the checkout's HEAD (the build script reran when HEAD moved). The function's
//! first log line is checked in `logs.rs`, its metrics' `Version` in `emf.rs`, the records'
//! `writer` in `tests/it/golden/` (`informational.rs`).

use std::path::PathBuf;
use std::process::Command;

use cfn_once_core::build::{COMMIT, DESCRIPTION, VERSION};
use cfn_once_tests::workspace_root;

/// `cfn-once` in the same target directory as this test binary.
fn cfn_once_binary() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("cfn-once{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn cfn_once_version_names_the_version_and_the_commit() {
    let binary = cfn_once_binary();
    assert!(
        binary.exists(),
        "{} is not built: `cargo build --bin cfn-once` first (`make test` does)",
        binary.display()
    );
    let output = Command::new(&binary).arg("--version").output().expect("cfn-once --version");
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).expect("UTF-8");
    assert_eq!(printed, format!("cfn-once {VERSION} (commit {COMMIT})\n"), "rebuilt since the last commit?");
    assert_eq!(DESCRIPTION, format!("{VERSION} (commit {COMMIT})"));
    assert_eq!(VERSION, env!("CARGO_PKG_VERSION"), "one version for the workspace");
}

#[test]
fn the_commit_compiled_in_is_the_checkout_s_head() {
    let root = workspace_root();
    if !root.join(".git").exists() {
        // A source archive: the commit is the build's CFN_ONCE_COMMIT, or "unknown".
        assert!(!COMMIT.is_empty());
        return;
    }
    let head = match Command::new("git").arg("-C").arg(&root).args(["rev-parse", "--short=12", "HEAD"]).output() {
        Ok(output) if output.status.success() => output,
        _ => return println!("no git to ask: the build script said {COMMIT}"),
    };
    assert_eq!(COMMIT, String::from_utf8_lossy(&head.stdout).trim(), "the build script did not rerun for a new HEAD");
}
