//! `cfn-once deploy`: the facts it refuses are the ones the templates refuse (their own rules,
//! evaluated for every combination of regions), the configuration it writes deploys what the
//! templates accept with parameters they declare and `sam validate --lint` passes, and it runs
//! the stacks in order, each to its end, stopping at the first failure (a fake `sam` on the
//! venv's PATH records every call).

use std::path::{Path, PathBuf};
use std::process::Command;

use cfn_once_ops::deploy::{Facts, SNS_OPT_IN_REGIONS, samconfig};
use serde_json::Value;

use crate::rules::{ACCOUNT, Stack, template};

/// The README's layout.
fn readme() -> Facts {
    let mut facts =
        Facts::new(ACCOUNT, "us-east-1", "us-west-2", "us-east-2", &["us-east-2", "eu-west-1", "ap-southeast-2"]);
    facts.alarm_email = Some("oncall@example.com".into());
    facts.operator_role_arn = Some(format!("arn:aws:iam::{ACCOUNT}:role/cfn-once-operator"));
    facts.examples = true;
    facts
}

/// Every region the tests know: the MRSC sets' and others, SNS opt-in regions among them.
const REGIONS: [&str; 16] = [
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ca-central-1",
    "ap-southeast-2",
    "eu-north-1",
    "me-south-1",
    "af-south-1",
    "us-west-1",
];

/// For every primary, secondary and witness, deploy refuses exactly when the lease table's
/// rules (OneMrscRegionSet, ThreeDistinctRegions) or the regional and arc stacks' would.
#[test]
fn deploy_refuses_the_region_sets_the_templates_refuse() {
    let lease_table = template("lease-table.yaml");
    let regional = template("regional.yaml");
    let arc = template("arc.yaml");
    let paged = ("AlarmEmail", "oncall@example.com");
    for primary in REGIONS {
        for secondary in REGIONS {
            for witness in REGIONS {
                let mut facts = readme();
                (facts.primary, facts.secondary, facts.witness) = (primary.into(), secondary.into(), witness.into());
                facts.customer_regions = vec!["us-east-1".into()];
                let refused = !facts.refusals().is_empty();
                let parameters = [("ReplicaRegion", secondary), ("WitnessRegion", witness), paged];
                let mut templates_refuse = !Stack::new(&lease_table, primary, &parameters).refusals().is_empty();
                for region in [primary, secondary] {
                    templates_refuse |=
                        !Stack::new(&regional, region, &[("Role", "primary"), paged]).refusals().is_empty();
                }
                let handlers = [("PrimaryRegion", primary), ("SecondaryRegion", secondary)];
                templates_refuse |= !Stack::new(&arc, "us-west-2", &handlers).refusals().is_empty();
                assert_eq!(
                    refused,
                    templates_refuse,
                    "{primary} + {secondary}, witness {witness}: {:?}",
                    facts.refusals()
                );
            }
        }
    }
}

