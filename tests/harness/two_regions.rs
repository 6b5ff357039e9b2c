//! Two regions on local AWS for one test: the environment `cfn-once local` builds, both
//! regional workers running (the test may kill, stop and restart them), and everything each
//! worker did, observed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cfn_once::app::Observer;
use cfn_once_core::lease::{LeaseRecord, LeaseStore};
use cfn_once_core::vocabulary::{Disposition, Done, Handled, Role};
use cfn_once_core::worker::Ports;
use cfn_once_local::environment::{EnvironmentOptions, LocalEnvironment, s3_client};
use cfn_once_local::pair::RegionPair;
use cfn_once_local::provision;
use cfn_once_local::worker::RegionalWorker;

use crate::{PlainRecord, Put, Sent, WaitHandle, live_request, moto, moto_front, plain_record, puts, unique};

/// What one region's worker did, in order, with when it finished each record.
#[derive(Debug, Clone, Default)]
pub struct Observed(Arc<Mutex<Vec<(Instant, Handled)>>>);

impl Observed {
    fn observer(&self) -> Observer {
        let log = Arc::clone(&self.0);
        Arc::new(move |handled: &Handled| log.lock().expect("observed").push((Instant::now(), handled.clone())))
    }

    /// How many requests this worker answered (committed and PUT).
    pub fn answered(&self) -> usize {
        let log = self.0.lock().expect("observed");
        log.iter()
            .filter(|(_, handled)| matches!(handled.disposition, Disposition::Done(Done::Answered { .. })))
            .count()
    }

    /// Every disposition for `sent`'s request, in order.
    pub fn dispositions(&self, sent: &Sent) -> Vec<Disposition> {
        self.timeline(sent).into_iter().map(|(_, disposition)| disposition).collect()
    }

    /// Every disposition for `sent`'s request, with when it was reached, in order.
    pub fn timeline(&self, sent: &Sent) -> Vec<(Instant, Disposition)> {
        self.0
            .lock()
            .expect("observed")
            .iter()
            .filter(|(_, handled)| {
                handled.request.as_ref().is_some_and(|r| r.request_id == sent.request_key.request_id)
            })
            .map(|(at, handled)| (*at, handled.disposition.clone()))
            .collect()
    }
}

/// Both regions.
#[derive(Debug)]
pub struct TwoRegions {
    pub env: LocalEnvironment,
    pub primary: RegionalWorker,
    pub secondary: RegionalWorker,
    pub primary_observed: Observed,
    pub secondary_observed: Observed,
    pub sns: aws_sdk_sns::Client,
    pub s3: aws_sdk_s3::Client,
    /// Presigns ResponseURLs on the environment's HTTPS endpoint, as CloudFormation's are
    /// `https://` URLs of S3.
    pub presigner: aws_sdk_s3::Client,
    pub sqs_primary: aws_sdk_sqs::Client,
    pub sqs_secondary: aws_sdk_sqs::Client,
    pub dynamodb: aws_sdk_dynamodb::Client,
    overrides: Vec<(String, String)>,
}

impl TwoRegions {
    /// Provisions with a `secondary_delay_s` queue delay and starts both workers with the
    /// handler settings `overrides`.
    pub async fn new(secondary_delay_s: u32, overrides: &[(&str, &str)]) -> Self {
        Self::with_primary(secondary_delay_s, overrides, |ports| ports).await
    }

    /// Like [`TwoRegions::new`], with the primary's ports replaced by `customize`.
    pub async fn with_primary(
        secondary_delay_s: u32,
        overrides: &[(&str, &str)],
        customize: impl FnOnce(Ports) -> Ports,
    ) -> Self {
        Self::with_ports(secondary_delay_s, overrides, customize, |ports| ports).await
    }

    /// Like [`TwoRegions::new`], with each region's ports replaced by its `customize`.
    pub async fn with_ports(
        secondary_delay_s: u32,
        overrides: &[(&str, &str)],
        customize: impl FnOnce(Ports) -> Ports,
        customize_secondary: impl FnOnce(Ports) -> Ports,
    ) -> Self {
        let options = EnvironmentOptions {
            name: unique("cfn-once-two"),
            secondary_delay_s,
            visibility_timeout_s: 10,
            // The deployed limit, which the handler's configuration assumes.
            max_receive_count: cfn_once_local::pair::LOCAL_MAX_RECEIVE_COUNT,
            raw_delivery: false,
        };
        let env = LocalEnvironment::provision(moto(), moto_front(), &options).await.expect("environment");
        let (primary_observed, secondary_observed) = (Observed::default(), Observed::default());
        let mut primary =
            RegionPair::worker_with(&env, Role::Primary, overrides, Some(primary_observed.observer()), customize)
                .await
                .expect("primary");
        let mut secondary = RegionPair::worker_with(
            &env,
            Role::Secondary,
            overrides,
            Some(secondary_observed.observer()),
            customize_secondary,
        )
        .await
        .expect("secondary");
        primary.start();
        secondary.start();
        let file = &env.file;
        Self {
            sns: aws_sdk_sns::Client::new(&env.sdk(&file.customer_region).await),
            s3: s3_client(&env.sdk(&file.primary_region).await),
            presigner: s3_client(&env.https_sdk(&file.primary_region).await.expect("the HTTPS endpoint's client")),
            sqs_primary: aws_sdk_sqs::Client::new(&env.sdk(&file.primary_region).await),
            sqs_secondary: aws_sdk_sqs::Client::new(&env.sdk(&file.secondary_region).await),
            dynamodb: aws_sdk_dynamodb::Client::new(&env.sdk(&file.primary_region).await),
            overrides: overrides.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            env,
            primary,
            secondary,
            primary_observed,
            secondary_observed,
        }
    }

