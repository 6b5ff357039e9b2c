//! Where a nested stack's template comes from: the local file an `AWS::CloudFormation::Stack`'s
//! `TemplateURL` names. play reads no network and no S3, so it accepts three forms, each naming a
//! file on this machine, and refuses every other URL by name before anything is sent:
//!
//! - a path with no scheme (relative to the parent template's directory, or absolute);
//! - a `file://` URL (`file:///abs/child.yaml`, `file://localhost/abs/child.yaml`, or, as a
//!   convenience CloudFormation never sees, `file://child.yaml` relative like a path);
//! - an `https://` Amazon S3 URL that a file asset of a CDK cloud assembly's asset manifest
//!   (`*.assets.json` in the parent template's directory) publishes to: CDK writes the nested
//!   template's S3 URL into the parent and the file it uploads there into the manifest, so the
//!   asset's `source.path` is the template CloudFormation would read.
//!
//! The `TemplateURL` reference says the template "must be stored on an Amazon S3 bucket, so the
//! URL must have the form: `https://s3.amazonaws.com/.../TemplateName.extension`"
//! (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-stack.html#cfn-cloudformation-stack-templateurl>,
//! as its source in awsdocs/aws-cloudformation-user-guide words it), and the API's TemplateURL
//! that "the location for an Amazon S3 bucket must start with `https://`"
//! (<https://docs.aws.amazon.com/sdk-for-kotlin/api/latest/cloudformation/aws.sdk.kotlin.services.cloudformation.model/-update-stack-request/-builder/template-url.html>).
//! Which S3 host forms CloudFormation reads is not listed; play reads the ones the S3 User Guide
//! documents (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-bucket-intro.html>):
//! virtual-hosted (`https://BUCKET.s3.REGION.amazonaws.com/KEY`), path-style
//! (`https://s3.REGION.amazonaws.com/BUCKET/KEY`), each also with the legacy `s3-REGION` and the
//! global `s3` endpoint, under `amazonaws.com` only (play's `AWS::URLSuffix`, run.rs). The URL
//! is no secret (it is in the template), so errors print it.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where a nested stack's template is read from, and how play found it (said in its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub path: PathBuf,
    pub how: String,
}

/// What every refusal ends with: the forms play reads.
const READS: &str = "play reads a nested stack's template from a local file only (a path, a file:// URL, \
     or an https:// S3 URL of a file asset that a CDK *.assets.json beside the parent template names)";

/// `${AWS::Partition}` in an asset manifest: the partition play gives every stack (run.rs).
const PARTITION: &str = "aws";

/// The only domain play reads S3 hosts under: play's `AWS::URLSuffix` (run.rs).
const URL_SUFFIX: &str = ".amazonaws.com";

/// The local file a nested stack's `TemplateURL` names, for the template at `parent` (a file path).
/// `region`/`account_id` are the stack's (for the `${AWS::Region}`/`${AWS::AccountId}` placeholders of a CDK asset manifest).
/// Err: a sentence naming the URL and why play cannot read it (no ResponseURL-like secret involved; the URL may be printed).
pub fn locate(parent: &Path, url: &str, region: &str, account_id: &str) -> Result<Located, String> {
    let base = parent.parent().unwrap_or(Path::new(""));
    match scheme(url).as_deref() {
        None if url.is_empty() => Err(format!("TemplateURL \"\" names no file: {READS}")),
        None => local(url, base.join(url)),
        Some("file") => local(url, file_path(url, base)?),
        Some("https") => from_asset(url, base, region, account_id),
        Some(other) => Err(format!("TemplateURL \"{url}\" is a {other}:// URL: {READS}")),
    }
}

/// The scheme of `url`, lower-cased, when it has one: a letter, then letters, digits, `+`, `-`
/// or `.`, before `://`.
fn scheme(url: &str) -> Option<String> {
    let (head, _) = url.split_once("://")?;
    let mut chars = head.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then(|| head.to_ascii_lowercase())
}

/// A file named on this machine: it must exist and be a file.
fn local(url: &str, path: PathBuf) -> Result<Located, String> {
    if path.is_file() {
        let how = format!("the local file {}", path.display());
        return Ok(Located { path, how });
    }
    let why = if path.exists() { "is not a file" } else { "does not exist" };
    Err(format!("TemplateURL \"{url}\" names the local file {}, which {why}: {READS}", path.display()))
}

/// The path of a `file://` URL: `file:///abs`, `file://localhost/abs`, or `file://rel` (relative
/// to the parent template's directory, as a path with no scheme), percent-decoded.
fn file_path(url: &str, base: &Path) -> Result<PathBuf, String> {
    let rest = &url["file://".len()..];
    // `file://localhost/abs` is `/abs`: keep the slash that makes it absolute.
    let rest = if rest.starts_with("localhost/") { &rest["localhost".len()..] } else { rest };
    let decoded =
        percent_decode(rest).ok_or_else(|| format!("TemplateURL \"{url}\" has a malformed %-escape: {READS}"))?;
    if decoded.is_empty() {
        return Err(format!("TemplateURL \"{url}\" names no file: {READS}"));
    }
    Ok(base.join(decoded))
}