/// For every customer region, deploy refuses exactly when infra/customer.yaml's rule would,
/// for each MRSC handler pair; and its opt-in list is the template's.
#[test]
fn deploy_refuses_the_customer_regions_the_customer_stack_refuses() {
    let customer = template("customer.yaml");
    let listed: Vec<&str> = customer["Mappings"]["Sns"]["OptInRegions"]["Regions"]
        .as_array()
        .expect("the opt-in list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(listed, SNS_OPT_IN_REGIONS, "one list of SNS opt-in regions");
    for (primary, secondary, witness) in
        [("us-east-1", "us-west-2", "us-east-2"), ("ap-northeast-3", "ap-northeast-1", "ap-northeast-2")]
    {
        for region in REGIONS.into_iter().chain(SNS_OPT_IN_REGIONS) {
            let mut facts = readme();
            (facts.primary, facts.secondary, facts.witness) = (primary.into(), secondary.into(), witness.into());
            facts.customer_regions = vec![region.into()];
            let parameters = [("PrimaryRegion", primary), ("SecondaryRegion", secondary), ("AlarmEmail", "a@b")];
            let template_refuses = !Stack::new(&customer, region, &parameters).refusals().is_empty();
            assert_eq!(!facts.refusals().is_empty(), template_refuses, "{region} for {primary}/{secondary}");
        }
    }
}

/// The configuration's environments: each deploys a stack its template's rules accept, with
/// parameters the template declares (within their AllowedValues and bounds); the account is the
/// facts' and no other; the regional stacks agree on the delay and admit every customer topic.
#[test]
fn the_written_configuration_deploys_what_the_templates_accept() {
    let mut facts = readme();
    facts.secondary_delay_s = 9;
    let environments = samconfig::environments(&facts);
    let names: Vec<&str> = environments.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lease-table",
            "primary",
            "secondary",
            "customer-us-east-2",
            "customer-eu-west-1",
            "customer-ap-southeast-2",
            "example",
            "long-work"
        ]
    );
    for environment in &environments {
        let template = template(environment.template.trim_start_matches("infra/"));
        for (key, value) in &environment.parameters {
            let declared = &template["Parameters"][key];
            assert!(declared.is_object(), "{}: {key} is no parameter of {}", environment.name, environment.template);
            if let Some(allowed) = declared["AllowedValues"].as_array() {
                assert!(allowed.iter().any(|a| a == value), "{}: {key}={value} not in {allowed:?}", environment.name);
            }
            if let (Some(min), Ok(number)) = (declared["MinValue"].as_u64(), value.parse::<u64>()) {
                assert!(number >= min && number <= declared["MaxValue"].as_u64().unwrap_or(u64::MAX), "{key}={value}");
            }
            for account in value.split(':').filter(|part| part.len() == 12 && part.bytes().all(|b| b.is_ascii_digit()))
            {
                assert_eq!(account, ACCOUNT, "{}: {key} names another account", environment.name);
            }
        }
        let parameters: Vec<(&str, &str)> =
            environment.parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let refusals = Stack::new(&template, &environment.region, &parameters).refusals();
        assert_eq!(refusals, [], "{} in {}", environment.name, environment.region);
    }
    let parameter = |name: &str, key: &str| {
        let environment = environments.iter().find(|e| e.name == name).expect("environment");
        environment.parameters.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    assert_eq!(parameter("primary", "SecondaryDelaySeconds"), Some("9".into()));
    assert_eq!(parameter("secondary", "SecondaryDelaySeconds"), parameter("primary", "SecondaryDelaySeconds"));
    let topics = facts.topic_arns().join(",");
    assert_eq!(topics.matches("arn:aws:sns:").count(), 3);
    for regional in ["primary", "secondary"] {
        assert_eq!(parameter(regional, "ServiceTopicArns"), Some(topics.clone()), "{regional}");
    }
    assert_eq!(parameter("example", "ServiceToken"), Some(facts.topic_arn("us-east-2")));
}

/// The venv of the Python moto runs on (CFN_ONCE_PYTHON), which holds sam.
fn venv_bin() -> PathBuf {
    cfn_once_tests::python().parent().expect("the venv's bin").to_path_buf()
}

fn cfn_once_binary() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("cfn-once{}", std::env::consts::EXE_SUFFIX))
}

const README_FLAGS: [&str; 16] = [
    "--account",
    ACCOUNT,
    "--primary",
    "us-east-1",
    "--secondary",
    "us-west-2",
    "--witness",
    "us-east-2",
    "--customer-regions",
    "us-east-2,eu-west-1,ap-southeast-2",
    "--alarm-email",
    "oncall@example.com",
    "--operator-role-arn",
    "arn:aws:iam::111122223333:role/cfn-once-operator",
    "--examples",
    "--yes",
];

fn deploy(out: &str, venv: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(cfn_once_binary())
        .arg("deploy")
        .args(README_FLAGS)
        .args(["--out", out, "--venv"])
        .arg(venv)
        .args(extra)
        .current_dir(cfn_once_tests::workspace_root())
        .output()
        .expect("cfn-once runs (build it: cargo build --workspace --bins)")
}

