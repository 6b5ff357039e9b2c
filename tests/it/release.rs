//! `make release`'s pieces that run in a moment (`.ci/release_files.py`): what makes its zips and
//! SBOMs the same bytes on every machine, and the one version a release carries. The builds
//! themselves take most of an hour and are not run here (docs/release.md says how they were
//! checked).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cfn_once_tests::{unique, workspace_root};
use serde_json::{Value, json};

/// 2026-12-07T18:56:36Z, a commit's time.
const EPOCH: &str = "1796669796";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(&format!("release-{name}")));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// `python3 .ci/release_files.py ARGS`, as `.ci/release` runs it, with the commit's time.
fn release_files(args: &[&Path], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new("python3")
        .arg(workspace_root().join(".ci/release_files.py"))
        .args(args)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().expect("stdin").write_all(stdin.unwrap_or("").as_bytes()).expect("stdin written");
    child.wait_with_output().expect("release_files.py finishes")
}

/// A zip as a build leaves it: `entries` are (name, mode, content) in the order written, each
/// dated `date` (a Python tuple).
fn zip_as_built(path: &Path, entries: &[(&str, u32, &str)], date: &str) {
    let mut script = format!("import zipfile\nz = zipfile.ZipFile({:?}, 'w')\n", path.display().to_string());
    for (name, mode, content) in entries {
        script.push_str(&format!(
            "i = zipfile.ZipInfo({name:?}, date_time={date}); i.create_system = 3; \
             i.external_attr = {mode} << 16; i.compress_type = zipfile.ZIP_DEFLATED\n\
             z.writestr(i, {content:?}, compresslevel=1)\n"
        ));
    }
    script.push_str("z.close()\n");
    let status = Command::new("python3").args(["-c", &script]).status().expect("python3 runs");
    assert!(status.success(), "the build's zip is written");
}

/// Each entry of a zip: (name, date, mode, content).
fn entries(path: &Path) -> Vec<Value> {
    let script = "import json, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\n\
                  print(json.dumps([[i.filename, list(i.date_time), oct(i.external_attr >> 16), z.read(i).decode()] for i in z.infolist()]))";
    let output = Command::new("python3").args(["-c", script]).arg(path).output().expect("python3 runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice::<Vec<Value>>(&output.stdout).expect("the entries as JSON")
}

fn rezip(source: &Path, destination: &Path) {
    let output = release_files(&[Path::new("zip"), source, destination], None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn two_builds_zips_of_one_binary_become_the_same_bytes_dated_from_the_commit() {
    let dir = scratch("zip");
    let (first, second, other) = (dir.join("first.zip"), dir.join("second.zip"), dir.join("other.zip"));
    // What differs between two builds of one commit: when the binary was written, its mode's
    // group bits (a umask), the order a tool adds entries in, and how hard it compressed.
    zip_as_built(
        &first,
        &[("bootstrap", 0o100755, "the binary"), ("NOTICE", 0o100600, "text")],
        "(2026, 12, 7, 19, 1, 2)",
    );
    zip_as_built(
        &second,
        &[("NOTICE", 0o100664, "text"), ("bootstrap", 0o100775, "the binary")],
        "(2027, 1, 2, 3, 4, 6)",
    );
    zip_as_built(
        &other,
        &[("bootstrap", 0o100755, "another binary"), ("NOTICE", 0o100600, "text")],
        "(2026, 12, 7, 19, 1, 2)",
    );
    assert_ne!(std::fs::read(&first).unwrap(), std::fs::read(&second).unwrap(), "the builds' zips differ");

    let out = |name: &str| dir.join(format!("out-{name}.zip"));
    rezip(&first, &out("first"));
    rezip(&second, &out("second"));
    rezip(&other, &out("other"));
    let bytes = |path: PathBuf| std::fs::read(path).expect("a rewritten zip");
    assert_eq!(bytes(out("first")), bytes(out("second")), "one binary, one zip, whatever the build wrote");
    assert_ne!(bytes(out("first")), bytes(out("other")), "another binary is another zip");

    // The commit's time in UTC (DOS dates have two-second steps), the mode Lambda needs for
    // bootstrap, the entries in name order, their contents kept.
    assert_eq!(
        Value::Array(entries(&out("first"))),
        json!([
            ["NOTICE", [2026, 12, 7, 18, 56, 36], "0o100644", "text"],
            ["bootstrap", [2026, 12, 7, 18, 56, 36], "0o100755", "the binary"],
        ])
    );
}

/// A CycloneDX document as cargo-cyclonedx writes it in `root`: its own serial and time.
fn sbom_as_built(root: &Path, serial: &str, timestamp: &str) -> PathBuf {
    let path = root.join(unique("sbom")).with_extension("json");
    let document = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial,
        "version": 1,
        "metadata": {
            "timestamp": timestamp,
            "component": {
                "name": "cfn-once",
                "bom-ref": format!("path+file://{}/handler/cfn-once#0.2.0", root.display()),
            },
        },
        "components": [
            {"name": "tokio", "version": "1.54.1", "purl": "pkg:cargo/tokio@1.54.1"},
            {"name": "cfn-once-core", "purl": format!("pkg:cargo/cfn-once-core@0.2.0?download_url=file://{}/handler/cfn-once-core", root.display())},
        ],
    });
    std::fs::write(&path, serde_json::to_string_pretty(&document).unwrap()).expect("an SBOM written");
    path
}

#[test]
fn sboms_carry_the_commits_time_a_serial_from_their_content_and_no_build_path() {
    let (first_root, second_root) = (scratch("sbom-a"), scratch("sbom-b"));
    let first = sbom_as_built(&first_root, "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79", "2026-12-07T19:20:00.123Z");
    let second = sbom_as_built(&second_root, "urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e", "2027-01-01T00:00:00Z");
    let rewrite = |source: &Path, root: &Path| {
        let destination = root.join("out.cdx.json");
        let output = release_files(&[Path::new("sbom"), source, root, &destination], None);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stderr).trim(), "out.cdx.json: 2 components");
        std::fs::read_to_string(destination).expect("the rewritten SBOM")
    };
    let (first, second) = (rewrite(&first, &first_root), rewrite(&second, &second_root));
    assert_eq!(first, second, "two builds in two folders, one SBOM");
    let document: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(document["metadata"]["timestamp"], "2026-12-07T18:56:36Z");
    assert_eq!(document["metadata"]["component"]["bom-ref"], "path+file:///cfn-once/handler/cfn-once#0.2.0");
    let serial = document["serialNumber"].as_str().expect("a serial number");
    assert!(serial.starts_with("urn:uuid:") && serial.len() == 45, "{serial}");

    // Another dependency is another document, with a serial of its own.
    let root = scratch("sbom-c");
    let mut changed: Value = serde_json::from_str(
        &std::fs::read_to_string(sbom_as_built(&root, "urn:uuid:x", "2026-12-07T00:00:00Z")).unwrap(),
    )
    .unwrap();
    changed["components"][0]["version"] = json!("1.54.2");
    let changed_path = root.join("changed.json");
    std::fs::write(&changed_path, changed.to_string()).unwrap();
    let changed: Value = serde_json::from_str(&rewrite(&changed_path, &root)).unwrap();
    assert_ne!(changed["serialNumber"], document["serialNumber"]);
}

