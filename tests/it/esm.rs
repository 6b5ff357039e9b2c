//! The local event source mapping settles batches as Lambda does: it deletes the records a
//! handler did not list as failed, and nothing when the handler errors, times out, or names a
//! record that was not in the batch.

use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use cfn_once_local::esm::{EsmSettings, Invoke, LocalEventSourceMapping};
use cfn_once_local::provision::queue_depth;
use cfn_once_tests::{LocalRegion, Options};
use lambda_runtime::LambdaEvent;

async fn setup(bodies: &[&str]) -> (LocalRegion, LocalEventSourceMapping) {
    let region = LocalRegion::new(Options { visibility_timeout_s: 1, ..Options::default() }).await;
    for body in bodies {
        region.sqs.send_message().queue_url(&region.queue.url).message_body(*body).send().await.expect("send");
    }
    let esm = LocalEventSourceMapping::new(
        region.sqs.clone(),
        &region.queue.url,
        EsmSettings { batch_size: 10, wait_time_s: 0, function_timeout_ms: 300 },
    )
    .await
    .expect("mapping");
    (region, esm)
}

fn failures(ids: Vec<String>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = ids
        .into_iter()
        .map(|id| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            failure
        })
        .collect();
    response
}

async fn depth(region: &LocalRegion) -> u64 {
    queue_depth(&region.sqs, &region.queue.url).await.expect("depth")
}

#[tokio::test]
async fn records_not_listed_as_failed_are_deleted() {
    let (region, esm) = setup(&["keep", "fail"]).await;
    let handler = |event: LambdaEvent<SqsEvent>| async move {
        assert_eq!(event.payload.records[0].event_source.as_deref(), Some("aws:sqs"));
        assert!(event.context.deadline > 0);
        let failed = event.payload.records.iter().filter(|r| r.body.as_deref() == Some("fail"));
        Ok(failures(failed.filter_map(|r| r.message_id.clone()).collect()))
    };
    let report = esm.poll_once(&handler).await.expect("poll");
    assert_eq!((report.received, report.deleted, report.failed, report.invoke), (2, 1, 1, Invoke::Returned));
    assert_eq!(depth(&region).await, 1, "the failed record stays for another try");
}

#[tokio::test]
async fn a_handler_error_deletes_nothing() {
    let (region, esm) = setup(&["a", "b"]).await;
    let handler = |_: LambdaEvent<SqsEvent>| async { Err::<SqsBatchResponse, _>(lambda_runtime::Error::from("boom")) };
    let report = esm.poll_once(&handler).await.expect("poll");
    assert_eq!((report.deleted, report.invoke), (0, Invoke::HandlerError("boom".into())));
    assert_eq!(depth(&region).await, 2);
}

#[tokio::test]
async fn a_timed_out_handler_deletes_nothing() {
    let (region, esm) = setup(&["a"]).await;
    let handler = |_: LambdaEvent<SqsEvent>| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(SqsBatchResponse::default())
    };
    let report = esm.poll_once(&handler).await.expect("poll");
    assert_eq!((report.deleted, report.invoke), (0, Invoke::TimedOut));
    assert_eq!(depth(&region).await, 1);
}

#[tokio::test]
async fn an_unknown_failure_identifier_fails_the_whole_batch() {
    let (region, esm) = setup(&["a", "b"]).await;
    let handler = |_: LambdaEvent<SqsEvent>| async { Ok(failures(vec!["not-in-this-batch".into()])) };
    let report = esm.poll_once(&handler).await.expect("poll");
    assert_eq!((report.deleted, report.failed), (0, 2));
    assert_eq!(depth(&region).await, 2);
}
