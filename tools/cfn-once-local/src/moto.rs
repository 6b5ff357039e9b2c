//! A moto server owned by this process: the local stand-in for AWS.
//!
//! moto speaks the real DynamoDB, SQS, SNS and S3 wire APIs, so the handler runs the same SDK
//! calls as in AWS with only the endpoint changed. The server is started from the project's
//! Python venv on a free loopback port and stops when this process lets go of it (its stdin
//! closes), including when this process dies.
//!
//! Which interpreter runs it is chosen here too ([`choose_python`]), so that the commands that
//! start moto work from any folder: a user runs `cfn-once local` from their template's folder,
//! where a `.venv/bin/python` relative to the working directory names nothing, and finds out
//! before anything starts ([`check_python`]) when the interpreter cannot import moto.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const LAUNCHER: &str = include_str!("moto_server.py");

/// How long moto may take to import and bind; a cold start on a loaded 2-core machine takes a
/// few seconds.
const START_TIMEOUT_S: u64 = 60;

/// A running moto server.
#[derive(Debug)]
pub struct MotoServer {
    endpoint: String,
    child: Child,
    /// Held open for the server's lifetime; dropping it tells the server to exit.
    stdin: Option<ChildStdin>,
}

impl MotoServer {
    /// Starts moto with the interpreter at `python` (the venv `make venv` builds).
    pub fn start(python: &Path) -> anyhow::Result<Self> {
        if !python.exists() {
            bail!("{} does not exist: {PYTHON_FIX}", python.display());
        }
        let mut child = Command::new(python)
            .arg("-c")
            .arg(LAUNCHER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("could not start moto with {}", python.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("moto's stdout was not captured")?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(read.map(|_| line));
        });
        let endpoint = match receiver.recv_timeout(Duration::from_secs(START_TIMEOUT_S)) {
            Ok(Ok(line)) if line.starts_with("http://") => line.trim().to_owned(),
            Ok(Ok(line)) => {
                let _ = child.kill();
                bail!("moto did not report its endpoint (it printed {line:?}); is moto[server] installed in the venv?");
            }
            Ok(Err(error)) => bail!("could not read moto's endpoint: {error}"),
            Err(_) => {
                let _ = child.kill();
                bail!("moto did not start within {START_TIMEOUT_S} s");
            }
        };
        Ok(Self { endpoint, child, stdin })
    }

    /// The server's process id (to watch its CPU).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:41234`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        // Give it a moment to exit by itself, then make sure.
        for _ in 0..20 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The venv `make venv` builds, relative to a cfn-once checkout (or to the working directory).
pub const VENV_PYTHON: &str = ".venv/bin/python";

/// The interpreter taken when no venv is found: whatever `python3` the `PATH` names.
pub const PATH_PYTHON: &str = "python3";

/// The variable that names the interpreter when `--python` does not.
pub const PYTHON_VARIABLE: &str = "CFN_ONCE_PYTHON";

/// What to do when the interpreter is missing or lacks moto: said in every such error.
pub const PYTHON_FIX: &str =
    "run `make venv` in the cfn-once repository, or pass --python / set CFN_ONCE_PYTHON to a Python with moto[server]";

/// A file only a cfn-once checkout has, relative to its root: how [`choose_python`] knows the
/// folder it walked up to is the checkout and not some other project's venv.
const CHECKOUT_MARKER: &str = "tools/cfn-once-dev/Cargo.toml";

/// How long the interpreter may take to import the modules [`check_python`] asks for: moto's
/// import on a loaded 2-core machine takes a few seconds.
const CHECK_TIMEOUT_S: u64 = 60;

/// Where the chosen interpreter came from, so that an error says which rule picked it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonOrigin {
    /// `--python`.
    Flag,
    /// `$CFN_ONCE_PYTHON`.
    Variable,
    /// `.venv/bin/python` in the working directory.
    WorkingDirectory,
    /// `.venv/bin/python` of the cfn-once checkout the running binary was built in.
    Checkout,
    /// `python3` on the `PATH`.
    Path,
}

impl PythonOrigin {
    /// A few words for messages: "(from --python)".
    pub fn describe(self) -> &'static str {
        match self {
            Self::Flag => "from --python",
            Self::Variable => "from CFN_ONCE_PYTHON",
            Self::WorkingDirectory => "the working directory's venv",
            Self::Checkout => "the venv of the cfn-once checkout this binary was built in",
            Self::Path => "python3 on the PATH, no venv found",
        }
    }
}

/// The interpreter to run moto and the functions with, and why it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonChoice {
    pub path: PathBuf,
    pub origin: PythonOrigin,
}

