//! The test harness: local AWS (one moto server per test binary), per-test resources with
//! unique names, event fixtures from `events/`, and helpers to send requests the way
//! CloudFormation does and read back what was answered.
//!
//! Tests start and stop their own moto: the first test that needs it starts it from the
//! project's venv (`make venv`; `CFN_ONCE_PYTHON` overrides the interpreter), and it exits with
//! the test process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::config::ConfigBag;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once::adapters::http_sink::HttpResponseSink;
use cfn_once::app::{App, input_policy};
use cfn_once::config::Config;
use cfn_once::providers::standard_router;
use cfn_once::system_clock::SystemClock;
use cfn_once_core::control::FixedActivity;
use cfn_once_core::decision::Activity;
use cfn_once_core::lease::{LeaseRecord, LeaseStore};
use cfn_once_core::provider::Router;
use cfn_once_core::put::ResponseSink;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::RequestKey;
use cfn_once_core::worker::{Ports, Worker};
use cfn_once_local::esm::{EsmSettings, LocalEventSourceMapping};
use cfn_once_local::moto::MotoServer;
use cfn_once_local::provision::{self, QueuePair, QueueSettings};
use lambda_runtime::LambdaEvent;
use serde_json::Value;

// The repository's README and its guides in docs/: their Rust examples compile (and the runnable
// ones run) as doctests, so they cannot drift from the API. Tested here, not in the `cfn-once`
// crate, because a packaged crate cannot reach a file outside its folder. A guide that gains a
// Rust block gets a line here (tests/it/links.rs fails until it does).
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// docs/providers.md, the provider guide: the crate, the provider, fenced writes, the tests.
#[doc = include_str!("../../docs/providers.md")]
#[cfg(doctest)]
pub struct ProvidersGuideDoctests;

mod background_server;
mod fake_arc;
mod fake_runtime;
mod lambda_process;
mod two_regions;
mod wait_handle;
pub use cfn_once_local::fault_proxy::{Exchange, Fault, FaultProxy, Match, waited_for};
pub use cfn_once_local::tls_front::TlsFront;
pub use fake_arc::{EndpointMode, FakeArcCluster};
pub use fake_runtime::{Call, FakeRuntime, Posted, cpu_ns};
pub use lambda_process::LambdaProcess;
pub use two_regions::{Observed, TwoRegions};
pub use wait_handle::{CLOUDFORMATION_HANDLE_EXPIRES_S, PlainRecord, Put, WaitHandle, lease_item, plain_record, puts};

/// The account moto uses.
pub const ACCOUNT: &str = "123456789012";
/// Where the ServiceToken topic lives, as in a customer's stack region.
pub const CUSTOMER_REGION: &str = "us-east-2";
/// The region the handler under test runs in.
pub const REGION: &str = "us-east-1";

/// The shared moto endpoint, started on first use.
pub fn moto() -> &'static str {
    static MOTO: OnceLock<MotoServer> = OnceLock::new();
    MOTO.get_or_init(|| MotoServer::start(&python()).unwrap_or_else(|error| panic!("could not start moto: {error:#}")))
        .endpoint()
}

/// The shared TLS front before [`moto`], started on first use: the HTTPS face of the local
/// environments the tests provision, with a CA of its own whose PEM is in a folder of this test
/// process.
pub fn moto_front() -> &'static TlsFront {
    static FRONT: OnceLock<TlsFront> = OnceLock::new();
    FRONT.get_or_init(|| {
        let dir = std::env::temp_dir().join(unique("moto-front"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("cannot create {}: {error}", dir.display()));
        TlsFront::start(moto(), &dir).unwrap_or_else(|error| panic!("could not start the TLS front: {error:#}"))
    })
}

/// The project's Python (`make venv`'s, or `CFN_ONCE_PYTHON`): moto, and functions run locally.
pub fn python() -> PathBuf {
    std::env::var_os("CFN_ONCE_PYTHON").map(PathBuf::from).unwrap_or_else(|| workspace_root().join(".venv/bin/python"))
}

