//! [`judge`] on observations made by hand: a healthy pair passes, and each miswiring is named.

use super::*;

const P: &str = "arn:aws:sqs:us-east-1:111122223333:cfn-once-primary";
const S: &str = "arn:aws:sqs:us-west-2:111122223333:cfn-once-secondary";
const T: &str = "arn:aws:sns:us-east-2:111122223333:cfn-once-service-token";

fn expected() -> Expected {
    Expected {
        on_aws: true,
        primary_region: "us-east-1".into(),
        secondary_region: "us-west-2".into(),
        witness_region: Some("us-east-2".into()),
        table: "cfn-once-leases".into(),
        topics: vec![("us-east-2".into(), T.into())],
    }
}

fn healthy() -> Observed {
    let queue = |arn: &str, delay_s| {
        Ok(QueueSeen {
            arn: arn.into(),
            delay_s: Some(delay_s),
            visibility_s: Some(180),
            redrive: Some(RedriveSeen {
                dlq_arn: format!("{arn}-dlq"),
                max_receive_count: Some(1000),
                dlq_exists: true,
            }),
        })
    };
    let handler = || {
        Ok(HandlerSeen {
            timeout_s: 120,
            secondary_delay_s: Some(5),
            visibility_timeout_s: Some(180),
            max_receive_count: Some(1000),
            raw_delivery: false,
            topic_arns: vec![T.into()],
        })
    };
    let subscription = |queue: &str| SubscriptionSeen { topic_arn: T.into(), queue_arn: queue.into(), raw: false };
    Observed {
        queues: [queue(P, 0), queue(S, 5)],
        handlers: [handler(), handler()],
        topics_unreadable: Vec::new(),
        subscriptions: vec![subscription(P), subscription(S)],
        table: Ok(TableSeen {
            key: vec![("pk".into(), "HASH".into()), ("sk".into(), "RANGE".into())],
            consistency: Some("STRONG".into()),
            replicas: vec!["us-east-1".into(), "us-west-2".into()],
            witnesses: vec!["us-east-2".into()],
        }),
        control: Ok(None),
    }
}

/// The items `judge` finds miswired, by name.
fn miswired(observed: &Observed) -> Vec<String> {
    judge(&expected(), observed).into_iter().filter(|i| i.status == Status::Miswired).map(|i| i.name).collect()
}

#[test]
fn a_healthy_pair_passes() {
    assert_eq!(miswired(&healthy()), Vec::<String>::new());
}

#[test]
fn each_miswiring_is_named() {
    let check = |change: &dyn Fn(&mut Observed), name: &str| {
        let mut observed = healthy();
        change(&mut observed);
        assert_eq!(miswired(&observed), [name], "{name}");
    };
    check(&|o| o.subscriptions.retain(|s| s.queue_arn != S), &format!("topic {T}"));
    check(&|o| o.subscriptions[0].raw = true, &format!("topic {T}"));
    check(&|o| o.queues[1].as_mut().unwrap().delay_s = Some(0), "secondary queue delay");
    check(&|o| o.queues[1].as_mut().unwrap().delay_s = Some(9), "secondary queue delay");
    check(&|o| o.queues[0].as_mut().unwrap().delay_s = Some(5), "primary queue delay");
    check(&|o| o.queues[0].as_mut().unwrap().redrive = None, "primary queue redrive");
    check(&|o| o.queues[1].as_mut().unwrap().redrive.as_mut().unwrap().dlq_exists = false, "secondary queue redrive");
    check(
        &|o| o.queues[0].as_mut().unwrap().redrive.as_mut().unwrap().max_receive_count = Some(5),
        "primary queue redrive",
    );
    check(&|o| o.queues[0].as_mut().unwrap().visibility_s = Some(60), "primary queue visibility");
    check(&|o| o.handlers[1].as_mut().unwrap().topic_arns.clear(), "ServiceTopicArns");
    check(
        &|o| {
            o.subscriptions.push(SubscriptionSeen {
                topic_arn: "arn:aws:sns:eu-west-1:1:other".into(),
                queue_arn: P.into(),
                raw: false,
            })
        },
        "ServiceTopicArns",
    );
    check(&|o| o.control = Ok(Some("us-west-2".into())), "active region");
    check(&|o| o.table.as_mut().unwrap().consistency = None, "lease table cfn-once-leases");
    check(&|o| o.table.as_mut().unwrap().witnesses = vec!["eu-west-1".into()], "lease table cfn-once-leases");
}

#[test]
fn the_report_reads_one_line_an_item() {
    let report = Report { target: "t".into(), items: judge(&expected(), &healthy()) };
    let text = report.render();
    assert!(report.passed(), "{text}");
    assert!(text.contains("OK          secondary queue delay: DelaySeconds 5"), "{text}");
    assert!(text.contains("NOT CHECKED alarms"), "{text}");
}
