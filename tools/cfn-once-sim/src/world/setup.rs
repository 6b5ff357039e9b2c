//! A seed's world as it starts: its stores, queues, clocks and workers, the scenario's events
//! on the calendar, and the requests CloudFormation sends (SNS envelopes, ResponseURLs, wait
//! condition handles).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use cfn_once_core::clock::Clock;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::metrics::NoMetrics;
use cfn_once_core::provider::Router;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::worker::{Ports, Worker};
use serde_json::json;

use crate::provider::{SIM_TYPE, SimProvider};
use crate::queues::{Queues, SimQueue};
use crate::region::{SimControl, SkewedClock};
use crate::scenario::{Kind, Region, RequestPlan, Scenario};
use crate::shared::{Shared, T0_MS};
use crate::sink::SimSink;
use crate::stores::{RegionStore, Table};

use super::{Event, Parameters, TOPIC_ARN, World, stack_arn, stack_id};

/// What each region's worker is built on: the shared world, the lease table, the active
/// region and the regions' clocks.
type WorldParts<'a> = (&'a Arc<Shared>, &'a Arc<Table>, &'a Arc<Mutex<Region>>, &'a [Arc<SkewedClock>; 2]);

/// `epoch_ms` as a presigned URL's `X-Amz-Date` says it: `20270115T080000Z`.
fn amz_date(epoch_ms: u64) -> String {
    let text = cfn_once_core::timestamp::format_ms(epoch_ms);
    format!("{}Z", text[..19].replace(['-', ':'], ""))
}

impl World {
    pub(super) fn new(scenario: Scenario, parameters: &Parameters, tracing: bool) -> Self {
        let margin_ms = parameters.settings[0].deadline_margin_ms;
        let (bodies, urls, handles) = Self::requests(&scenario);
        let shared = Self::shared(&scenario, &handles, margin_ms, tracing);
        let table = Arc::new(Table::new(scenario.options.mode, scenario.options.planted_bug));
        let active = Arc::new(Mutex::new(Region::Primary));
        let clocks = Region::BOTH.map(|region| {
            Arc::new(SkewedClock {
                base: shared.clock.clone(),
                offset_ms: AtomicI64::new(scenario.skew_ms[region.index()]),
            })
        });
        let queues = Arc::new(Mutex::new(Queues::default()));
        let sim_queues = Region::BOTH
            .map(|region| Arc::new(SimQueue { region, queues: Arc::clone(&queues), shared: Arc::clone(&shared) }));
        let workers = Self::workers(&scenario, parameters, (&shared, &table, &active, &clocks));
        let old_workers = workers.clone().map(|worker| worker.with_decision_table(crate::frozen::decide_format_1));
        Self::observe_deadlines(&scenario, &shared, &bodies, &handles);
        let events = Self::calendar(&scenario);
        let handover_deadlines = Arc::new(Self::handover_deadlines(&scenario));
        Self {
            scenario,
            parameters: parameters.clone(),
            shared,
            table,
            workers,
            old_workers,
            clocks,
            sim_queues,
            queues,
            active,
            bodies,
            urls,
            handles,
            tasks: BTreeMap::new(),
            next_task: 0,
            up: [true, true],
            events,
            lease_and_skew_ms: parameters.settings[0].lease_ms + parameters.settings[0].skew_ms,
            hidden_unstarted: Vec::new(),
            handover_deadlines,
        }
    }