/// `sam validate --lint` of every environment of the written configuration, as `sam validate
/// --config-file F --config-env E` reads it (the environment's template and region).
#[test]
fn sam_validate_lints_every_environment_of_the_written_configuration() {
    let out = format!("target/{}.toml", cfn_once_tests::unique("samconfig-validate"));
    let output = deploy(&out, &venv_bin().join(".."), &["--dry-run"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let environments = samconfig::environments(&readme());
    let root = cfn_once_tests::workspace_root();
    std::thread::scope(|scope| {
        for chunk in environments.chunks(2) {
            let (out, root) = (&out, &root);
            scope.spawn(move || {
                for environment in chunk {
                    let result = Command::new(venv_bin().join("sam"))
                        .args(["validate", "--config-file", out, "--config-env", &environment.name])
                        .env("SAM_CLI_TELEMETRY", "0")
                        .env("PATH", format!("{}:{}", venv_bin().display(), std::env::var("PATH").unwrap_or_default()))
                        .current_dir(root)
                        .output()
                        .expect("sam runs");
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&result.stdout),
                        String::from_utf8_lossy(&result.stderr)
                    );
                    println!("sam validate --config-env {}: {}", environment.name, text.trim());
                    assert!(
                        result.status.success() && text.contains("is a valid SAM Template"),
                        "{}: {text}",
                        environment.name
                    );
                }
            });
        }
    });
    let _ = std::fs::remove_file(root.join(out));
}

/// A venv whose `sam` and `cargo` record each call, in order, and fail when their arguments
/// name `fail_on`; `cargo-lambda` is there so that deploy finds its tools.
fn fake_venv(dir: &Path, fail_on: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let log = dir.join("calls.log");
    for tool in ["sam", "cargo", "cargo-lambda"] {
        let script = format!(
            "#!/bin/sh\necho \"{tool} $*\" >> '{}'\nsleep 0.2\necho \"{tool} $* done\" >> '{}'\ncase \"$*\" in *'{fail_on}'*) exit 1;; esac\nexit 0\n",
            log.display(),
            log.display()
        );
        let path = bin.join(tool);
        std::fs::write(&path, script).expect("script");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    log
}

/// Every call is made after the one before it ended (its `done` line comes first), in the plan's
/// order; a failing `sam deploy` stops the rest and says what to do.
#[test]
fn deploy_runs_each_stack_to_its_end_in_order_and_stops_at_the_first_failure() {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("fake-venv"));
    let out = format!("target/{}.toml", cfn_once_tests::unique("samconfig-run"));
    let log = fake_venv(&dir, "NO-SUCH-ENVIRONMENT");
    let output = deploy(&out, &dir, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "every fake call succeeds");
    let calls = std::fs::read_to_string(&log).expect("calls");
    let expected: Vec<String> = [
        "cargo fetch --locked".to_owned(),
        format!("sam build --config-file {out} --config-env lease-table"),
        format!("sam build --config-file {out} --config-env primary"),
    ]
    .into_iter()
    .chain(
        [
            "lease-table",
            "primary",
            "secondary",
            "customer-us-east-2",
            "customer-eu-west-1",
            "customer-ap-southeast-2",
            "example",
            "long-work",
        ]
        .map(|e| format!("sam deploy --config-file {out} --config-env {e} --no-confirm-changeset")),
    )
    .flat_map(|call| [call.clone(), format!("{call} done")])
    .collect();
    assert_eq!(calls.lines().collect::<Vec<_>>(), expected, "each call waited for, in order");

    // The secondary fails: nothing after it runs.
    std::fs::remove_file(&log).expect("reset");
    let log = fake_venv(&dir, "--config-env secondary");
    let output = deploy(&out, &dir, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stderr}");
    assert!(!output.status.success(), "a failed stack fails the deploy");
    let calls = std::fs::read_to_string(&log).expect("calls");
    let last = calls.lines().last().expect("calls");
    assert_eq!(last, format!("sam deploy --config-file {out} --config-env secondary --no-confirm-changeset done"));
    assert!(!calls.contains("customer-"), "no customer stack after the failure:\n{calls}");
    assert!(stderr.contains("cfn-once-secondary in us-west-2 did not deploy"), "{stderr}");
    assert!(stderr.contains("Not run: cfn-once-customer (us-east-2)"), "{stderr}");

    // Refused facts: nothing is written or run.
    std::fs::remove_file(&log).expect("reset");
    let mut flags = README_FLAGS.map(str::to_owned);
    flags[7] = "eu-west-1".into();
    assert_eq!(flags[6], "--witness");
    let output = Command::new(cfn_once_binary())
        .arg("deploy")
        .args(&flags)
        .args(["--out", "target/never-written.toml", "--venv"])
        .arg(&dir)
        .current_dir(cfn_once_tests::workspace_root())
        .output()
        .expect("cfn-once runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("one MRSC region set"), "{stderr}");
    assert!(!log.exists(), "nothing ran");
    assert!(!cfn_once_tests::workspace_root().join("target/never-written.toml").exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(cfn_once_tests::workspace_root().join(out));
}
