//! `cfn-once check --env` on a local environment provisioned as `cfn-once local` provisions it:
//! healthy, it passes; then eight miswirings are planted one at a time, each undone before the
//! next (or planted last), and each is named by its item and only by it, with exit status 1;
//! then an environment naming a lease table nobody created has that item UNREADABLE, and fails.
//! The binary is run as an operator runs it; its output is printed (`--nocapture` shows it).

use std::path::{Path, PathBuf};
use std::process::Command;

use aws_sdk_sqs::types::QueueAttributeName;
use cfn_once::adapters::control_table::TableControl;
use cfn_once_local::environment::{EnvFile, EnvironmentOptions, LocalEnvironment};
use cfn_once_local::provision;

/// `cfn-once` in the same target directory as this test binary.
fn cfn_once_binary() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("cfn-once{}", std::env::consts::EXE_SUFFIX))
}

/// What one run of `cfn-once check --env <file>` said: its exit success and the items it calls
/// MISWIRED and UNREADABLE, by name.
struct Said {
    passed: bool,
    miswired: Vec<String>,
    unreadable: Vec<String>,
}

/// Runs `cfn-once check --env <file>`.
fn check(env_file: &Path, label: &str) -> Said {
    let output = Command::new(cfn_once_binary())
        .args(["check", "--env"])
        .arg(env_file)
        .output()
        .expect("cfn-once runs (build it: cargo build --workspace --bins)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("--- {label}: exit {}\n{stdout}{}", output.status, String::from_utf8_lossy(&output.stderr));
    let items = |status: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|line| line.strip_prefix(status))
            .map(|rest| rest.trim_start().split(": ").next().unwrap_or_default().to_owned())
            .collect()
    };
    Said { passed: output.status.success(), miswired: items("MISWIRED"), unreadable: items("UNREADABLE") }
}

/// Asserts `cfn-once check` fails naming exactly `item`.
fn named(env_file: &Path, label: &str, item: &str) {
    let said = check(env_file, label);
    assert!(!said.passed, "{label}: check passed");
    assert_eq!(said.miswired, [item], "{label}");
    assert!(said.unreadable.is_empty(), "{label}: {:?}", said.unreadable);
}

fn write(env: &EnvFile, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    env.write(&path).expect("env file written");
    path
}