    /// What the world's parts share: the virtual clock, the faults and what is observed, with
    /// the scenario's planted bugs and each handle's expiry; the scenario's kind and settings
    /// traced, and the stories it tells covered.
    fn shared(scenario: &Scenario, handles: &[Option<String>], margin_ms: u64, tracing: bool) -> Arc<Shared> {
        // When S3 starts refusing each handle (elapsed ms): a day after it was presigned.
        let handle_expiries = scenario
            .handle_expires_s
            .map(|expires_s| {
                handles
                    .iter()
                    .enumerate()
                    .filter_map(|(index, handle)| {
                        let signed_ms = scenario.requests[index].sent_at_ms.saturating_sub(1_000);
                        Some((handle.clone()?, signed_ms + expires_s * 1_000))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let shared = Arc::new(
            Shared::new(scenario.seed, scenario.faults, scenario.store_outage, margin_ms, tracing)
                .with_late_store_faults(scenario.late_store_faults)
                .with_handle_expiries(
                    handle_expiries,
                    scenario.options.planted_bug == Some(crate::scenario::PlantedBug::ExpiredRetried),
                )
                .with_lost_answer_transient(
                    scenario.options.planted_bug == Some(crate::scenario::PlantedBug::RerunSameFence),
                )
                .with_unknown_as_not_applied(
                    scenario.options.planted_bug == Some(crate::scenario::PlantedBug::UnknownAsNotApplied),
                )
                .with_token_per_run(scenario.options.planted_bug == Some(crate::scenario::PlantedBug::TokenPerRun)),
        );
        shared.cover(scenario.kind.name());
        shared.trace(None, || {
            let timeout = scenario.function_timeout;
            format!(
                "{}; function timeout {} s, visibility {} s, maxReceiveCount {}, secondary delay {} s, batches of {}, {} at once",
                scenario.kind.name(),
                timeout.timeout_s,
                timeout.visibility_s,
                scenario.max_receive_count,
                scenario.secondary_delay_ms / 1_000,
                scenario.batch_size,
                scenario.concurrency,
            )
        });
        if scenario.kind == Kind::LongWork {
            if scenario
                .outages
                .iter()
                .any(|(region, from, _)| *region == Region::Primary && *from > scenario.requests[0].sent_at_ms)
            {
                shared.cover("long work: the primary down in the middle of it");
            }
            if scenario.flips.iter().any(|(at, _)| *at > scenario.requests[0].sent_at_ms) {
                shared.cover("long work: the active region flipped in the middle of it");
            }
        }
        if scenario.function_timeout.timeout_s >= 900 {
            shared.cover("function timeout 900 s");
        }
        shared
    }

    /// Each region's worker, on the world's store, sink, queue, clock and control, with the
    /// settings of the scenario's function timeout and its drawn secondary delay.
    fn workers(
        scenario: &Scenario,
        parameters: &Parameters,
        (shared, table, active, clocks): WorldParts<'_>,
    ) -> [Worker; 2] {
        Region::BOTH.map(|region| {
            let router = Router::new().register(SIM_TYPE, SimProvider { shared: Arc::clone(shared), region });
            let ports = Ports {
                store: Arc::new(RegionStore::new(region, Arc::clone(table), Arc::clone(shared))),
                sink: Arc::new(SimSink { region, shared: Arc::clone(shared) }),
                router: Arc::new(router),
                clock: Arc::clone(&clocks[region.index()]) as Arc<dyn Clock>,
                random: Arc::new(SplitMix64::new(scenario.seed.rotate_left(17) ^ region.index() as u64)),
                control: Arc::new(SimControl { region, active: Arc::clone(active), shared: Arc::clone(shared) }),
                metrics: Arc::new(NoMetrics),
            };
            let input = InputPolicy {
                topic_arns: vec![TOPIC_ARN.into()],
                raw_delivery: false,
                urls: UrlPolicy::new(vec![]),
                privileged_topic_arns: vec![],
            };
            let mut settings = parameters
                .settings_by_timeout
                .get(&scenario.function_timeout.timeout_s)
                .unwrap_or(&parameters.settings)[region.index()]
            .clone();
            // The queue's delay drawn for this seed, as the template would pass it.
            settings.secondary_delay_s = scenario.secondary_delay_ms / 1_000;
            settings.proportioned_margins =
                scenario.options.planted_bug != Some(crate::scenario::PlantedBug::FixedMargin);
            Worker::new(ports, input, settings)
        })
    }

    /// Writes down, for the end checks, each request's deadline, and each work's, by the
    /// fingerprint of the request CloudFormation sent.
    fn observe_deadlines(scenario: &Scenario, shared: &Shared, bodies: &[String], handles: &[Option<String>]) {
        let mut observed = shared.observed();
        for (index, plan) in scenario.requests.iter().enumerate() {
            let message = serde_json::from_str::<serde_json::Value>(&bodies[index])
                .ok()
                .and_then(|envelope| serde_json::from_str(envelope["Message"].as_str()?).ok());
            if let Some(request) = message {
                observed.deadlines.insert(Fingerprint::of(&request), plan.deadline_ms());
                if let (Some(work_ms), Some(handle)) = (plan.work_deadline_ms(), &handles[index]) {
                    let stack = stack_id(scenario.seed);
                    let logical_id = format!("Resource{}", plan.original(index));
                    let work = cfn_once_core::work::work_key_of(&stack, &logical_id, handle);
                    observed.work_deadlines.insert((Fingerprint::of(&request), work.request_id), work_ms);
                }
            }
        }
    }

    /// The scenario's events on the calendar, in time order (ties in the order scheduled).
    fn calendar(scenario: &Scenario) -> BTreeMap<(u64, u64), Event> {
        let mut events = BTreeMap::new();
        let mut sequence = 0;
        let mut schedule = |at_ms: u64, event: Event| {
            events.insert((T0_MS + at_ms, sequence), event);
            sequence += 1;
        };
        for (index, plan) in scenario.requests.iter().enumerate() {
            schedule(plan.sent_at_ms, Event::Publish(index));
        }
        for (region, from, to) in &scenario.outages {
            schedule(*from, Event::OutageStart(*region));
            schedule(*to, Event::OutageEnd(*region));
        }
        for (at, region) in &scenario.flips {
            schedule(*at, Event::Flip(*region));
        }
        for (at, region, jump) in &scenario.jumps {
            schedule(*at, Event::Jump(*region, *jump));
        }
        for (at, region) in &scenario.crashes {
            schedule(*at, Event::Crash(*region));
        }
        for (index, at_ms, answer_after_ms) in scenario.upgrade.iter().flat_map(|upgrade| &upgrade.newer_takes) {
            schedule(*at_ms, Event::NewerTakes(*index, *answer_after_ms));
        }
        if let Some(every_ms) = scenario.sweep_every_ms {
            let last_ms = scenario.requests.iter().map(RequestPlan::owed_until_ms).max().unwrap_or(0);
            for at_ms in (every_ms..last_ms).step_by(usize::try_from(every_ms).unwrap_or(usize::MAX)) {
                schedule(at_ms, Event::Sweep);
            }
        }
        events
    }

    /// The deadline of each hand-over's request, by RequestId: a request naming a wait
    /// condition handle that is not a Delete.
    fn handover_deadlines(scenario: &Scenario) -> BTreeMap<String, u64> {
        scenario
            .requests
            .iter()
            .enumerate()
            .filter(|(_, plan)| plan.wait_condition_s.is_some() && plan.delete_of.is_none())
            .map(|(index, plan)| {
                let request_id = match plan.update_of {
                    Some(_) => format!("update-{index}"),
                    None => format!("request-{}", plan.original(index)),
                };
                (request_id, plan.deadline_ms())
            })
            .collect()
    }

    /// The CloudFormation requests of the scenario as SNS envelopes (published at their send
    /// time), their ResponseURLs, and their wait condition handles.
    fn requests(scenario: &Scenario) -> (Vec<String>, Vec<String>, Vec<Option<String>>) {
        let mut bodies = Vec::new();
        let mut urls = Vec::new();
        let mut handles = Vec::new();
        let seed = scenario.seed;
        // A handle is presigned a second before the request that first names it is sent; its
        // URL says when it expires, as CloudFormation's do, unless the scenario leaves that out.
        let handle_of = |index: usize| {
            let expiry = match (scenario.handle_expires_s, scenario.opaque_handles) {
                (Some(expires_s), false) => {
                    let signed_ms = T0_MS + scenario.requests[index].sent_at_ms.saturating_sub(1_000);
                    format!("X-Amz-Date={}&X-Amz-Expires={expires_s}&", amz_date(signed_ms))
                }
                _ => String::new(),
            };
            format!(
                "https://cloudformation-waitcondition-us-east-2.s3.us-east-2.amazonaws.com/sim/{seed}/{index}?{expiry}X-Amz-Signature=h{index}"
            )
        };
        let mut properties_sent: Vec<serde_json::Value> = Vec::new();
        for (index, plan) in scenario.requests.iter().enumerate() {
            let original = plan.original(index);
            let url = format!(
                "https://cloudformation-custom-resource-response-useast2.s3.us-east-2.amazonaws.com/sim/{seed}/{index}?X-Amz-Signature=s{index}"
            );
            let (kind, request_id) = match (plan.delete_of, plan.update_of) {
                (Some(_), _) => ("Delete", format!("delete-{index}")),
                (None, Some(_)) => ("Update", format!("update-{index}")),
                (None, None) => ("Create", format!("request-{original}")),
            };
            // An Update's work writes an item of its own, so that its polls are told from the
            // old work's.
            let item = if plan.update_of.is_some() { index } else { original };
            let mut request = json!({
                "RequestType": kind,
                "ResponseURL": url,
                "StackId": stack_arn(seed),
                "RequestId": request_id,
                "LogicalResourceId": format!("Resource{original}"),
                "ResourceType": SIM_TYPE,
                "ResourceProperties": {
                    "WorkMs": plan.work_ms.to_string(),
                    "Item": format!("item-{item}"),
                    "ServiceTimeout": plan.service_timeout_s.to_string(),
                },
            });
            if plan.delete_of.is_some() || plan.update_of.is_some() {
                request["PhysicalResourceId"] = json!(format!("item-{original}"));
            }
            if let Some(wait) = plan.wait {
                let properties = &mut request["ResourceProperties"];
                properties["WaitMs"] = json!(wait.in_progress_ms.to_string());
                properties["PollIntervalS"] = json!(wait.poll_interval_s.to_string());
                properties["PollWorkMs"] = json!(wait.poll_work_ms.to_string());
            }
            if plan.panic_percent > 0 {
                request["ResourceProperties"]["PanicPercent"] = json!(plan.panic_percent.to_string());
            }
            // An Update names a new handle; a Delete, the one its resource was created with.
            let own = plan.handle_owner(index);
            let handle = plan.wait_condition_s.map(|timeout_s| {
                let properties = &mut request["ResourceProperties"];
                properties[cfn_once_core::wait_condition::HANDLE_PROPERTY] = json!(handle_of(own));
                properties[cfn_once_core::wait_condition::TIMEOUT_PROPERTY] = json!(timeout_s.to_string());
                handle_of(own)
            });
            properties_sent.push(request["ResourceProperties"].clone());
            if plan.update_of.is_some() {
                request["OldResourceProperties"] = properties_sent[plan.old_from.unwrap_or(original)].clone();
            }
            let envelope = json!({
                "Type": "Notification",
                "MessageId": format!("sim-{seed}-{index}"),
                "TopicArn": TOPIC_ARN,
                "Message": request.to_string(),
                "Timestamp": cfn_once_core::timestamp::format_ms(T0_MS + plan.sent_at_ms),
                "SignatureVersion": "1",
            });
            bodies.push(envelope.to_string());
            urls.push(url);
            // A request owes a signal only to a handle it is the first to name.
            handles.push(handle.filter(|_| plan.delete_of.is_none() && own == index));
        }
        (bodies, urls, handles)
    }
}
