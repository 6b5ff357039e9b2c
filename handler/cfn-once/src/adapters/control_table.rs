//! The default active-region control: one item in the lease table.
//!
//! `pk = "control#active"`, `sk = "control"`, `active_region = <region>`, `format`
//! ([`CONTROL_FORMAT`]; an item without one is format 1). The lease table is an
//! MRSC global table, so the item is strongly consistent in every region and costs nothing
//! extra; the drill flips it with one PutItem. No item means the primary is active.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::control::{ActivitySource, CONTROL_FORMAT, ControlError};
use cfn_once_core::decision::Activity;

use crate::aws::classify;

const CONTROL_PK: &str = "control#active";
const CONTROL_SK: &str = "control";
const ACTIVE_REGION: &str = "active_region";
const FORMAT: &str = "format";

/// The control item of one lease table, seen from one region.
#[derive(Debug, Clone)]
pub struct TableControl {
    client: Client,
    table_name: String,
    region: String,
}

impl TableControl {
    /// The control in `table_name`, for the deployment in `region`.
    pub fn new(client: Client, table_name: impl Into<String>, region: impl Into<String>) -> Self {
        Self { client, table_name: table_name.into(), region: region.into() }
    }

    fn key() -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("pk".to_owned(), AttributeValue::S(CONTROL_PK.into())),
            ("sk".to_owned(), AttributeValue::S(CONTROL_SK.into())),
        ])
    }

    /// The region the item names, `None` if there is no item.
    pub async fn active_region(&self) -> Result<Option<String>, ControlError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| ControlError(classify(&error).into_text()))?;
        let Some(item) = output.item else { return Ok(None) };
        let format = item.get(FORMAT).and_then(|value| value.as_n().ok()?.parse::<u32>().ok()).unwrap_or(1);
        if format > CONTROL_FORMAT {
            return Err(ControlError(format!(
                "the control item is of format {format}, newer than this version's {CONTROL_FORMAT}: not read"
            )));
        }
        Ok(item.get(ACTIVE_REGION).and_then(|value| value.as_s().ok()).cloned())
    }

    /// Makes `region` the active one (the drill's flip).
    pub async fn set_active_region(&self, region: &str, now_ms: u64, by: &str) -> Result<(), ControlError> {
        let mut item = Self::key();
        item.insert(ACTIVE_REGION.into(), AttributeValue::S(region.into()));
        item.insert("updated_ms".into(), AttributeValue::N(now_ms.to_string()));
        item.insert("updated_by".into(), AttributeValue::S(by.into()));
        item.insert(FORMAT.into(), AttributeValue::N(CONTROL_FORMAT.to_string()));
        let put = self
            .client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#format) OR #format <= :format")
            .expression_attribute_names("#format", FORMAT)
            .expression_attribute_values(":format", AttributeValue::N(CONTROL_FORMAT.to_string()))
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            Err(aws_sdk_dynamodb::error::SdkError::ServiceError(service))
                if service.err().is_conditional_check_failed_exception() =>
            {
                Err(ControlError(format!(
                    "the control item was written by a newer version of cfn-once (format above {CONTROL_FORMAT}); flip it with that version"
                )))
            }
            Err(error) => Err(ControlError(classify(&error).into_text())),
        }
    }
}

#[async_trait]
impl ActivitySource for TableControl {
    async fn activity(&self) -> Result<Activity, ControlError> {
        Ok(match self.active_region().await? {
            Some(active) if active != self.region => Activity::Standby,
            // No item: nobody flipped anything, and the primary (the only one asking) is active.
            _ => Activity::Active,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfn_once_core::request::StackArn;

    #[test]
    fn the_control_item_can_never_be_a_request_record() {
        // A lease record's partition key is always a stack ARN (`RequestKey::stack_id` is a
        // `StackArn`, which only a stack ARN parses into): this item's is not one, so no request
        // can ever be acquired over it, and the sweeper (which deletes lease records) never
        // meets it as one.
        assert_eq!(StackArn::parse(CONTROL_PK), None);
    }
}
