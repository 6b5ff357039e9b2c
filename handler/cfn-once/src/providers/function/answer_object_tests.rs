//! Functions that answer by themselves, through the real protocol (`ProviderTest`), on fake
//! functions and in-memory answer buckets: the object each execution is given, answers read now
//! or in later polls, stale executions' late answers, and a region whose bucket cannot be read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::response::Status;
use cfn_once_core::testing::ProviderTest;
use serde_json::{Value, json};

use super::{FunctionInvoker, FunctionProvider, InvokeError, Invoked, UNREADABLE_POLLS_MAX};
use crate::providers::answers_itself::{self, AnswerDrop, AnswerObject, DropError};

/// The fake functions' own timeout: well within the kit's invocations.
const FUNCTION_TIMEOUT_MS: u64 = 30_000;

/// A fake answer bucket: objects in memory, URLs that name their key.
#[derive(Debug, Default)]
struct Bucket {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    /// An event whose answer the function PUTs only once the object was read three times.
    later: Mutex<Option<(Value, usize)>>,
}

#[async_trait]
impl AnswerDrop for Bucket {
    fn bucket(&self) -> &str {
        "answers"
    }
    fn region(&self) -> &str {
        "us-east-1"
    }
    async fn upload_url(&self, key: &str, _valid_for: Duration) -> Result<answers_itself::UploadUrl, DropError> {
        Ok(answers_itself::UploadUrl::new(format!("https://answers.example/{key}?X-Amz-Signature=ours")))
    }
    async fn read(&self, object: &AnswerObject, _limit: usize) -> Result<Option<Vec<u8>>, DropError> {
        let key = object.key.as_str();
        assert_eq!((object.bucket.as_str(), object.region.as_str()), ("answers", "us-east-1"));
        let mut later = self.later.lock().unwrap();
        if let Some((event, reads)) = later.as_mut() {
            *reads += 1;
            if *reads == 3 {
                self.put_answer(event, "FAILED", "greeting-bo");
            }
        }
        Ok(self.objects.lock().unwrap().get(key).cloned())
    }
}

impl Bucket {
    /// What a cfn-response function PUTs to the URL in `event`.
    fn put_answer(&self, event: &Value, status: &str, id: &str) {
        self.put(event, status, id, "told so");
    }

    fn put(&self, event: &Value, status: &str, id: &str, reason: &str) {
        let url = event["ResponseURL"].as_str().expect("a ResponseURL");
        let key = url.strip_prefix("https://answers.example/").unwrap().split('?').next().unwrap();
        let body = json!({
            "Status": status, "Reason": reason, "PhysicalResourceId": id,
            "StackId": event["StackId"], "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"], "Data": {"Greeting": "hello"},
        });
        self.objects.lock().unwrap().insert(key.to_owned(), body.to_string().into_bytes());
    }
}

/// A function that answers by itself: PUTs at once (`now`), or only when told (`later`).
#[derive(Debug)]
struct Responder {
    bucket: Arc<Bucket>,
    now: bool,
    fail: bool,
    /// From the second invocation on, the first one's late PUT lands right after its own.
    race: bool,
    /// The first invocation's outcome is lost: it answered (`Some(true)`) or did not run
    /// (`Some(false)`), and the caller saw neither.
    first_unseen: Option<bool>,
    events: Mutex<Vec<Value>>,
}

#[async_trait]
impl FunctionInvoker for Responder {
    async fn timeout_ms(&self, _function: &str) -> Result<u64, InvokeError> {
        Ok(FUNCTION_TIMEOUT_MS)
    }