/// The repository root: the folder above this crate's, without a `..` in the path, so that a
/// path under it can be told apart by `strip_prefix`.
pub fn workspace_root() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// A name no other test in this process uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst))
}

/// A CloudFormation request fixture from `events/`.
pub fn fixture(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Counts DynamoDB operations as they go on the wire (SDK retries included).
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl CallCounter {
    /// Operation name to count, e.g. `UpdateItem` to 3.
    pub fn snapshot(&self) -> BTreeMap<String, u32> {
        self.calls.lock().expect("counter lock").clone()
    }

    /// Forgets what was counted.
    pub fn reset(&self) {
        self.calls.lock().expect("counter lock").clear();
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context.request().headers().get("x-amz-target").unwrap_or("unknown");
        let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
        *self.calls.lock().expect("counter lock").entry(operation).or_default() += 1;
        Ok(())
    }
}

/// One region's worth of local AWS for one test: topic (in the customer region), queue + DLQ,
/// lease table, versioned response bucket, and an item table for `Custom::DynamoDBItem`.
#[derive(Debug, Clone)]
pub struct LocalRegion {
    pub endpoint: String,
    pub sdk: SdkConfig,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub s3: aws_sdk_s3::Client,
    pub sns: aws_sdk_sns::Client,
    /// DynamoDB in the customer (stack) region, where the item table is.
    pub customer_dynamodb: aws_sdk_dynamodb::Client,
    pub table: String,
    pub item_table: String,
    pub bucket: String,
    pub topic_arn: String,
    pub queue: QueuePair,
    pub counter: CallCounter,
    /// How the queue was made; the handler's configuration follows it (raw delivery).
    pub options: Options,
}

/// How a test wants its queue.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub raw_delivery: bool,
    pub visibility_timeout_s: u32,
    pub max_receive_count: u32,
}

impl Default for Options {
    fn default() -> Self {
        // The deployed receive limit (infra/regional.yaml), which the handler's configuration
        // assumes by default.
        Self { raw_delivery: false, visibility_timeout_s: 30, max_receive_count: 1_000 }
    }
}

