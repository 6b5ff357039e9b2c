//! What one request costs in DynamoDB calls, counted on the wire (SDK retries included).
//! DESIGN §3: the happy path is two conditional writes plus at most one more, and no reads; a
//! duplicate arriving after the answer costs one refused conditional write.

use std::time::Duration;

use cfn_once_tests::{LocalRegion, Options};

#[tokio::test]
async fn the_happy_path_costs_three_writes_and_no_reads() {
    let region = LocalRegion::new(Options::default()).await;
    let app = region.app(&region.config(&[]));
    let esm = region.esm(10).await;
    let sent = region.request("create-echo.json").await;
    region.publish(&sent).await;
    region.counter.reset();
    region.serve_until_answered(&esm, &app, &sent, Duration::from_secs(30)).await;
    let happy = region.counter.snapshot();
    println!("DynamoDB calls for one request on the happy path: {happy:?}");
    assert_eq!(happy.get("UpdateItem"), Some(&3), "acquire, commit, mark delivered: {happy:?}");
    assert_eq!(happy.values().sum::<u32>(), 3, "nothing else, in particular no GetItem: {happy:?}");

    region.counter.reset();
    region.publish(&sent).await;
    region.drain(&esm, &app, Duration::from_secs(30)).await;
    let duplicate = region.counter.snapshot();
    println!("DynamoDB calls for a duplicate delivered after the answer: {duplicate:?}");
    assert_eq!(duplicate.get("UpdateItem"), Some(&1), "one refused acquire, its ALL_OLD item decides: {duplicate:?}");
    assert_eq!(duplicate.values().sum::<u32>(), 1, "{duplicate:?}");
    assert_eq!(region.responses(&sent).await.len(), 1);
}
