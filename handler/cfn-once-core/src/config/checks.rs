//! The checks across variables, once each has been read: what no single variable's range can
//! say (a heartbeat shorter than the lease, a deadline margin longer than a taker-over's answer,
//! a backoff floor the receive count allows), and the variables a deployment must set.

use super::{Config, MAX_RECEIVE_COUNT_DEFAULT};
use crate::budget::BACKOFF_FLOOR_S_MAX;

/// Every problem of `config` as a whole, in the order a reader fixes them; `reserve_ms_set`:
/// whether the environment still sets `CFN_ONCE_RESERVE_MS`, which is no longer read.
pub(super) fn problems(config: &Config, reserve_ms_set: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if config.topic_arns.is_empty() {
        problems.push(
            "CFN_ONCE_TOPIC_ARNS is not set: set it to the ServiceToken topic's ARN (comma-separate several)".into(),
        );
    }
    for arn in &config.topic_arns {
        if !arn.starts_with("arn:") || arn.split(':').count() != 6 {
            problems.push(format!("CFN_ONCE_TOPIC_ARNS entry {arn:?} is not an SNS topic ARN"));
        }
    }
    for arn in config.privileged_topic_arns.iter().filter(|arn| !config.topic_arns.contains(arn)) {
        problems.push(format!(
            "CFN_ONCE_PRIVILEGED_TOPIC_ARNS entry {arn:?} is not in CFN_ONCE_TOPIC_ARNS: a privileged topic must be one whose requests are accepted; add it there or remove it here"
        ));
    }
    if config.heartbeat_ms >= config.lease_ms {
        problems.push(format!(
            "CFN_ONCE_HEARTBEAT_MS ({}) must be shorter than CFN_ONCE_LEASE_MS ({}), or the lease lapses between heartbeats",
            config.heartbeat_ms, config.lease_ms
        ));
    }
    if reserve_ms_set {
        problems.push(
            "CFN_ONCE_RESERVE_MS is no longer read: the time kept to answer is computed from CFN_ONCE_STORE_TIMEOUT_MS, CFN_ONCE_PUT_TIMEOUT_MS and CFN_ONCE_SQS_TIMEOUT_MS; remove it"
                .into(),
        );
    }
    let settings = config.settings();
    if config.deadline_margin_ms <= settings.take_over_answer_ms() {
        problems.push(format!(
            "CFN_ONCE_DEADLINE_MARGIN_MS ({}) must exceed the {} ms a taker-over needs to answer (an acquire and three more lease-store calls of CFN_ONCE_STORE_TIMEOUT_MS, and a PUT of CFN_ONCE_PUT_TIMEOUT_MS): leases end where the margin begins, so a holder that crashes just before it leaves exactly the margin to answer FAILED",
            config.deadline_margin_ms,
            settings.take_over_answer_ms()
        ));
    }
    if let Some(floor_s) = settings.backoff_floor_s()
        && config.retry_delay_s_max < floor_s
    {
        problems.push(format!(
            "CFN_ONCE_RETRY_DELAY_S_MAX ({}) is shorter than the {floor_s} s backoff floor that keeps a message's receives within CFN_ONCE_MAX_RECEIVE_COUNT ({}) until its deadline; set it to at least {floor_s}",
            config.retry_delay_s_max, config.max_receive_count
        ));
    }
    if settings.backoff_floor_s().is_none() {
        problems.push(format!(
            "CFN_ONCE_MAX_RECEIVE_COUNT ({}) is too small for a {} s deadline ceiling: a message would reach the DLQ before its deadline unless it waited over {BACKOFF_FLOOR_S_MAX} s between looks; set the queue's maxReceiveCount and this variable to {MAX_RECEIVE_COUNT_DEFAULT} (infra/regional.yaml does)",
            config.max_receive_count, config.deadline_ceiling_s
        ));
    }
    problems
}