/// Chooses the interpreter, first match wins: `flag` (`--python`); `variable`
/// (`$CFN_ONCE_PYTHON`, ignored when empty); `.venv/bin/python` in `working_dir` if it exists;
/// `.venv/bin/python` of the cfn-once checkout `exe` (the running binary) lies in, found by
/// walking up from it (`target/debug/cfn-once` -> `../../.venv/bin/python`); else `python3`.
/// Only looks: [`check_python`] says whether the choice can run moto.
pub fn choose_python(
    flag: Option<&Path>,
    variable: Option<&OsStr>,
    working_dir: &Path,
    exe: Option<&Path>,
) -> PythonChoice {
    if let Some(path) = flag {
        return PythonChoice { path: path.to_path_buf(), origin: PythonOrigin::Flag };
    }
    if let Some(path) = variable.filter(|value| !value.is_empty()) {
        return PythonChoice { path: PathBuf::from(path), origin: PythonOrigin::Variable };
    }
    let local = working_dir.join(VENV_PYTHON);
    if local.exists() {
        return PythonChoice { path: local, origin: PythonOrigin::WorkingDirectory };
    }
    let checkout = exe.into_iter().flat_map(Path::ancestors).skip(1).find(|dir| dir.join(CHECKOUT_MARKER).is_file());
    if let Some(python) = checkout.map(|dir| dir.join(VENV_PYTHON)).filter(|python| python.exists()) {
        return PythonChoice { path: python, origin: PythonOrigin::Checkout };
    }
    PythonChoice { path: PathBuf::from(PATH_PYTHON), origin: PythonOrigin::Path }
}

/// Checks, before anything starts, that `choice` runs and imports each of `modules` (moto, and
/// awslambdaric when functions are served), and returns the interpreter's absolute path as it
/// reports it (`sys.executable`): the functions' processes start in their own folders, where a
/// relative path or a bare `python3` would name something else or nothing.
pub fn check_python(choice: &PythonChoice, modules: &[&str]) -> anyhow::Result<PathBuf> {
    let shown = format!("{} ({})", choice.path.display(), choice.origin.describe());
    let script = format!("import sys\nimport {}\nprint(sys.executable)", modules.join(", "));
    let mut child = Command::new(&choice.path)
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the Python interpreter {shown}: {PYTHON_FIX}"))?;
    let deadline = Instant::now() + Duration::from_secs(CHECK_TIMEOUT_S);
    let status = loop {
        if let Some(status) = child.try_wait().with_context(|| format!("cannot wait for {shown}"))? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{shown} did not import {} within {CHECK_TIMEOUT_S} s", modules.join(", "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The outputs are a path and at most a traceback, well within a pipe's buffer, so reading
    // them after the exit cannot have blocked the child.
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    if !status.success() {
        let last = stderr.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("no message").trim();
        bail!("{shown} cannot import {} ({last}): {PYTHON_FIX}", modules.join(", "));
    }
    let reported = PathBuf::from(stdout.trim());
    if reported.is_absolute() {
        Ok(reported)
    } else {
        // An embedded or unusual interpreter may not know its own path; the one it was started
        // with is then the best name for it.
        Ok(std::path::absolute(&choice.path)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch folder holding the given files (empty), removed by the caller.
    fn scratch(name: &str, files: &[&str]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("cfn-once-python-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for file in files {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
        root
    }

    #[test]
    fn the_flag_then_the_variable_then_the_working_directory_then_the_checkout_then_the_path() {
        let root = scratch("order", &[CHECKOUT_MARKER, VENV_PYTHON, "project/.venv/bin/python"]);
        let exe = root.join("target/debug/cfn-once");
        let elsewhere = root.join("elsewhere");
        let project = root.join("project");
        let check = |flag: Option<&str>, variable: Option<&str>, working_dir: &Path, exe: Option<&Path>| {
            let choice = choose_python(flag.map(Path::new), variable.map(OsStr::new), working_dir, exe);
            (choice.path, choice.origin)
        };
        assert_eq!(
            check(Some("/opt/py"), Some("/env/py"), &project, Some(&exe)),
            (PathBuf::from("/opt/py"), PythonOrigin::Flag)
        );
        assert_eq!(
            check(None, Some("/env/py"), &project, Some(&exe)),
            (PathBuf::from("/env/py"), PythonOrigin::Variable)
        );
        assert_eq!(
            check(None, Some(""), &project, Some(&exe)),
            (project.join(VENV_PYTHON), PythonOrigin::WorkingDirectory),
            "an empty variable is unset"
        );
        assert_eq!(check(None, None, &elsewhere, Some(&exe)), (root.join(VENV_PYTHON), PythonOrigin::Checkout));
        assert_eq!(check(None, None, &elsewhere, None), (PathBuf::from(PATH_PYTHON), PythonOrigin::Path));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_venv_above_the_binary_is_not_taken_unless_it_is_a_cfn_once_checkout() {
        let root = scratch("not-checkout", &[VENV_PYTHON]);
        let choice = choose_python(None, None, &root.join("elsewhere"), Some(&root.join("bin/cfn-once")));
        assert_eq!(choice.origin, PythonOrigin::Path);
        // A checkout whose venv was never made: nothing there to take either.
        let root_without_venv = scratch("no-venv", &[CHECKOUT_MARKER]);
        let choice =
            choose_python(None, None, &root.join("elsewhere"), Some(&root_without_venv.join("target/cfn-once")));
        assert_eq!(choice.origin, PythonOrigin::Path);
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&root_without_venv).unwrap();
    }

    #[test]
    fn an_interpreter_that_cannot_run_is_named_with_the_fix() {
        let choice = PythonChoice { path: PathBuf::from("/nonexistent/python"), origin: PythonOrigin::Variable };
        let error = format!("{:#}", check_python(&choice, &["moto"]).unwrap_err());
        assert!(error.contains("/nonexistent/python (from CFN_ONCE_PYTHON)"), "{error}");
        assert!(error.contains("make venv") && error.contains("--python"), "{error}");
    }
}