    /// The handler settings both workers run with.
    pub fn overrides(&self) -> Vec<(&str, &str)> {
        self.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    /// A fixture made live for this environment.
    pub async fn request(&self, fixture_name: &str) -> Sent {
        let file = &self.env.file;
        live_request(fixture_name, &file.topic_arn, &self.presigner, &file.response_bucket, &self.env.item_table).await
    }

    /// Publishes to the ServiceToken topic.
    pub async fn publish(&self, sent: &Sent) {
        self.sns
            .publish()
            .topic_arn(&self.env.file.topic_arn)
            .message(sent.request.to_string())
            .send()
            .await
            .expect("publish");
    }

    /// A fixture made live for the ServiceToken topic of customer region `region`.
    pub async fn request_in(&self, fixture_name: &str, region: &str) -> Sent {
        let file = &self.env.file;
        let topic = file.customer_topics.get(region).unwrap_or_else(|| panic!("no topic in {region}"));
        live_request(fixture_name, topic, &self.presigner, &file.response_bucket, &self.env.item_table).await
    }

    /// Publishes `sent` to its own ServiceToken topic, from the topic's region.
    pub async fn publish_to_its_topic(&self, sent: &Sent) {
        let topic = sent.request["ServiceToken"].as_str().expect("a ServiceToken");
        let region = topic.split(':').nth(3).expect("a topic ARN");
        let sns = aws_sdk_sns::Client::new(&self.env.sdk(region).await);
        sns.publish().topic_arn(topic).message(sent.request.to_string()).send().await.expect("publish");
    }

    /// Every body PUT for `sent`, oldest first.
    pub async fn responses(&self, sent: &Sent) -> Vec<Vec<u8>> {
        provision::response_versions(&self.s3, &self.env.file.response_bucket, &sent.key).await.expect("responses")
    }

    /// Every PUT of an answer to `sent`, oldest first, with when S3 stored each.
    pub async fn answer_puts(&self, sent: &Sent) -> Vec<Put> {
        puts(&self.s3, &self.env.file.response_bucket, &sent.key).await
    }

    /// Waits for the first answer to `sent`; returns it and how long after `since` it came.
    pub async fn wait_for_answer(&self, sent: &Sent, since: Instant, timeout: Duration) -> (Vec<u8>, Duration) {
        loop {
            if let Some(first) = self.responses(sent).await.into_iter().next() {
                return (first, since.elapsed());
            }
            assert!(since.elapsed() < timeout, "no answer within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The request's lease record.
    pub async fn record(&self, sent: &Sent) -> Option<LeaseRecord> {
        let store =
            cfn_once::adapters::dynamodb_lease::DynamoLeaseStore::new(self.dynamodb.clone(), &self.env.file.table_name);
        store.read(&sent.request_key).await.expect("read record")
    }

    /// A wait condition handle named after `logical_id`, presigned on the environment's HTTPS
    /// endpoint into its response bucket, as the ResponseURLs are.
    pub async fn wait_handle(&self, logical_id: &str) -> WaitHandle {
        WaitHandle::presign(&self.presigner, &self.s3, &self.env.file.response_bucket, logical_id).await
    }

    /// A wait condition handle like [`TwoRegions::wait_handle`]'s, but presigned as
    /// CloudFormation presigns one (valid 86,399 s) `signed_ago` before now: a handle of a stack
    /// made a day ago, which expires `86,399 s - signed_ago` from now.
    pub async fn wait_handle_signed_ago(&self, logical_id: &str, signed_ago: std::time::Duration) -> WaitHandle {
        WaitHandle::presign_signed_ago(
            &self.presigner,
            &self.s3,
            &self.env.file.response_bucket,
            logical_id,
            signed_ago,
        )
        .await
    }

    /// The lease record at `key` (a request's, or a work's), as a plain GetItem reads it.
    pub async fn plain_record(&self, key: &cfn_once_core::request::RequestKey) -> Option<PlainRecord> {
        plain_record(&self.dynamodb, &self.env.file.table_name, key).await
    }

    /// Messages left in both regions' queues (delayed and in flight included).
    pub async fn queued(&self) -> u64 {
        let file = &self.env.file;
        provision::queue_depth(&self.sqs_primary, &file.queues.primary).await.expect("depth")
            + provision::queue_depth(&self.sqs_secondary, &file.queues.secondary).await.expect("depth")
    }

    /// Messages in both DLQs.
    pub async fn dead_letters(&self) -> u64 {
        let file = &self.env.file;
        provision::queue_depth(&self.sqs_primary, &file.queues.primary_dlq).await.expect("depth")
            + provision::queue_depth(&self.sqs_secondary, &file.queues.secondary_dlq).await.expect("depth")
    }

    /// Waits until both queues are empty.
    pub async fn drain(&self, timeout: Duration) {
        let started = Instant::now();
        while self.queued().await > 0 {
            assert!(started.elapsed() < timeout, "queues not drained within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Takes the primary's worker down for an outage (see `RegionalWorker::take_down`).
    pub async fn kill_primary(&mut self) {
        self.primary.take_down().await;
    }

    /// Makes `region` the active one, as the drill does.
    pub async fn set_active(&self, region: &str) {
        let control = cfn_once::adapters::control_table::TableControl::new(
            self.dynamodb.clone(),
            &self.env.file.table_name,
            &self.env.file.primary_region,
        );
        control.set_active_region(region, crate::now_ms(), "test").await.expect("flip the control");
    }

    /// Stops both workers.
    pub async fn stop(&mut self) {
        self.primary.stop().await;
        self.secondary.stop().await;
    }
}
