//! Reading what `cfn-once check` judges: each queue's attributes and its DLQ, the customer
//! regions' subscriptions, the lease table's description and control item, and what each
//! function is told (Lambda's GetFunctionConfiguration when deployed, the env file locally).
//! Read-only calls with the operator's credentials: sqs:GetQueueAttributes, sqs:GetQueueUrl,
//! sns:GetTopicAttributes, sns:ListSubscriptions, sns:GetSubscriptionAttributes,
//! dynamodb:DescribeTable, dynamodb:GetItem, lambda:GetFunctionConfiguration.

use std::collections::HashMap;

use aws_config::SdkConfig;
use aws_sdk_sqs::types::QueueAttributeName;
use cfn_once::adapters::control_table::TableControl;
use serde_json::Value;

use super::{Expected, HandlerSeen, Observed, QueueSeen, RedriveSeen, Report, SubscriptionSeen, TableSeen, judge};
use crate::deploy::Facts;
use crate::env_file::{EnvFile, HandlerSettings};

/// Where to look and what to expect.
#[derive(Debug, Clone)]
pub struct CheckTarget {
    pub expected: Expected,
    /// What the report says it checked.
    pub description: String,
    pub endpoint_url: Option<String>,
    pub profile: Option<String>,
    /// The primary's and the secondary's queue URLs.
    pub queue_urls: [String; 2],
    /// Deployed: each region's function (`<Installation>-<role>`), whose configuration is read.
    pub function_names: Option<[String; 2]>,
    /// Locally: what `cfn-once local` told both handlers.
    pub local_handler: Option<HandlerSettings>,
    /// The local handlers' topics.
    pub local_topics: Vec<String>,
}

impl CheckTarget {
    /// The local environment an env file describes.
    pub fn from_env_file(env: &EnvFile, path: &str) -> Self {
        Self {
            expected: Expected {
                on_aws: false,
                primary_region: env.primary_region.clone(),
                secondary_region: env.secondary_region.clone(),
                witness_region: None,
                table: env.table_name.clone(),
                topics: env.customer_topics.iter().map(|(r, t)| (r.clone(), t.clone())).collect(),
            },
            description: format!("the local environment of {path}"),
            endpoint_url: Some(env.endpoint_url.clone()),
            profile: None,
            queue_urls: [env.queues.primary.clone(), env.queues.secondary.clone()],
            function_names: None,
            local_handler: env.handler.clone(),
            local_topics: env.topic_arns(),
        }
    }

    /// The deployment `facts` describe (as `cfn-once deploy` deployed it).
    pub fn from_facts(facts: &Facts, profile: Option<String>, endpoint_url: Option<String>) -> Self {
        Self {
            expected: Expected {
                on_aws: endpoint_url.is_none(),
                primary_region: facts.primary.clone(),
                secondary_region: facts.secondary.clone(),
                witness_region: Some(facts.witness.clone()),
                table: facts.table.clone(),
                topics: facts.customer_regions.iter().map(|r| (r.clone(), facts.topic_arn(r))).collect(),
            },
            description: format!(
                "account {}: primary {}, secondary {}, witness {}, customer regions {}",
                facts.account,
                facts.primary,
                facts.secondary,
                facts.witness,
                facts.customer_regions.join(", ")
            ),
            endpoint_url,
            profile,
            queue_urls: [facts.queue_url("primary"), facts.queue_url("secondary")],
            function_names: Some(["primary", "secondary"].map(|role| format!("{}-{role}", facts.installation))),
            local_handler: None,
            local_topics: Vec::new(),
        }
    }

    async fn sdk(&self, region: &str) -> SdkConfig {
        crate::aws::sdk_for(self.endpoint_url.as_deref(), self.profile.as_deref(), region).await
    }

    /// Why no AWS call can succeed, if the credentials cannot be loaded: one sentence instead
    /// of the same failure on every item. None for a local endpoint, which takes any.
    pub async fn credentials_problem(&self) -> Option<String> {
        use aws_sdk_sqs::config::ProvideCredentials;
        if self.endpoint_url.is_some() {
            return None;
        }
        let sdk = self.sdk(&self.expected.primary_region).await;
        let Some(provider) = sdk.credentials_provider() else {
            return Some("no AWS credentials provider is configured".into());
        };
        let profile = self.profile.as_deref().map(|p| format!(" (profile {p})")).unwrap_or_default();
        provider.provide_credentials().await.err().map(|error| {
            format!(
                "no AWS credentials could be loaded{profile}: {error}; give --profile, or set AWS_PROFILE or \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, as for the AWS CLI"
            )
        })
    }