#[tokio::test]
async fn check_passes_a_healthy_environment_and_names_each_planted_miswiring() {
    let name = cfn_once_tests::unique("check").to_lowercase();
    let options = EnvironmentOptions::local(name.clone(), 5);
    let env = LocalEnvironment::provision(cfn_once_tests::moto(), cfn_once_tests::moto_front(), &options)
        .await
        .expect("provisioned");
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).expect("scratch");
    let file = write(&env.file, &dir, "env.json");
    let healthy = check(&file, "healthy");
    assert!(
        healthy.passed && healthy.miswired.is_empty() && healthy.unreadable.is_empty(),
        "a healthy environment passes: {:?} {:?}",
        healthy.miswired,
        healthy.unreadable
    );

    let primary_sqs = aws_sdk_sqs::Client::new(&env.sdk(&env.file.primary_region).await);
    let secondary_sqs = aws_sdk_sqs::Client::new(&env.sdk(&env.file.secondary_region).await);
    let customer = env.file.customer_region.clone();
    let topic = env.file.topic_arn.clone();
    let sns = aws_sdk_sns::Client::new(&env.sdk(&customer).await);
    let set = |sqs: &aws_sdk_sqs::Client, url: &str, attribute: QueueAttributeName, value: String| {
        let call = sqs.set_queue_attributes().queue_url(url).attributes(attribute, value);
        async move { call.send().await.expect("SetQueueAttributes") }
    };

    // 1. The secondary queue unsubscribed from the first customer topic.
    let subscriptions = sns.list_subscriptions_by_topic().topic_arn(&topic).send().await.expect("listed");
    let secondary = subscriptions
        .subscriptions()
        .iter()
        .find(|s| s.endpoint() == Some(env.secondary_queues.arn.as_str()))
        .and_then(|s| s.subscription_arn())
        .expect("the secondary's subscription")
        .to_owned();
    sns.unsubscribe().subscription_arn(&secondary).send().await.expect("unsubscribed");
    named(&file, "1. secondary queue unsubscribed", &format!("topic {topic}"));
    provision::subscribe_queue(&sns, &topic, &env.secondary_queues.arn, false, None).await.expect("resubscribed");

    // 2. The secondary queue without its delay.
    set(&secondary_sqs, &env.secondary_queues.url, QueueAttributeName::DelaySeconds, "0".into()).await;
    named(&file, "2. secondary DelaySeconds 0", "secondary queue delay");
    set(&secondary_sqs, &env.secondary_queues.url, QueueAttributeName::DelaySeconds, "5".into()).await;

    // 3. The primary queue without its redrive policy.
    let redrive = serde_json::json!({"deadLetterTargetArn": env.primary_queues.dlq_arn, "maxReceiveCount": options.max_receive_count.to_string()});
    set(&primary_sqs, &env.primary_queues.url, QueueAttributeName::RedrivePolicy, String::new()).await;
    named(&file, "3. primary redrive policy removed", "primary queue redrive");
    set(&primary_sqs, &env.primary_queues.url, QueueAttributeName::RedrivePolicy, redrive.to_string()).await;

    // 4. The primary's visibility timeout below the function's timeout.
    set(&primary_sqs, &env.primary_queues.url, QueueAttributeName::VisibilityTimeout, "30".into()).await;
    named(&file, "4. primary visibility 30 s", "primary queue visibility");
    let visibility = options.visibility_timeout_s.to_string();
    set(&primary_sqs, &env.primary_queues.url, QueueAttributeName::VisibilityTimeout, visibility).await;

    // 5. The active region flipped to the secondary and left there.
    let dynamodb = aws_sdk_dynamodb::Client::new(&env.sdk(&env.file.primary_region).await);
    let control = TableControl::new(dynamodb.clone(), &env.file.table_name, &env.file.primary_region);
    control.set_active_region(&env.file.secondary_region, 0, "check test").await.expect("flipped");
    named(&file, "5. control#active names the secondary", "active region");
    control.set_active_region(&env.file.primary_region, 0, "check test").await.expect("flipped back");

    // 6. A topic in the handlers' list that nothing subscribed.
    let lonely_sns = aws_sdk_sns::Client::new(&env.sdk("ap-southeast-2").await);
    let lonely = provision::create_topic(&lonely_sns, &format!("{name}-service-token")).await.expect("topic");
    let mut with_lonely = env.file.clone();
    with_lonely.customer_topics.insert("ap-southeast-2".into(), lonely.clone());
    let lonely_file = write(&with_lonely, &dir, "env-lonely.json");
    named(&lonely_file, "6. a customer topic subscribed to nothing", &format!("topic {lonely}"));

    // 7. A topic feeding the primary queue that the handlers do not accept.
    let stray = provision::create_topic(&sns, &format!("{name}-stray")).await.expect("topic");
    provision::subscribe_queue(&sns, &stray, &env.primary_queues.arn, false, None).await.expect("subscribed");
    named(&file, "7. a stray topic feeds the primary queue", "ServiceTopicArns");
    let stray_subscriptions = sns.list_subscriptions_by_topic().topic_arn(&stray).send().await.expect("listed");
    for subscription in stray_subscriptions.subscriptions() {
        let arn = subscription.subscription_arn().expect("an ARN");
        sns.unsubscribe().subscription_arn(arn).send().await.expect("unsubscribed");
    }

    // Undone, every planting: healthy again.
    let undone = check(&file, "all undone");
    assert!(undone.passed && undone.miswired.is_empty(), "undone: {:?}", undone.miswired);

    // 9. A lease table nobody created: unreadable, which fails the check as a miswiring does.
    let mut tableless = env.file.clone();
    tableless.table_name = format!("{name}-no-such-table");
    let tableless_file = write(&tableless, &dir, "env-tableless.json");
    let said = check(&tableless_file, "9. a lease table that does not exist");
    assert!(!said.passed, "9.: check passed on an unreadable table");
    let table_item = format!("lease table {}", tableless.table_name);
    assert!(said.unreadable.contains(&table_item), "9.: {table_item} is not UNREADABLE: {:?}", said.unreadable);

    // 8. The secondary's DLQ deleted (planted last: SQS lets a name be reused only after 60 s).
    secondary_sqs.delete_queue().queue_url(&env.secondary_queues.dlq_url).send().await.expect("deleted");
    named(&file, "8. secondary DLQ deleted", "secondary queue redrive");

    let _ = std::fs::remove_dir_all(&dir);
}