#[test]
fn a_release_has_one_version_and_refuses_packages_that_disagree() {
    let metadata = |ops: &str| {
        json!({"packages": [
            {"name": "cfn-once", "version": "0.2.0"},
            {"name": "cfn-once-ops", "version": ops},
            {"name": "cfn-once-sim", "version": "0.0.1"},
        ]})
        .to_string()
    };
    let run = |ops: &str| {
        release_files(&[Path::new("version"), Path::new("cfn-once"), Path::new("cfn-once-ops")], Some(&metadata(ops)))
    };
    let agreed = run("0.2.0");
    assert!(agreed.status.success(), "{}", String::from_utf8_lossy(&agreed.stderr));
    assert_eq!(String::from_utf8_lossy(&agreed.stdout), "0.2.0\n");
    let disagreed = run("0.1.0");
    assert!(!disagreed.status.success(), "two versions in one release are refused");
    assert!(String::from_utf8_lossy(&disagreed.stderr).contains("disagree on their version"));
}

/// `.ci/releases`, which `.ci/build-rev` reads where a clone lacks a release's tag: every line a
/// `v<semver>` tag and a full commit of this repository's history, on main's line (an ancestor of
/// HEAD), each tag once; and where git has the tag, it names the same commit. The first release
/// is there, so `make upgrade-check FROM=v0.1.0` works in any clone.
#[test]
fn every_listed_release_is_a_commit_of_this_history_and_agrees_with_its_tag() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join(".ci/releases")).expect(".ci/releases");
    let git = |args: &[&str]| Command::new("git").current_dir(&root).args(args).output().expect("git runs");
    let mut tags = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [tag, commit] = fields[..] else { panic!(".ci/releases: {line:?} is not `<tag> <commit>`") };
        let version = tag.strip_prefix('v').unwrap_or_else(|| panic!("{tag}: a release tag is v<version>"));
        assert_eq!(
            version.split('.').filter(|n| n.parse::<u32>().is_ok()).count(),
            3,
            "{tag}: not v<major.minor.patch>"
        );
        assert!(
            commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
            "{tag}: {commit} is not a full commit id"
        );
        assert!(!tags.contains(&tag), "{tag} listed twice");
        tags.push(tag);
        let ancestor = git(&["merge-base", "--is-ancestor", commit, "HEAD"]);
        assert!(ancestor.status.success(), "{tag}: {commit} is not in HEAD's history");
        let tagged = git(&["rev-parse", "-q", "--verify", &format!("refs/tags/{tag}^{{commit}}")]);
        if tagged.status.success() {
            assert_eq!(String::from_utf8_lossy(&tagged.stdout).trim(), commit, "{tag}: the tag names another commit");
        }
    }
    assert!(tags.contains(&"v0.1.0"), "the first release is not listed");
}