    fn regions(&self) -> [&str; 2] {
        [&self.expected.primary_region, &self.expected.secondary_region]
    }
}

/// Reads everything and judges it.
pub async fn check(target: &CheckTarget) -> Report {
    let mut queues = Vec::new();
    let mut handlers = Vec::new();
    for (index, region) in target.regions().into_iter().enumerate() {
        let sdk = target.sdk(region).await;
        queues.push(queue(&aws_sdk_sqs::Client::new(&sdk), &target.queue_urls[index]).await);
        handlers.push(match (&target.function_names, &target.local_handler) {
            (Some(names), _) => function(&aws_sdk_lambda::Client::new(&sdk), &names[index]).await,
            (None, Some(settings)) => Ok(HandlerSeen {
                timeout_s: settings.function_timeout_s,
                secondary_delay_s: Some(settings.secondary_delay_s),
                visibility_timeout_s: Some(settings.visibility_timeout_s),
                max_receive_count: Some(settings.max_receive_count),
                raw_delivery: settings.raw_delivery,
                topic_arns: target.local_topics.clone(),
            }),
            (None, None) => Err("the env file has no handler settings (written by an older cfn-once local)".into()),
        });
    }
    let queue_arns: Vec<String> = queues.iter().filter_map(|q| q.as_ref().ok().map(|q| q.arn.clone())).collect();
    let mut topics_unreadable = Vec::new();
    let mut subscriptions = Vec::new();
    let mut regions: Vec<&str> = target.expected.topics.iter().map(|(region, _)| region.as_str()).collect();
    regions.dedup();
    for region in regions {
        let sns = aws_sdk_sns::Client::new(&target.sdk(region).await);
        for (_, topic) in target.expected.topics.iter().filter(|(r, _)| r == region) {
            if let Err(error) = sns.get_topic_attributes().topic_arn(topic).send().await {
                topics_unreadable.push((topic.clone(), aws_sdk_sns::error::DisplayErrorContext(&error).to_string()));
            }
        }
        let wanted: Vec<&str> = target.expected.topics.iter().map(|(_, t)| t.as_str()).collect();
        match region_subscriptions(&sns, &wanted, &queue_arns).await {
            Ok(found) => subscriptions.extend(found),
            Err(error) => topics_unreadable.extend(
                target.expected.topics.iter().filter(|(r, _)| r == region).map(|(_, t)| (t.clone(), error.clone())),
            ),
        }
    }
    let dynamodb = aws_sdk_dynamodb::Client::new(&target.sdk(&target.expected.primary_region).await);
    let table = table(&dynamodb, &target.expected.table).await;
    let control = TableControl::new(dynamodb, &target.expected.table, &target.expected.primary_region)
        .active_region()
        .await
        .map_err(|error| error.0);
    let [primary_queue, secondary_queue]: [_; 2] = queues.try_into().expect("two regions");
    let [primary_handler, secondary_handler]: [_; 2] = handlers.try_into().expect("two regions");
    let observed = Observed {
        queues: [primary_queue, secondary_queue],
        handlers: [primary_handler, secondary_handler],
        topics_unreadable,
        subscriptions,
        table,
        control,
    };
    Report { target: target.description.clone(), items: judge(&target.expected, &observed) }
}

