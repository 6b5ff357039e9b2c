//! The sweeper: deletes lease records past their retention.
//!
//! MRSC tables have no TTL, so every record carries `expires_ms` and a scheduled function (the
//! same binary with `CFN_ONCE_MODE=sweeper`, see `infra/lease-table.yaml`) scans for records
//! whose time has passed and deletes them, each with the condition that it is still expired, so
//! a record refreshed meanwhile survives. Only lease records are touched (they have a `fence`);
//! the `control#active` item is not. A run stops early, leaving the rest to the next run, when
//! its time budget is spent: between pages and records, and in the middle of a call, which is cut
//! at the stop time (a delete cut there may or may not have been applied; either way the record
//! was expired, and the next run finds what is left).

use std::future::Future;
use std::time::Instant;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::lease::RECORD_FORMAT;
use serde::Serialize;

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Items the scan read (before filtering).
    pub scanned: u64,
    /// Expired records deleted.
    pub deleted: u64,
    /// Expired records found refreshed when deleting, and kept.
    pub kept: u64,
    /// Whether the whole table was covered (false: the time budget ran out first).
    pub complete: bool,
}

/// Records of a format this sweeper knows: a newer format's retention is that format's to say,
/// and its records are left to a newer sweeper (`lease::RECORD_FORMAT`).
const KNOWN_FORMAT: &str = "(attribute_not_exists(#format) OR #format <= :format)";

/// Deletes every lease record of `table_name` whose `expires_ms` is before `now_ms`, until done
/// or until `stop_at`, which every call is cut at: a run never outlasts it, whatever the client's
/// own timeouts (`app::sweeper_client`).
pub async fn sweep(client: &Client, table_name: &str, now_ms: u64, stop_at: Instant) -> anyhow::Result<SweepReport> {
    let mut report = SweepReport::default();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let scan = client
            .scan()
            .table_name(table_name)
            .consistent_read(true)
            .filter_expression(format!("attribute_exists(#fence) AND #expires < :now AND {KNOWN_FORMAT}"))
            .projection_expression("pk, sk")
            .expression_attribute_names("#fence", "fence")
            .expression_attribute_names("#expires", "expires_ms")
            .expression_attribute_names("#format", "format")
            .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":format", AttributeValue::N(RECORD_FORMAT.to_string()))
            .set_exclusive_start_key(start.take())
            .send();
        let Some(page) = before(stop_at, scan).await else { return Ok(report) };
        let page =
            page.map_err(|error| anyhow::anyhow!("Scan of {table_name} failed: {}", DisplayErrorContext(&error)))?;
        report.scanned += u64::try_from(page.scanned_count).unwrap_or(0);
        for key in page.items.unwrap_or_default() {
            let delete = client
                .delete_item()
                .table_name(table_name)
                .set_key(Some(key))
                .condition_expression(format!("#expires < :now AND {KNOWN_FORMAT}"))
                .expression_attribute_names("#expires", "expires_ms")
                .expression_attribute_names("#format", "format")
                .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
                .expression_attribute_values(":format", AttributeValue::N(RECORD_FORMAT.to_string()))
                .send();
            let Some(deleted) = before(stop_at, delete).await else { return Ok(report) };
            match deleted {
                Ok(_) => report.deleted += 1,
                Err(SdkError::ServiceError(service)) if service.err().is_conditional_check_failed_exception() => {
                    report.kept += 1;
                }
                Err(error) => anyhow::bail!("DeleteItem on {table_name} failed: {}", DisplayErrorContext(&error)),
            }
        }
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => {
                report.complete = true;
                return Ok(report);
            }
        }
    }
}

/// `call`'s result, or `None` if `stop_at` comes first (or has come).
async fn before<T>(stop_at: Instant, call: impl Future<Output = T>) -> Option<T> {
    if Instant::now() >= stop_at {
        return None;
    }
    tokio::time::timeout_at(stop_at.into(), call).await.ok()
}