impl LocalRegion {
    /// The environment of a primary `cfn-once-lambda` process serving this region's resources
    /// on moto (for [`LambdaProcess::spawn`]).
    pub fn lambda_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
            ("CFN_ONCE_ROLE", "primary".to_owned()),
            ("CFN_ONCE_TABLE", self.table.clone()),
            ("CFN_ONCE_TOPIC_ARNS", self.topic_arn.clone()),
            ("CFN_ONCE_RESPONSE_URL_ALLOW", format!("{}/{}/", self.endpoint, self.bucket)),
        ]
    }

    /// Provisions fresh resources on the shared moto.
    pub async fn new(options: Options) -> Self {
        let endpoint = moto().to_owned();
        let sdk = provision::sdk_config(&endpoint, REGION).await;
        let customer = provision::sdk_config(&endpoint, CUSTOMER_REGION).await;
        let counter = CallCounter::default();
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(counter.clone()).build(),
        );
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build());
        let sns = aws_sdk_sns::Client::new(&customer);
        let name = unique("cfn-once");
        let (table, item_table, bucket) =
            (format!("{name}-leases"), format!("{name}-items"), format!("{name}-responses"));
        provision::create_lease_table(&dynamodb, &table).await.expect("lease table");
        // Custom::DynamoDBItem writes to the stack's region by default.
        let customer_dynamodb = aws_sdk_dynamodb::Client::new(&customer);
        provision::create_table(&customer_dynamodb, &item_table, &[("pk", aws_sdk_dynamodb::types::KeyType::Hash)])
            .await
            .expect("item table");
        provision::create_response_bucket(&s3, &bucket).await.expect("bucket");
        let queue = provision::create_queue_pair(
            &sqs,
            &format!("{name}-primary"),
            QueueSettings {
                delay_s: 0,
                visibility_timeout_s: options.visibility_timeout_s,
                max_receive_count: options.max_receive_count,
            },
        )
        .await
        .expect("queues");
        let topic_arn = provision::create_topic(&sns, &format!("{name}-token")).await.expect("topic");
        provision::subscribe_queue(&sns, &topic_arn, &queue.arn, options.raw_delivery, None)
            .await
            .expect("subscription");
        counter.reset();
        Self {
            endpoint,
            sdk,
            dynamodb,
            sqs,
            s3,
            sns,
            customer_dynamodb,
            table,
            item_table,
            bucket,
            topic_arn,
            queue,
            counter,
            options,
        }
    }

    /// The handler's configuration for this region, with `overrides` applied.
    pub fn config(&self, overrides: &[(&str, &str)]) -> Config {
        let mut vars: BTreeMap<String, String> = BTreeMap::from([
            ("AWS_REGION".into(), REGION.into()),
            ("CFN_ONCE_ROLE".into(), "primary".into()),
            ("CFN_ONCE_TABLE".into(), self.table.clone()),
            ("CFN_ONCE_TOPIC_ARNS".into(), self.topic_arn.clone()),
            ("CFN_ONCE_RESPONSE_URL_ALLOW".into(), format!("{}/{}/", self.endpoint, self.bucket)),
            ("CFN_ONCE_ITEM_TABLES".into(), self.item_table.clone()),
            ("CFN_ONCE_LEASE_MS".into(), "3000".into()),
            ("CFN_ONCE_SKEW_MS".into(), "200".into()),
            // The handler accepts bare requests exactly when the subscription delivers them.
            ("CFN_ONCE_RAW_DELIVERY".into(), self.options.raw_delivery.to_string()),
            ("CFN_ONCE_VISIBILITY_TIMEOUT_S".into(), self.options.visibility_timeout_s.to_string()),
        ]);
        for (name, value) in overrides {
            vars.insert((*name).into(), (*value).into());
        }
        Config::from_lookup(|name| vars.get(name).cloned()).expect("valid test configuration")
    }

    /// The configuration of a handler whose AWS calls go through the fault proxy at `proxy_url`:
    /// responses allowed there, every call given up after 1 s, a 3 s lease heartbeated every
    /// second, so that injected faults settle within a test; then `overrides`.
    pub fn config_behind(&self, proxy_url: &str, overrides: &[(&str, &str)]) -> Config {
        let allow = format!("{proxy_url}/{}/", self.bucket);
        let mut settings = vec![
            ("CFN_ONCE_RESPONSE_URL_ALLOW", allow.as_str()),
            ("CFN_ONCE_STORE_TIMEOUT_MS", "1000"),
            ("CFN_ONCE_PUT_TIMEOUT_MS", "1000"),
            ("CFN_ONCE_SQS_TIMEOUT_MS", "1000"),
            ("CFN_ONCE_LEASE_MS", "3000"),
            ("CFN_ONCE_HEARTBEAT_MS", "1000"),
        ];
        settings.extend_from_slice(overrides);
        self.config(&settings)
    }

    /// The production wiring on this region's resources (counting DynamoDB calls).
    pub fn app(&self, config: &Config) -> App {
        self.app_with(
            config,
            self.lease_store(),
            Arc::new(HttpResponseSink::new(config.put_timeout_ms).expect("http client")),
        )
    }

    /// The production wiring with the given lease store and response sink.
    pub fn app_with(&self, config: &Config, store: Arc<dyn LeaseStore>, sink: Arc<dyn ResponseSink>) -> App {
        self.app_with_router(config, store, sink, standard_router(config, &self.sdk))
    }

    /// The production wiring with everything injectable.
    pub fn app_with_router(
        &self,
        config: &Config,
        store: Arc<dyn LeaseStore>,
        sink: Arc<dyn ResponseSink>,
        router: Router,
    ) -> App {
        let ports = Ports {
            store,
            sink,
            router: Arc::new(router),
            clock: Arc::new(SystemClock),
            random: Arc::new(SplitMix64::new(cfn_once::system_clock::random_seed())),
            // One region, always active.
            control: Arc::new(FixedActivity(Activity::Active)),
            metrics: Arc::new(cfn_once::emf::EmfMetrics),
        };
        App::new(Worker::new(ports, input_policy(config), config.settings()), &self.sdk)
    }

    /// The production wiring (`App::from_config_with`: DynamoDB and SQS clients with their
    /// timeouts, the HTTPS sink, the table control) with every AWS call made through `proxy`,
    /// and `router`'s providers.
    pub async fn app_behind(&self, proxy: &FaultProxy, config: &Config, router: Router) -> App {
        let sdk = provision::sdk_config(&proxy.url(), REGION).await;
        App::from_config(config, &sdk, router).expect("the app")
    }

    /// Points the request's ResponseURL at `endpoint` (a proxy in front of moto) instead of moto.
    pub fn route_response_url(&self, sent: &mut Sent, endpoint: &str) {
        let url = sent.request["ResponseURL"].as_str().expect("a ResponseURL").to_owned();
        let routed = url.replacen(&self.endpoint, endpoint, 1);
        assert_ne!(routed, url, "the ResponseURL does not start with the moto endpoint");
        sent.request["ResponseURL"] = Value::String(routed);
    }

    /// The DynamoDB lease store on this region's table as the function wires it: the SDK's
    /// client with the function's configuration (one attempt per call, explicit timeouts).
    /// Its calls are counted (`counter`).
    pub fn lease_store(&self) -> Arc<DynamoLeaseStore> {
        let function = cfn_once::app::dynamodb_client(&self.sdk, 5_000, REGION);
        let counted = function.config().to_builder().interceptor(self.counter.clone()).build();
        Arc::new(DynamoLeaseStore::new(aws_sdk_dynamodb::Client::from_conf(counted), &self.table))
    }

    /// The next message on this region's queue as the one-record SQS event Lambda would hand a
    /// function (received through `esm`, so its attributes are Lambda's), and its message id.
    /// Waits for a message to arrive.
    pub async fn batch_of_one(&self, esm: &LocalEventSourceMapping) -> (Vec<u8>, String) {
        loop {
            let received = self
                .sqs
                .receive_message()
                .queue_url(&self.queue.url)
                .max_number_of_messages(1)
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive");
            if let Some(message) = received.messages.unwrap_or_default().first() {
                let mut event = SqsEvent::default();
                event.records = vec![esm.record(message)];
                let message_id = message.message_id().expect("a message id").to_owned();
                return (serde_json::to_vec(&event).expect("an SQS event"), message_id);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A local event source mapping on this region's queue.
    pub async fn esm(&self, batch_size: i32) -> LocalEventSourceMapping {
        LocalEventSourceMapping::new(
            self.sqs.clone(),
            &self.queue.url,
            EsmSettings { batch_size, wait_time_s: 0, function_timeout_ms: 30_000 },
        )
        .await
        .expect("event source mapping")
    }

    /// A fixture made live: a fresh RequestId, this test's stack, topic and a presigned
    /// ResponseURL into this region's bucket.
    pub async fn request(&self, fixture_name: &str) -> Sent {
        live_request(fixture_name, &self.topic_arn, &self.s3, &self.bucket, &self.item_table).await
    }

    /// Publishes the request to the ServiceToken topic, as CloudFormation does.
    pub async fn publish(&self, sent: &Sent) {
        self.sns
            .publish()
            .topic_arn(&self.topic_arn)
            .message(sent.request.to_string())
            .send()
            .await
            .expect("publish to the ServiceToken topic");
    }

    /// Every body PUT to the request's ResponseURL, oldest first.
    pub async fn responses(&self, sent: &Sent) -> Vec<Vec<u8>> {
        provision::response_versions(&self.s3, &self.bucket, &sent.key).await.expect("list responses")
    }

    /// The request's lease record.
    pub async fn record(&self, sent: &Sent) -> Option<LeaseRecord> {
        self.lease_store().read(&sent.request_key).await.expect("read lease record")
    }

    /// A wait condition handle named after `logical_id`, presigned into this region's response
    /// bucket (which the handler's allow-list admits).
    pub async fn wait_handle(&self, logical_id: &str) -> WaitHandle {
        WaitHandle::presign(&self.s3, &self.s3, &self.bucket, logical_id).await
    }

    /// The lease record at `key` (a request's, or a work's), as a plain GetItem reads it,
    /// through a client that is not counted.
    pub async fn plain_record(&self, key: &RequestKey) -> Option<PlainRecord> {
        plain_record(&aws_sdk_dynamodb::Client::new(&self.sdk), &self.table, key).await
    }

    /// Polls `esm` with `app` until the request has a response or `timeout` passes.
    pub async fn serve_until_answered(
        &self,
        esm: &LocalEventSourceMapping,
        app: &App,
        sent: &Sent,
        timeout: Duration,
    ) -> Vec<u8> {
        let started = Instant::now();
        loop {
            esm.poll_once(&handler(app)).await.expect("poll");
            if let Some(first) = self.responses(sent).await.into_iter().next() {
                return first;
            }
            assert!(started.elapsed() < timeout, "no response within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until the queue is empty (every message deleted), or panics after `timeout`.
    pub async fn drain(&self, esm: &LocalEventSourceMapping, app: &App, timeout: Duration) {
        let started = Instant::now();
        while provision::queue_depth(&self.sqs, &self.queue.url).await.expect("depth") > 0 {
            assert!(started.elapsed() < timeout, "queue not drained within {timeout:?}");
            esm.poll_once(&handler(app)).await.expect("poll");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A fixture made live: a fresh RequestId, a stack named after `bucket` in the topic's region, the topic, and a
/// presigned ResponseURL into `bucket`. A `TableName` property is pointed at `item_table`.
pub async fn live_request(
    fixture_name: &str,
    topic_arn: &str,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    item_table: &str,
) -> Sent {
    let mut request = fixture(fixture_name);
    let request_id = unique("request");
    // A stack lives in its ServiceToken topic's region (CloudFormation requires it).
    let region = topic_arn.split(':').nth(3).filter(|region| !region.is_empty()).unwrap_or(CUSTOMER_REGION);
    let stack_id = format!("arn:aws:cloudformation:{region}:{ACCOUNT}:stack/{bucket}/guid");
    let logical = request["LogicalResourceId"].as_str().unwrap_or("Resource").to_owned();
    let key = format!("{logical}/{request_id}");
    let url = provision::presigned_put_url(s3, bucket, &key, 7_200).await.expect("presigned URL");
    request["RequestId"] = Value::String(request_id.clone());
    request["StackId"] = Value::String(stack_id.clone());
    request["ResponseURL"] = Value::String(url);
    request["ServiceToken"] = Value::String(topic_arn.to_owned());
    request["ResourceProperties"]["ServiceToken"] = Value::String(topic_arn.to_owned());
    if request["ResourceProperties"].get("TableName").is_some() {
        request["ResourceProperties"]["TableName"] = Value::String(item_table.to_owned());
    }
    let stack_id = cfn_once_core::request::StackArn::parse(&stack_id).expect("the test's StackId is a stack ARN");
    Sent { request, key, request_key: RequestKey { stack_id, request_id } }
}

/// A request as sent, with where its answer lands.
#[derive(Debug, Clone)]
pub struct Sent {
    pub request: Value,
    /// The S3 key its ResponseURL points at.
    pub key: String,
    pub request_key: RequestKey,
}

/// The Lambda handler function over `app`, as the event source mapping invokes it.
pub fn handler<'a>(
    app: &'a App,
) -> impl Fn(LambdaEvent<SqsEvent>) -> futures_util::future::BoxFuture<'a, Result<SqsBatchResponse, lambda_runtime::Error>>
{
    move |event| Box::pin(cfn_once::lambda::handle(app, event))
}

/// Milliseconds on the system clock.
pub fn now_ms() -> u64 {
    use cfn_once_core::clock::Clock;
    SystemClock.now_ms()
}

/// Log output captured in memory: a `MakeWriter` for a test's tracing subscriber.
#[derive(Debug, Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Everything written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Everything written so far, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
