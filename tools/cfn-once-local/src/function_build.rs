//! A function folder built the way a Lambda zip is: its `requirements.txt` installed with
//! `python -m pip install -r requirements.txt --target <dir>`, then the folder's own files
//! copied over it, so that the function runs from one folder (`LAMBDA_TASK_ROOT`) holding its
//! code and its dependencies, as in `/var/task`.
//!
//! The user's folder is only read, never written. The installed dependencies are cached under
//! `<builds>/deps-<hash>`, the hash of the requirements file's bytes and the interpreter's path,
//! so a restart with the same requirements installs nothing; the build itself
//! (`<builds>/<function>`) is made again at each start from the cache (hard links) and the
//! folder's current files. Hidden entries (`.git`, `.venv`) and `__pycache__` are not copied.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

/// The requirements file a function folder may hold.
pub const REQUIREMENTS: &str = "requirements.txt";

/// Builds `folder` for the function `name` into `<builds>/<name>`, installing its requirements
/// with `python` (reporting progress to `progress`), and returns the build's folder.
pub async fn build(
    folder: &Path,
    name: &str,
    python: &Path,
    builds: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(builds).with_context(|| format!("cannot create {}", builds.display()))?;
    let requirements = folder.join(REQUIREMENTS);
    let dependencies = if requirements.is_file() {
        Some(install(&requirements, folder, python, builds, progress).await?)
    } else {
        None
    };
    let build = builds.join(name);
    if build.exists() {
        std::fs::remove_dir_all(&build).with_context(|| format!("cannot remove the old build {}", build.display()))?;
    }
    std::fs::create_dir_all(&build).with_context(|| format!("cannot create {}", build.display()))?;
    if let Some(dependencies) = &dependencies {
        copy_tree(dependencies, &build, Link::Hard)?;
    }
    copy_tree(folder, &build, Link::Copy)?;
    Ok(build)
}

/// The cached installation of `requirements`, installed now if it is not there yet.
async fn install(
    requirements: &Path,
    folder: &Path,
    python: &Path,
    builds: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<PathBuf> {
    let bytes = std::fs::read(requirements).with_context(|| format!("cannot read {}", requirements.display()))?;
    let mut key = bytes.clone();
    key.extend_from_slice(python.as_os_str().as_encoded_bytes());
    let cached = builds.join(format!("deps-{:016x}", fnv1a(&key)));
    if cached.is_dir() {
        progress(&format!("{}: dependencies unchanged, cached in {}", requirements.display(), cached.display()));
        return Ok(cached);
    }
    let staging = builds.join(format!("deps-{:016x}.partial", fnv1a(&key)));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).with_context(|| format!("cannot remove {}", staging.display()))?;
    }
    progress(&format!("{}: installing into {} (pip)", requirements.display(), cached.display()));
    // pip reads relative paths in a requirements file (`./mylib`) from its working directory:
    // the folder, as when the user runs it there.
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--requirement"])
        .arg(requirements)
        .arg("--target")
        .arg(&staging)
        .current_dir(folder)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = command.output().await.with_context(|| format!("cannot run {} -m pip", python.display()))?;
    for line in String::from_utf8_lossy(&output.stdout).lines().chain(String::from_utf8_lossy(&output.stderr).lines()) {
        progress(&format!("  pip: {line}"));
    }
    if !output.status.success() {
        anyhow::bail!("pip could not install {} ({}); its output is above", requirements.display(), output.status);
    }
    std::fs::rename(&staging, &cached)
        .with_context(|| format!("cannot move the dependencies to {}", cached.display()))?;
    Ok(cached)
}

#[derive(Clone, Copy)]
enum Link {
    /// Hard links to the cache (falling back to a copy across file systems).
    Hard,
    Copy,
}

/// Copies the tree `from` into `to`, replacing files that are there, skipping hidden entries and
/// `__pycache__`.
fn copy_tree(from: &Path, to: &Path, link: Link) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry.with_context(|| format!("cannot read {}", from.display()))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || name == "__pycache__" {
            continue;
        }
        let (source, target) = (entry.path(), to.join(&name));
        let kind = std::fs::metadata(&source).with_context(|| format!("cannot read {}", source.display()))?;
        if kind.is_dir() {
            std::fs::create_dir_all(&target).with_context(|| format!("cannot create {}", target.display()))?;
            copy_tree(&source, &target, link)?;
            continue;
        }
        if target.exists() {
            std::fs::remove_file(&target).with_context(|| format!("cannot replace {}", target.display()))?;
        }
        let linked = matches!(link, Link::Hard) && std::fs::hard_link(&source, &target).is_ok();
        if !linked {
            std::fs::copy(&source, &target)
                .with_context(|| format!("cannot copy {} to {}", source.display(), target.display()))?;
        }
    }
    Ok(())
}

/// FNV-1a, 64 bits: a stable name for a cache entry (not a security boundary).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_is_stable() {
        // The published FNV-1a test vectors: a cache made by one build is found by the next.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[tokio::test]
    async fn a_folder_without_requirements_is_copied_without_its_hidden_files() {
        let root = std::env::temp_dir().join(format!("cfn-once-build-{}", std::process::id()));
        let folder = root.join("fn");
        std::fs::create_dir_all(folder.join("lib/__pycache__")).unwrap();
        std::fs::create_dir_all(folder.join(".git")).unwrap();
        std::fs::write(folder.join("app.py"), "x = 1\n").unwrap();
        std::fs::write(folder.join("lib/util.py"), "y = 2\n").unwrap();
        std::fs::write(folder.join("lib/__pycache__/util.pyc"), "").unwrap();
        std::fs::write(folder.join(".git/HEAD"), "").unwrap();
        let quiet = |_: &str| {};
        let build = build(&folder, "my-fn", Path::new("python3"), &root.join("builds"), &quiet).await.unwrap();
        assert_eq!(std::fs::read_to_string(build.join("app.py")).unwrap(), "x = 1\n");
        assert!(build.join("lib/util.py").is_file());
        assert!(!build.join("lib/__pycache__").exists() && !build.join(".git").exists());
        // A file removed from the folder is gone from the next build.
        std::fs::remove_file(folder.join("lib/util.py")).unwrap();
        let build = super::build(&folder, "my-fn", Path::new("python3"), &root.join("builds"), &quiet).await.unwrap();
        assert!(!build.join("lib/util.py").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