async fn queue(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<QueueSeen, String> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| format!("GetQueueAttributes on {url}: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?
        .attributes
        .unwrap_or_default();
    let number = |name: QueueAttributeName| attributes.get(&name).and_then(|v| v.parse().ok());
    let redrive = match attributes.get(&QueueAttributeName::RedrivePolicy).filter(|p| !p.is_empty()) {
        None => None,
        Some(policy) => {
            let policy: Value = serde_json::from_str(policy).map_err(|e| format!("RedrivePolicy {policy:?}: {e}"))?;
            let dlq_arn = policy.get("deadLetterTargetArn").and_then(Value::as_str).unwrap_or_default().to_owned();
            // SQS writes the count as a number; an older queue may hold it as a string.
            let max_receive_count = match policy.get("maxReceiveCount") {
                Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
                Some(Value::String(s)) => s.parse().ok(),
                _ => None,
            };
            let dlq_exists = match cfn_once::adapters::sqs_queue::parse_queue_arn(&dlq_arn) {
                Some((account, name)) => {
                    sqs.get_queue_url().queue_name(name).queue_owner_aws_account_id(account).send().await.is_ok()
                }
                None => false,
            };
            Some(RedriveSeen { dlq_arn, max_receive_count, dlq_exists })
        }
    };
    Ok(QueueSeen {
        arn: attributes.get(&QueueAttributeName::QueueArn).cloned().unwrap_or_default(),
        delay_s: number(QueueAttributeName::DelaySeconds),
        visibility_s: number(QueueAttributeName::VisibilityTimeout),
        redrive,
    })
}

async fn function(lambda: &aws_sdk_lambda::Client, name: &str) -> Result<HandlerSeen, String> {
    let configuration =
        lambda.get_function_configuration().function_name(name).send().await.map_err(|e| {
            format!("GetFunctionConfiguration {name}: {}", aws_sdk_lambda::error::DisplayErrorContext(&e))
        })?;
    let variables: HashMap<String, String> = configuration.environment.and_then(|e| e.variables).unwrap_or_default();
    let number = |name: &str| variables.get(name).and_then(|v| v.parse().ok());
    Ok(HandlerSeen {
        timeout_s: configuration.timeout.and_then(|t| u32::try_from(t).ok()).unwrap_or_default(),
        secondary_delay_s: number("CFN_ONCE_SECONDARY_DELAY_S"),
        visibility_timeout_s: number("CFN_ONCE_VISIBILITY_TIMEOUT_S"),
        max_receive_count: number("CFN_ONCE_MAX_RECEIVE_COUNT"),
        raw_delivery: variables.get("CFN_ONCE_RAW_DELIVERY").is_some_and(|v| v == "true"),
        topic_arns: variables
            .get("CFN_ONCE_TOPIC_ARNS")
            .map(|v| v.split(',').filter(|t| !t.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default(),
    })
}

/// The region's SQS subscriptions of `topics`, and of any topic to `queue_arns`.
async fn region_subscriptions(
    sns: &aws_sdk_sns::Client,
    topics: &[&str],
    queue_arns: &[String],
) -> Result<Vec<SubscriptionSeen>, String> {
    let mut found = Vec::new();
    let mut next_token = None;
    // ListSubscriptions returns up to 100 a page; a bounded walk (10,000 subscriptions).
    for _page in 0..100 {
        let page = sns
            .list_subscriptions()
            .set_next_token(next_token.take())
            .send()
            .await
            .map_err(|e| format!("ListSubscriptions: {}", aws_sdk_sns::error::DisplayErrorContext(&e)))?;
        for subscription in page.subscriptions.unwrap_or_default() {
            let (Some(topic), Some(endpoint), Some(arn)) =
                (subscription.topic_arn, subscription.endpoint, subscription.subscription_arn)
            else {
                continue;
            };
            let ours = topics.contains(&topic.as_str()) || queue_arns.contains(&endpoint);
            if subscription.protocol.as_deref() != Some("sqs") || !ours {
                continue;
            }
            let attributes = sns
                .get_subscription_attributes()
                .subscription_arn(&arn)
                .send()
                .await
                .map_err(|e| {
                    format!("GetSubscriptionAttributes {arn}: {}", aws_sdk_sns::error::DisplayErrorContext(&e))
                })?
                .attributes
                .unwrap_or_default();
            let raw = attributes.get("RawMessageDelivery").is_some_and(|v| v == "true");
            found.push(SubscriptionSeen { topic_arn: topic, queue_arn: endpoint, raw });
        }
        next_token = page.next_token;
        if next_token.is_none() {
            return Ok(found);
        }
    }
    Err("more than 10,000 subscriptions in the region; not all were read".into())
}

async fn table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> Result<TableSeen, String> {
    let table = dynamodb
        .describe_table()
        .table_name(name)
        .send()
        .await
        .map_err(|e| format!("DescribeTable {name}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(&e)))?
        .table
        .ok_or_else(|| format!("DescribeTable {name} described nothing"))?;
    Ok(TableSeen {
        key: table
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
            .collect(),
        consistency: table.multi_region_consistency().map(|c| c.as_str().to_owned()),
        replicas: table.replicas().iter().filter_map(|r| r.region_name().map(str::to_owned)).collect(),
        witnesses: table.global_table_witnesses().iter().filter_map(|w| w.region_name().map(str::to_owned)).collect(),
    })
}