    async fn invoke(&self, _function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
        let event: Value = serde_json::from_slice(&payload).unwrap();
        self.events.lock().unwrap().push(event.clone());
        let run = self.events.lock().unwrap().len();
        match self.first_unseen {
            Some(answered) if run == 1 => {
                if answered {
                    self.bucket.put_answer(&event, "SUCCESS", "greeting-1");
                }
                return Err(InvokeError::Unknown("the Invoke of greeter had no answer within 900 ms".into()));
            }
            _ => {}
        }
        if self.fail {
            return Ok(Invoked::FunctionError(br#"{"errorType":"KeyError","errorMessage":"'Name'"}"#.to_vec()));
        }
        if self.now {
            let run = self.events.lock().unwrap().len();
            self.bucket.put_answer(&event, "SUCCESS", &format!("greeting-{run}"));
            if self.race && run > 1 {
                let first = self.events.lock().unwrap()[0].clone();
                self.bucket.put(&first, "FAILED", "greeting-1", "a stale execution's late answer");
            }
        } else {
            *self.bucket.later.lock().unwrap() = Some((event, 0));
        }
        Ok(Invoked::Response(b"null".to_vec()))
    }
}

fn responder_kit(now: bool, fail: bool) -> (Arc<Bucket>, Arc<Responder>, ProviderTest) {
    self_answering_kit(now, fail, true, None)
}

fn unseen_kit(answered: bool) -> (Arc<Responder>, ProviderTest) {
    let (_, responder, test) = self_answering_kit(true, false, false, Some(answered));
    (responder, test)
}

/// A self-answering route to a [`Responder`] over an in-memory answer bucket.
fn self_answering_kit(
    now: bool,
    fail: bool,
    race: bool,
    first_unseen: Option<bool>,
) -> (Arc<Bucket>, Arc<Responder>, ProviderTest) {
    let bucket = Arc::new(Bucket::default());
    let responder =
        Arc::new(Responder { bucket: Arc::clone(&bucket), now, fail, race, first_unseen, events: Mutex::default() });
    let route = FunctionRoute {
        resource_type: "Custom::Greeting".into(),
        on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
        is_complete: None,
        answers_itself: true,
    };
    let invoker: Arc<dyn FunctionInvoker> = responder.clone();
    let answers: Arc<dyn AnswerDrop> = bucket.clone();
    let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
    (bucket, responder, ProviderTest::new().provider("Custom::Greeting", provider))
}

#[test]
fn an_answer_put_by_a_function_whose_invoke_outcome_was_unknown_is_read_not_run_again() {
    // The function created the resource and answered; its Invoke's answer was lost.
    let (responder, mut kit) = unseen_kit(true);
    let created = kit.create("Custom::Greeting", json!({"Name": "ida"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "greeting-1"));
    assert_eq!(responder.events.lock().unwrap().len(), 1, "read from its object, never invoked again");
}

#[test]
fn a_function_silent_since_an_unknown_invoke_runs_again_after_any_run_could_end_under_a_higher_fence() {
    let (responder, mut kit) = unseen_kit(false);
    let created = kit.create("Custom::Greeting", json!({"Name": "jo"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "greeting-2"));
    let events = responder.events.lock().unwrap().clone();
    assert_eq!(events.len(), 2);
    let (first, second) = (&events[0]["CfnOnce"]["Fence"]["Value"], &events[1]["CfnOnce"]["Fence"]["Value"]);
    assert!(second.as_u64() > first.as_u64(), "the second run's fence {second} is above the first's {first}");
    assert_ne!(events[0]["ResponseURL"], events[1]["ResponseURL"], "its own object");
}

#[test]
fn a_function_that_answers_by_itself_gets_an_object_of_ours_as_its_response_url() {
    let (bucket, responder, mut kit) = responder_kit(true, false);
    let request = kit.create_request("Custom::Greeting", json!({"Name": "ada"}));
    let created = kit.deliver(&request);
    assert_eq!(created.status(), Some(Status::Success), "{:?}", created.reason());
    assert_eq!(created.physical_resource_id(), "greeting-1");
    assert_eq!(created.data()["Greeting"], json!("hello"));
    let events = responder.events.lock().unwrap().clone();
    assert_eq!(events.len(), 1, "invoked once");
    let given = events[0]["ResponseURL"].as_str().unwrap();
    assert!(given.starts_with("https://answers.example/answers/"), "{given}");
    let cloudformation = request.request["ResponseURL"].as_str().unwrap();
    assert!(!events[0].to_string().contains(cloudformation), "CloudFormation's URL is never passed on");
    assert_eq!(events[0]["ResourceProperties"]["Name"], "ada");
    assert_eq!(bucket.objects.lock().unwrap().len(), 1);
}

#[test]
fn an_answer_put_after_the_invocation_is_waited_for_under_the_same_key() {
    let (_, responder, mut kit) = responder_kit(false, false);
    let failed = kit.create("Custom::Greeting", json!({"Name": "bo"}));
    assert_eq!(kit.provider_polls(), 2, "the first read after the Invoke, then two polls");
    assert_eq!(failed.status(), Some(Status::Failed));
    assert!(failed.reason().unwrap_or_default().contains("greeter answered FAILED: told so"), "{:?}", failed.reason());
    assert_eq!(responder.events.lock().unwrap().len(), 1, "the polls read the object; the function ran once");
}

#[test]
fn a_stale_executions_late_answer_lands_in_an_object_nobody_reads() {
    let (bucket, responder, mut kit) = responder_kit(true, false);
    let request = kit.create_request("Custom::Greeting", json!({"Name": "cy"}));
    // The first execution's function answers, the execution dies before its commit; the
    // taker-over invokes the function again, and the first one's late PUT lands just after.
    let answer = kit.crash_before_commit_then_take_over(&request);
    assert_eq!(responder.events.lock().unwrap().len(), 2, "one invocation per execution");
    assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.reason());
    assert_eq!(answer.physical_resource_id(), "greeting-2", "the taker-over's own answer");
    let events = responder.events.lock().unwrap().clone();
    assert_ne!(events[0]["ResponseURL"], events[1]["ResponseURL"], "an object per execution");
    assert_eq!(bucket.objects.lock().unwrap().len(), 2);
}

#[test]
fn a_function_that_fails_before_answering_is_failed_with_its_error() {
    let (_, _, mut kit) = responder_kit(false, true);
    let failed = kit.create("Custom::Greeting", json!({}));
    assert_eq!(failed.status(), Some(Status::Failed));
    assert!(
        failed.reason().unwrap_or_default().contains("greeter failed: KeyError: 'Name' before it answered"),
        "{:?}",
        failed.reason()
    );
}

/// An object's bucket and key.
type Place = (String, String);

/// Answer buckets in two regions, the execution in us-east-1 and every poll after it in
/// us-west-2 (the primary drained or gone); us-east-1's bucket readable or not from there.
#[derive(Debug)]
struct TwoBuckets {
    reads: Mutex<usize>,
    east_reachable: bool,
    objects: Mutex<BTreeMap<Place, Vec<u8>>>,
    /// The first execution's answer, PUT after its first read.
    late: Mutex<Option<(Place, Vec<u8>)>>,
    read_from: Mutex<Vec<String>>,
}

impl TwoBuckets {
    fn here(&self) -> &'static str {
        if *self.reads.lock().unwrap() == 0 { "us-east-1" } else { "us-west-2" }
    }
}

#[async_trait]
impl AnswerDrop for TwoBuckets {
    fn bucket(&self) -> &str {
        if self.here() == "us-east-1" { "answers-east" } else { "answers-west" }
    }
    fn region(&self) -> &str {
        self.here()
    }
    async fn upload_url(&self, key: &str, _valid_for: Duration) -> Result<answers_itself::UploadUrl, DropError> {
        Ok(answers_itself::UploadUrl::new(format!("https://{}.example/{key}", self.bucket())))
    }
    async fn read(&self, object: &AnswerObject, _limit: usize) -> Result<Option<Vec<u8>>, DropError> {
        let first = std::mem::replace(&mut *self.reads.lock().unwrap(), 1) == 0;
        self.read_from.lock().unwrap().push(format!("{}/{}", object.region, object.bucket));
        if !first && object.region == "us-east-1" && !self.east_reachable {
            return Err(DropError::Transient("dispatch failure: connection refused".into()));
        }
        let late = if first { None } else { self.late.lock().unwrap().take() };
        if let Some((place, body)) = late {
            self.objects.lock().unwrap().insert(place, body);
        }
        Ok(self.objects.lock().unwrap().get(&(object.bucket.clone(), object.key.clone())).cloned())
    }
}

/// A function that answers by itself: the first invocation PUTs its answer after returning
/// (`TwoBuckets::late`), later ones at once.
#[derive(Debug)]
struct Once {
    buckets: Arc<TwoBuckets>,
    events: Mutex<Vec<Value>>,
}

#[async_trait]
impl FunctionInvoker for Once {
    async fn timeout_ms(&self, _function: &str) -> Result<u64, InvokeError> {
        Ok(FUNCTION_TIMEOUT_MS)
    }

    async fn invoke(&self, _function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
        let event: Value = serde_json::from_slice(&payload).unwrap();
        let url = event["ResponseURL"].as_str().unwrap().strip_prefix("https://").unwrap().to_owned();
        let (host, key) = url.split_once(".example/").unwrap();
        self.events.lock().unwrap().push(event.clone());
        let body = json!({
            "Status": "SUCCESS", "PhysicalResourceId": format!("greeting-from-{host}"),
            "StackId": event["StackId"], "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
        });
        let answer = (host.to_owned(), key.to_owned());
        if self.events.lock().unwrap().len() == 1 {
            // Lands after the invocation's own read, once the polls come from elsewhere.
            *self.buckets.late.lock().unwrap() = Some((answer, body.to_string().into_bytes()));
        } else {
            self.buckets.objects.lock().unwrap().insert(answer, body.to_string().into_bytes());
        }
        Ok(Invoked::Response(b"null".to_vec()))
    }
}

fn two_bucket_kit(east_reachable: bool) -> (Arc<TwoBuckets>, Arc<Once>, ProviderTest) {
    let buckets = Arc::new(TwoBuckets {
        reads: Mutex::new(0),
        east_reachable,
        objects: Mutex::default(),
        late: Mutex::default(),
        read_from: Mutex::default(),
    });
    let function = Arc::new(Once { buckets: Arc::clone(&buckets), events: Mutex::default() });
    let route = FunctionRoute {
        resource_type: "Custom::Greeting".into(),
        on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
        is_complete: None,
        answers_itself: true,
    };
    let invoker: Arc<dyn FunctionInvoker> = function.clone();
    let answers: Arc<dyn AnswerDrop> = buckets.clone();
    let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
    (buckets, function, ProviderTest::new().provider("Custom::Greeting", provider))
}

#[test]
fn a_poll_from_the_other_region_reads_the_answer_where_the_function_put_it() {
    let (buckets, function, mut kit) = two_bucket_kit(true);
    let answer = kit.create("Custom::Greeting", json!({"Name": "ada"}));
    assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.reason());
    assert_eq!(answer.physical_resource_id(), "greeting-from-answers-east");
    assert_eq!(function.events.lock().unwrap().len(), 1, "the function ran once");
    let read_from = buckets.read_from.lock().unwrap().clone();
    assert!(read_from.iter().all(|place| place == "us-east-1/answers-east"), "{read_from:?}");
}

#[test]
fn an_answer_in_a_region_that_cannot_be_read_is_redone_here_under_the_polls_fence() {
    let (buckets, function, mut kit) = two_bucket_kit(false);
    let answer = kit.create("Custom::Greeting", json!({"Name": "bo"}));
    assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.reason());
    assert_eq!(answer.physical_resource_id(), "greeting-from-answers-west", "the new execution's answer");
    let events = function.events.lock().unwrap().clone();
    assert_eq!(events.len(), 2, "run again once, after {UNREADABLE_POLLS_MAX} unreadable polls");
    assert!(events[1]["CfnOnce"]["Fence"]["Value"].as_u64() > events[0]["CfnOnce"]["Fence"]["Value"].as_u64());
    assert_eq!(events[1]["ResourceProperties"], events[0]["ResourceProperties"]);
    assert_eq!(events[1]["RequestType"], "Create");
    assert_ne!(events[0]["ResponseURL"], events[1]["ResponseURL"], "a new object");
    let read_from = buckets.read_from.lock().unwrap().clone();
    assert_eq!(
        read_from,
        ["us-east-1/answers-east", "us-east-1/answers-east", "us-east-1/answers-east", "us-west-2/answers-west"],
        "the execution's own read, two unreadable polls, the new execution's read"
    );
}

