//! Tells the crate which commit it is built from (`CFN_ONCE_COMMIT`, read by `src/build.rs`),
//! without a timestamp or anything else that differs between two builds of one commit, so that
//! a build stays reproducible.
//!
//! The commit is `git rev-parse --short=12 HEAD` of the repository this crate sits in
//! (`handler/cfn-once-core` of a cfn-once checkout or worktree: its `.git` two directories up),
//! else the `CFN_ONCE_COMMIT` environment variable of the build (a build from a source archive,
//! a container without the `.git`), else "unknown" (the packaged crate, as a provider author's
//! build compiles it). A `.git` found anywhere else (a home directory kept in git, above the
//! cargo registry) is not this crate's and is not asked.
//!
//! Cargo reruns this script only when HEAD moves: it watches the worktree's `HEAD` and its
//! reflog (`logs/HEAD`, appended at every commit, checkout and reset), the branch's loose ref
//! and `packed-refs`, each only where it exists (a watched path that does not exist reruns the
//! script at every build). It does not watch the refs of other branches, which other worktrees
//! of the same repository move all the time. A rebuild with nothing changed compiles nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CFN_ONCE_COMMIT");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let from_git =
        manifest.parent().and_then(Path::parent).filter(|root| root.join(".git").exists()).and_then(git_commit);
    let commit = from_git
        .or_else(|| {
            std::env::var("CFN_ONCE_COMMIT").ok().map(|value| value.trim().to_owned()).filter(|v| !v.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CFN_ONCE_COMMIT={commit}");
}

/// The short commit of `root`'s HEAD, and the paths to watch for it to move; None where git is
/// missing or fails.
fn git_commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    if commit.len() != 12 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let git_dir = PathBuf::from(git(&["rev-parse", "--path-format=absolute", "--git-dir"])?);
    let common_dir = PathBuf::from(git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?);
    let mut watched = vec![git_dir.join("HEAD"), git_dir.join("logs/HEAD"), common_dir.join("packed-refs")];
    // The branch HEAD names, if any (a detached HEAD is in the HEAD file itself).
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common_dir.join(branch));
    }
    for path in watched.iter().filter(|path| path.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(commit)
}
