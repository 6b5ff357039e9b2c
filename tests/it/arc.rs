//! The ARC control adapter against a stand-in cluster that speaks ARC's wire format (moto has
//! no ARC): endpoint rotation, failures, fallback, and a drill that flips routing controls.

use std::sync::Arc;

use cfn_once::adapters::arc::{ArcCluster, ArcControl};
use cfn_once::system_clock::SystemClock;
use cfn_once_core::control::{ActivitySource, CachedActivity};
use cfn_once_core::decision::Activity;
use cfn_once_local::provision;
use cfn_once_ops::drill::{self, DrillControl, DrillOptions, DrillTarget};
use cfn_once_tests::{EndpointMode, FakeArcCluster, TwoRegions, moto};

const PRIMARY: &str = "arn:aws:route53-recovery-control::123456789012:controlpanel/p/routingcontrol/primary";
const SECONDARY: &str = "arn:aws:route53-recovery-control::123456789012:controlpanel/p/routingcontrol/secondary";

async fn cluster(fake: &FakeArcCluster) -> ArcCluster {
    ArcCluster::new(&provision::sdk_config(moto(), "us-east-1").await, &fake.endpoints())
}

#[tokio::test]
async fn the_first_endpoint_that_answers_decides() {
    let fake = FakeArcCluster::start(
        &[EndpointMode::Down, EndpointMode::Fail, EndpointMode::Answer],
        &[(PRIMARY, true), (SECONDARY, false)],
    );
    let control = ArcControl::new(cluster(&fake).await, PRIMARY);
    assert_eq!(control.activity().await, Ok(Activity::Active));
    let standby = ArcControl::new(cluster(&fake).await, SECONDARY);
    assert_eq!(standby.activity().await, Ok(Activity::Standby));
    let requests = fake.requests();
    assert_eq!(requests[0], 0, "nothing listens there");
    assert!(
        requests[1] >= 1 && requests[2] >= 2,
        "the failing endpoint was tried, the answering one answered: {requests:?}"
    );
}

#[tokio::test]
async fn calls_rotate_through_the_endpoints() {
    let fake =
        FakeArcCluster::start(&[EndpointMode::Answer, EndpointMode::Answer, EndpointMode::Answer], &[(PRIMARY, true)]);
    let control = ArcControl::new(cluster(&fake).await, PRIMARY);
    for _ in 0..6 {
        assert_eq!(control.activity().await, Ok(Activity::Active));
    }
    assert_eq!(fake.requests(), vec![2, 2, 2], "each endpoint took its turn");
}

#[tokio::test]
async fn when_every_endpoint_fails_the_last_known_answer_stands() {
    let fake = FakeArcCluster::start(&[EndpointMode::Answer, EndpointMode::Answer], &[(PRIMARY, false)]);
    let source = Arc::new(ArcControl::new(cluster(&fake).await, PRIMARY));
    let cached = CachedActivity::new(source.clone(), Arc::new(SystemClock), 0, Activity::Active);
    assert_eq!(cached.activity().await, Ok(Activity::Standby));
    fake.set_failing(0, true);
    fake.set_failing(1, true);
    let error = source.activity().await.expect_err("every endpoint fails");
    assert!(error.to_string().contains("every ARC endpoint failed"), "{error}");
    assert_eq!(cached.activity().await, Ok(Activity::Standby), "the last known answer, not the fallback");

    let fresh = CachedActivity::new(source, Arc::new(SystemClock), 0, Activity::Active);
    assert_eq!(fresh.activity().await, Ok(Activity::Active), "without any answer, the configured fallback");
}

#[tokio::test]
async fn flips_set_both_routing_controls_in_one_call() {
    let fake =
        FakeArcCluster::start(&[EndpointMode::Fail, EndpointMode::Answer], &[(PRIMARY, true), (SECONDARY, false)]);
    cluster(&fake).await.set(&[(PRIMARY.into(), false), (SECONDARY.into(), true)]).await.expect("flip");
    assert_eq!((fake.is_on(PRIMARY), fake.is_on(SECONDARY)), (Some(false), Some(true)));
    assert_eq!(fake.updates(), vec![vec![(PRIMARY.to_owned(), false), (SECONDARY.to_owned(), true)]]);
}

#[tokio::test]
async fn a_drill_with_arc_routing_controls_fails_over_and_back() {
    let fake =
        FakeArcCluster::start(&[EndpointMode::Down, EndpointMode::Answer], &[(PRIMARY, true), (SECONDARY, false)]);
    let settings =
        [("CFN_ONCE_CONTROL_CACHE_MS", "300"), ("CFN_ONCE_STANDBY_RETRY_S", "1"), ("CFN_ONCE_LEASE_MS", "5000")];
    let (sdk, endpoints) = (provision::sdk_config(moto(), "us-east-1").await, fake.endpoints());
    let mut regions = TwoRegions::with_primary(2, &settings, move |mut ports| {
        let source = Arc::new(ArcControl::new(ArcCluster::new(&sdk, &endpoints), PRIMARY));
        ports.control = Arc::new(CachedActivity::new(source, Arc::new(SystemClock), 300, Activity::Active));
        ports
    })
    .await;
    let mut target = DrillTarget::from_env_file(&regions.env.file);
    target.control = DrillControl::Arc {
        endpoints: fake.endpoints(),
        primary_routing_control_arn: PRIMARY.into(),
        secondary_routing_control_arn: SECONDARY.into(),
    };
    let report =
        drill::run(&target, DrillOptions { settle_ms: 800, answer_timeout_ms: 60_000 }, |_| {}).await.expect("drill");
    println!("{}", report.render());
    assert!(report.passed, "{report:?}");
    assert_eq!(fake.updates().len(), 2, "one call per flip");
    assert_eq!((fake.is_on(PRIMARY), fake.is_on(SECONDARY)), (Some(true), Some(false)), "flipped back");
    regions.stop().await;
}