/// A function that PUTs its answer twice during its invocation, then returns.
#[derive(Debug)]
struct TwicePutter {
    bucket: Arc<Bucket>,
}

#[async_trait]
impl FunctionInvoker for TwicePutter {
    async fn timeout_ms(&self, _function: &str) -> Result<u64, InvokeError> {
        Ok(FUNCTION_TIMEOUT_MS)
    }

    async fn invoke(&self, _function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
        let event: Value = serde_json::from_slice(&payload).unwrap();
        self.bucket.put(&event, "SUCCESS", "first-put", "one");
        self.bucket.put(&event, "SUCCESS", "second-put", "two");
        Ok(Invoked::Response(b"null".to_vec()))
    }
}

#[test]
fn of_two_puts_the_last_one_before_the_read_is_the_answer_and_it_is_sent_once() {
    let bucket = Arc::new(Bucket::default());
    let route = FunctionRoute {
        resource_type: "Custom::Greeting".into(),
        on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
        is_complete: None,
        answers_itself: true,
    };
    let invoker: Arc<dyn FunctionInvoker> = Arc::new(TwicePutter { bucket: Arc::clone(&bucket) });
    let answers: Arc<dyn AnswerDrop> = bucket.clone();
    let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
    let mut kit = ProviderTest::new().provider("Custom::Greeting", provider);
    let request = kit.create_request("Custom::Greeting", json!({"Name": "gus"}));
    let answer = kit.deliver(&request);
    assert_eq!(answer.physical_resource_id(), "second-put", "the object keeps the last PUT");
    // A copy delivered later reads nothing again: the committed answer is PUT as it was.
    let again = kit.deliver(&request);
    assert_eq!(again.physical_resource_id(), "second-put");
    assert_eq!(kit.puts(&request).len(), 1, "one answer to CloudFormation");
}