/// `%XX` escapes decoded; None when one is malformed or the bytes are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The bucket and key of an `https://` Amazon S3 URL, in the forms the module header lists;
/// None for any other host. A query (`?versionId=...`) or fragment is not part of the key.
fn s3_object(url: &str) -> Option<(String, String)> {
    let rest = &url["https://".len()..];
    let (host, path) = rest.split_once('/')?;
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let host = host.to_ascii_lowercase();
    let labels: Vec<&str> = host.strip_suffix(URL_SUFFIX)?.split('.').collect();
    // `s3-website-REGION` is a static website endpoint, which CloudFormation does not read a
    // template from ("URLs from S3 static websites are not supported", the API's TemplateURL).
    let endpoint = |label: &str| label == "s3" || (label.starts_with("s3-") && !label.starts_with("s3-website"));
    // The endpoint is `s3`, `s3-REGION` (the last label) or `s3.REGION` (the last two).
    let bucket_labels = match labels.as_slice() {
        [before @ .., last] if endpoint(last) => before,
        [before @ .., "s3", _region] => before,
        _ => return None,
    };
    let (bucket, key) = if bucket_labels.is_empty() {
        let (bucket, key) = path.split_once('/')?;
        (bucket.to_string(), key)
    } else {
        (bucket_labels.join("."), path)
    };
    (!bucket.is_empty() && !key.is_empty()).then(|| (bucket, key.to_string()))
}

/// The file asset of a CDK asset manifest beside the parent template that is published to the
/// S3 object `url` names, with the stack's account and region in the manifest's placeholders.
fn from_asset(url: &str, base: &Path, region: &str, account_id: &str) -> Result<Located, String> {
    let Some((bucket, key)) = s3_object(url) else {
        return Err(format!("TemplateURL \"{url}\" is not an Amazon S3 URL: {READS}"));
    };
    let manifests = manifests(base).map_err(|e| format!("TemplateURL \"{url}\": {e}: {READS}"))?;
    if manifests.is_empty() {
        let dir = shown(base);
        return Err(format!("TemplateURL \"{url}\" is an S3 URL and {dir} holds no *.assets.json: {READS}"));
    }
    for manifest in &manifests {
        let text = std::fs::read_to_string(manifest)
            .map_err(|e| format!("TemplateURL \"{url}\": cannot read {}: {e}", manifest.display()))?;
        let parsed: Value = serde_json::from_str(&text)
            .map_err(|e| format!("TemplateURL \"{url}\": {} is not an asset manifest: {e}", manifest.display()))?;
        let placeholders = |text: &str| {
            text.replace("${AWS::AccountId}", account_id)
                .replace("${AWS::Region}", region)
                .replace("${AWS::Partition}", PARTITION)
        };
        let files = parsed.get("files").and_then(Value::as_object).into_iter().flatten();
        for (hash, asset) in files {
            let destinations = asset.get("destinations").and_then(Value::as_object).into_iter().flatten();
            let published_there = destinations.map(|(_, d)| d).any(|d| {
                let field = |name| d.get(name).and_then(Value::as_str).map(placeholders);
                field("bucketName").as_deref() == Some(bucket.as_str())
                    && field("objectKey").as_deref() == Some(key.as_str())
            });
            if published_there {
                return asset_file(url, manifest, hash, asset);
            }
        }
    }
    let names: Vec<String> = manifests.iter().map(|m| m.display().to_string()).collect();
    Err(format!(
        "TemplateURL \"{url}\" (bucket {bucket}, key {key}) is the destination of no file asset of {} for account \
         {account_id} and region {region}: {READS}",
        names.join(", ")
    ))
}

/// The `*.assets.json` files in `dir`, in name order (the first that names a URL wins).
fn manifests(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let listing = std::fs::read_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })
        .map_err(|e| format!("cannot list {}: {e}", shown(dir)))?;
    let mut found: Vec<PathBuf> = listing
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && path.to_string_lossy().ends_with(".assets.json"))
        .map(|path| if dir.as_os_str().is_empty() { PathBuf::from(path.file_name().unwrap_or_default()) } else { path })
        .collect();
    found.sort();
    Ok(found)
}

/// The asset's file, relative to its manifest: a `file` asset's `source.path` that exists.
fn asset_file(url: &str, manifest: &Path, hash: &str, asset: &Value) -> Result<Located, String> {
    let named = format!("TemplateURL \"{url}\" is file asset {hash} of {}", manifest.display());
    let source = asset.get("source");
    let packaging = source.and_then(|s| s.get("packaging")).and_then(Value::as_str).unwrap_or("file");
    if packaging != "file" {
        return Err(format!("{named}, packaged as {packaging} (a directory), not a template: {READS}"));
    }
    let Some(relative) = source.and_then(|s| s.get("path")).and_then(Value::as_str) else {
        return Err(format!("{named}, which has no source.path: {READS}"));
    };
    let path = manifest.parent().unwrap_or(Path::new("")).join(relative);
    if !path.is_file() {
        return Err(format!("{named}, whose source {} is not a file here: {READS}", path.display()));
    }
    let how = format!("{}, the file asset {hash} that {} names", path.display(), manifest.display());
    Ok(Located { path, how })
}

/// A directory as the user would read it: `.` for the current one.
fn shown(dir: &Path) -> String {
    if dir.as_os_str().is_empty() { ".".into() } else { dir.display().to_string() }
}

#[cfg(test)]
#[path = "nested_source_tests.rs"]
mod tests;
