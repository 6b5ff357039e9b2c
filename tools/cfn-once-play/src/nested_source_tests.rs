//! Each form a nested stack's `TemplateURL` may take, read or refused: local paths, `file://`
//! URLs, S3 URLs a CDK asset manifest names (with the stack's account and region in its
//! placeholders), everything else refused by name; and the checked-in CDK provider stack's
//! TemplateURL, as its parent evaluates it, found through its checked-in manifest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Located, locate};
use crate::intrinsics::{Pseudo, Resources, Scope, evaluate};
use crate::template::Template;

const REGION: &str = "us-east-2";
const ACCOUNT: &str = "123456789012";
const HASH: &str = "8cb94eb76e033e05f0aff2132d54a8ddc42997facc2fca2521cdde044b928ff1";
const BUCKET: &str = "cdk-hnb659fds-assets-123456789012-us-east-2";

/// A fresh directory of this test's own, with `files` (name, text) written in it.
fn folder(test: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("play-nested-source-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// An asset manifest as `cdk synth` writes it (version 55.0.0): the nested template `child.json`
/// published as `HASH.json`, and a Lambda's code as a zip.
fn manifest() -> String {
    let destination = |key: &str| {
        json!({ "current_account-current_region-a49775d0": {
            "bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}",
            "objectKey": key,
            "assumeRoleArn": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-file-publishing-role-${AWS::AccountId}-${AWS::Region}"
        }})
    };
    json!({
        "version": "55.0.0",
        "files": {
            HASH: { "source": { "path": "child.json", "packaging": "file" }, "destinations": destination(&format!("{HASH}.json")) },
            "c0de": { "source": { "path": "asset.c0de", "packaging": "zip" }, "destinations": destination("c0de.zip") },
            "9005": { "source": { "path": "gone.json", "packaging": "file" }, "destinations": destination("9005.json") }
        },
        "dockerImages": {}
    })
    .to_string()
}

/// The refusal's text, failing the test if `locate` found a file.
fn refused(parent: &Path, url: &str) -> String {
    match locate(parent, url, REGION, ACCOUNT) {
        Ok(found) => panic!("{url} was read from {found:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_path_with_no_scheme_is_a_file_beside_the_parent_or_an_absolute_one() {
    let dir = folder("path", &[("parent.yaml", ""), ("child.yaml", "Resources: {}")]);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/grandchild.yaml"), "").unwrap();
    let parent = dir.join("parent.yaml");
    let child = dir.join("child.yaml");
    let expected = Located { path: child.clone(), how: format!("the local file {}", child.display()) };
    assert_eq!(locate(&parent, "child.yaml", REGION, ACCOUNT), Ok(expected.clone()));
    let absolute = child.to_str().unwrap();
    assert_eq!(locate(&parent, absolute, REGION, ACCOUNT), Ok(expected));
    assert_eq!(locate(&parent, "sub/grandchild.yaml", REGION, ACCOUNT).unwrap().path, dir.join("sub/grandchild.yaml"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_url_names_a_local_file_absolute_localhost_relative_or_escaped() {
    let dir = folder("file", &[("parent.yaml", ""), ("child.yaml", ""), ("my child.yaml", "")]);
    let parent = dir.join("parent.yaml");
    let child = dir.join("child.yaml");
    let absolute = child.to_str().unwrap();
    for url in [format!("file://{absolute}"), format!("file://localhost{absolute}"), "file://child.yaml".into()] {
        let found = locate(&parent, &url, REGION, ACCOUNT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found.path, child, "{url}");
        assert_eq!(found.how, format!("the local file {}", child.display()), "{url}");
    }
    assert_eq!(locate(&parent, "FILE://my%20child.yaml", REGION, ACCOUNT).unwrap().path, dir.join("my child.yaml"));
    for url in ["file://my%zzchild.yaml", "file://child.yaml%2", "file://%ff.yaml"] {
        assert!(refused(&parent, url).contains("malformed %-escape"), "{url}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_local_file_must_exist_and_be_a_file() {
    let dir = folder("missing", &[("parent.yaml", "")]);
    std::fs::create_dir_all(dir.join("folder")).unwrap();
    let parent = dir.join("parent.yaml");
    for (url, why) in [
        ("child.yaml", "does not exist"),
        ("file://child.yaml", "does not exist"),
        ("folder", "is not a file"),
        ("", "names no file"),
        ("file://", "names no file"),
    ] {
        let error = refused(&parent, url);
        assert!(error.starts_with(&format!("TemplateURL \"{url}\"")), "{error}");
        assert!(error.contains(why), "{url}: {error}");
        assert!(error.contains("play reads a nested stack's template from a local file only"), "{error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn another_scheme_or_a_url_not_on_s3_is_refused_by_name() {
    let dir = folder("scheme", &[("parent.yaml", ""), ("child.json", ""), ("c.assets.json", &manifest())]);
    let parent = dir.join("parent.yaml");
    for (url, why) in [
        (format!("s3://{BUCKET}/{HASH}.json"), "is a s3:// URL"),
        (format!("http://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.json"), "is a http:// URL"),
        ("ftp://example.com/child.json".to_string(), "is a ftp:// URL"),
        (format!("https://example.com/{BUCKET}/{HASH}.json"), "is not an Amazon S3 URL"),
        (format!("https://s3.us-east-2.amazonaws.com.cn/{BUCKET}/{HASH}.json"), "is not an Amazon S3 URL"),
        (format!("https://s3.us-east-2.amazonaws.com/{BUCKET}"), "is not an Amazon S3 URL"),
        (format!("https://{BUCKET}.s3-website-us-east-2.amazonaws.com/{HASH}.json"), "is not an Amazon S3 URL"),
        (format!("https://{BUCKET}.s3-website.us-east-2.amazonaws.com/{HASH}.json"), "is not an Amazon S3 URL"),
    ] {
        let error = refused(&parent, &url);
        assert!(error.starts_with(&format!("TemplateURL \"{url}\" {why}")), "{error}");
        assert!(error.ends_with("a CDK *.assets.json beside the parent template names)"), "{error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_s3_url_a_cdk_asset_manifest_names_is_that_assets_file_in_every_s3_url_form() {
    let dir = folder("asset", &[("parent.yaml", ""), ("child.json", "{}"), ("Stack.assets.json", &manifest())]);
    let parent = dir.join("parent.yaml");
    let how = format!(
        "{}, the file asset {HASH} that {} names",
        dir.join("child.json").display(),
        dir.join("Stack.assets.json").display()
    );
    for url in [
        format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.json"),
        format!("https://s3-us-east-2.amazonaws.com/{BUCKET}/{HASH}.json"),
        format!("https://s3.amazonaws.com/{BUCKET}/{HASH}.json"),
        format!("https://{BUCKET}.s3.us-east-2.amazonaws.com/{HASH}.json"),
        format!("https://{BUCKET}.s3-us-east-2.amazonaws.com/{HASH}.json"),
        format!("https://{BUCKET}.s3.amazonaws.com/{HASH}.json?versionId=3"),
        format!("HTTPS://S3.US-EAST-2.AMAZONAWS.COM/{BUCKET}/{HASH}.json"),
    ] {
        let found = locate(&parent, &url, REGION, ACCOUNT).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(found, Located { path: dir.join("child.json"), how: how.clone() }, "{url}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_s3_url_for_another_account_region_bucket_or_key_is_refused() {
    let dir = folder("mismatch", &[("parent.yaml", ""), ("child.json", "{}"), ("Stack.assets.json", &manifest())]);
    let parent = dir.join("parent.yaml");
    let url = format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.json");
    for (account, region) in [("111111111111", REGION), (ACCOUNT, "eu-west-1")] {
        let error = locate(&parent, &url, region, account).expect_err(account);
        assert!(error.contains(&format!("for account {account} and region {region}")), "{error}");
    }
    let other = "cdk-hnb659fds-assets-111111111111-us-east-2";
    for url in [
        format!("https://s3.us-east-2.amazonaws.com/{other}/{HASH}.json"),
        format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.yaml"),
        format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/prefix/{HASH}.json"),
    ] {
        let error = refused(&parent, &url);
        assert!(error.starts_with(&format!("TemplateURL \"{url}\" (bucket ")), "{error}");
        assert!(error.contains("is the destination of no file asset of"), "{error}");
        assert!(error.contains("Stack.assets.json"), "{error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_s3_url_is_refused_without_a_manifest_or_when_its_asset_is_no_template_file() {
    let dir = folder("no-manifest", &[("parent.yaml", ""), ("child.json", "{}")]);
    let url = format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.json");
    let error = refused(&dir.join("parent.yaml"), &url);
    assert!(error.contains(&format!("{} holds no *.assets.json", dir.display())), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
    let dir = folder("not-template", &[("parent.yaml", ""), ("Stack.assets.json", &manifest())]);
    let parent = dir.join("parent.yaml");
    for (key, why) in [
        ("c0de.zip", "packaged as zip (a directory), not a template"),
        ("9005.json", "gone.json is not a file here"),
        (&format!("{HASH}.json"), "child.json is not a file here"),
    ] {
        let error = refused(&parent, &format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{key}"));
        assert!(error.contains("is file asset"), "{error}");
        assert!(error.contains(why), "{key}: {error}");
    }
    // A parent named with no directory: the manifests are looked for in the current one (the
    // crate's, which holds none).
    let error = refused(Path::new("parent.yaml"), &format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.json"));
    assert!(error.contains(" and . holds no *.assets.json"), "{error}");
    std::fs::write(dir.join("Broken.assets.json"), "{").unwrap();
    let error = refused(&parent, &format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/{HASH}.json"));
    assert!(error.contains("Broken.assets.json is not an asset manifest"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

struct Nothing;

impl Resources for Nothing {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        Err(format!("{logical_id} is not known here"))
    }
    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        Err(format!("{logical_id}.{attribute} is not known here"))
    }
}

#[test]
fn the_checked_in_cdk_provider_stacks_template_url_is_its_nested_template_through_its_manifest() {
    let cdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/play/cdk");
    let parent = cdk.join("CdkProviderStack.template.json");
    let template = Template::load(&parent).unwrap_or_else(|e| panic!("{e}"));
    let nested = "ProviderStackNestedStackProviderStackNestedStackResource4CA0AF4D";
    let parameters = template.bind_parameters(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let pseudo = Pseudo::for_tests(REGION, "CdkProviderStack");
    let scope = Scope { parameters: &parameters, pseudo: &pseudo, conditions: &BTreeMap::new(), resources: &Nothing };
    let properties = evaluate(&template.resource(nested).expect("the nested stack").properties, &scope)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("properties");
    let url = properties["TemplateURL"].as_str().expect("a TemplateURL");
    assert!(url.starts_with(&format!("https://s3.us-east-2.amazonaws.com/{BUCKET}/")), "{url}");
    let found = locate(&parent, url, REGION, ACCOUNT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(found.path, cdk.join("CdkProviderStack51805E60.nested.template.json"));
    assert!(found.how.contains("CdkProviderStack.assets.json") && found.how.contains("file asset "), "{}", found.how);
    Template::load(&found.path).unwrap_or_else(|e| panic!("{e}"));
    // Another account's stack would read another bucket, which the manifest does not publish to.
    assert!(locate(&parent, url, REGION, "111111111111").is_err());
}