/// A function that answers by itself after `run_ms` on `clock`, whose own timeout (300 s)
/// outlasts the kit's invocations: a caller that hangs up first does not stop it, and its PUT
/// lands all the same.
#[derive(Debug)]
struct LongRunner {
    bucket: Arc<Bucket>,
    clock: cfn_once_core::clock::ManualClock,
    run_ms: u64,
    timeouts_ms: Mutex<Vec<u64>>,
}

#[async_trait]
impl FunctionInvoker for LongRunner {
    async fn timeout_ms(&self, _function: &str) -> Result<u64, InvokeError> {
        Ok(300_000)
    }

    async fn invoke(&self, _function: &str, payload: Vec<u8>, timeout_ms: u64) -> Result<Invoked, InvokeError> {
        use cfn_once_core::clock::Clock;
        let event: Value = serde_json::from_slice(&payload).unwrap();
        self.timeouts_ms.lock().unwrap().push(timeout_ms);
        self.clock.sleep_ms(self.run_ms.min(timeout_ms)).await;
        // Still running when its caller hangs up, it answers a moment later.
        self.bucket.put(&event, "SUCCESS", "greeting-long", "done");
        if self.run_ms > timeout_ms {
            return Err(InvokeError::Unknown(format!("the Invoke of greeter had no answer within {timeout_ms} ms")));
        }
        Ok(Invoked::Response(b"null".to_vec()))
    }
}

#[test]
fn a_self_answering_function_that_outlasts_the_handlers_invocation_is_invoked_once_and_its_answer_read() {
    let test = ProviderTest::new();
    let bucket = Arc::new(Bucket::default());
    let runner = Arc::new(LongRunner {
        bucket: Arc::clone(&bucket),
        clock: test.clock(),
        run_ms: 200_000,
        timeouts_ms: Mutex::default(),
    });
    let route = FunctionRoute {
        resource_type: "Custom::Greeting".into(),
        on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
        is_complete: None,
        answers_itself: true,
    };
    let invoker: Arc<dyn FunctionInvoker> = runner.clone();
    let answers: Arc<dyn AnswerDrop> = bucket.clone();
    let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
    let mut kit = test.provider("Custom::Greeting", provider);
    let created = kit.create("Custom::Greeting", json!({"Name": "lu"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "greeting-long"));
    let timeouts_ms = runner.timeouts_ms.lock().unwrap().clone();
    assert_eq!(timeouts_ms.len(), 1, "invoked once, not refused and never again");
    assert!(timeouts_ms[0] < 120_000, "cut before the kit's 120 s invocation ends: {timeouts_ms:?}");
}
