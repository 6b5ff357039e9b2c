//! `Custom::DynamoDBItem`: one item in a DynamoDB table, owned by a CloudFormation resource.
//!
//! For seeding configuration, feature flags or tenant records from a template. Create and
//! Update put the whole item, Delete removes it; every write is fenced (see `fenced`), so a
//! stale execution of the same request cannot overwrite a newer one. Properties:
//!
//! * `TableName`: the table, by name or ARN; it must be allowed by `CFN_ONCE_ITEM_TABLES` and is
//!   never the lease table, however it is named (tables are compared by identity, see
//!   `aws_names::TableRef`);
//! * `Region` (optional): the table's region, an AWS region name; by default the stack's (or the
//!   ARN's), so whichever of the two handler regions answers writes the same table;
//! * `Key`: the key attributes, e.g. `{"pk": "tenant#42"}` or `{"id": {"N": "7"}}`;
//! * `Attributes` (optional): the other attributes;
//! * `Adopt` (optional, `"true"`): take over an item that already exists at the key and is not
//!   this resource's (another resource's, or one cfn-once did not write). Without it such a
//!   Create or Update is answered FAILED, naming the key and its owner. Only a privileged request
//!   adopts (`CFN_ONCE_PRIVILEGED_TOPIC_ARNS`; every request is where it names no topic): any
//!   other is written as without `Adopt`, and answered FAILED saying so where an item is in the
//!   way.
//!
//! A plain string is a string attribute (CloudFormation turns every scalar into a string); other
//! types are written as one typed value, as in DynamoDB JSON: `{"N": "5"}`, `{"BOOL": "true"}`,
//! `{"NULL": "true"}`, `{"SS": [..]}`, `{"NS": [..]}`, `{"L": [..]}`, `{"M": {..}}`.
//!
//! **It owns only what it created.** Every item it writes records its owner, the stack and the
//! logical resource (`cfn_once_owner`, see `cfn_once::fenced`), and every write is one condition:
//! fenced, and owned. A Create (or a replacing Update) on a key that holds an item of another
//! owner, or an item cfn-once did not write, is refused unless `Adopt` says otherwise; a Delete
//! removes the item only if this resource owns it, and succeeds (doing nothing) otherwise. So a
//! rollback Delete after a failed Create never wipes a record that existed before the stack, and
//! two resources naming one key cannot overwrite each other.
//!
//! The PhysicalResourceId is `dynamodb-item:<region>:<table>:<key as DynamoDB JSON>`, so changing
//! the region, table or key replaces the resource (CloudFormation then deletes the old item). A
//! Delete for an id of another shape is the rollback of a Create that failed, was abandoned at its
//! deadline, or never answered (CloudFormation then makes up an id): the item its properties
//! name is deleted if this resource owns it (that Create may have written it before it stopped),
//! and the Delete succeeds whether or not there was anything to delete. A Delete deletes (one
//! conditional `DeleteItem`): nothing of cfn-once's is left for the table's readers. No request of
//! this provider both writes and deletes one key (a changed key is a replacement, which
//! CloudFormation deletes with a request of its own), so it needs no tombstone (`cfn_once::fenced`,
//! "A delete deletes").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::properties::PropertyError;
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step};
use cfn_once_core::request::PHYSICAL_ID_BYTES_MAX;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::fenced::{
    Deleted, FENCE_ATTRIBUTE, FencedTable, FencedWriteError, Owner, SCOPE_ATTRIBUTE, WriteRules, Written,
};
use cfn_once_core::aws_names::{ItemTables, TableRef, is_region};

/// The ResourceType this provider is registered under.
pub const DYNAMODB_ITEM_TYPE: &str = "Custom::DynamoDBItem";

const ID_PREFIX: &str = "dynamodb-item:";

/// The provider.
#[derive(Debug)]
pub struct DynamoDbItem {
    sdk: SdkConfig,
    attempt_timeout_ms: u64,
    /// One client per table region, made on first use.
    clients: Mutex<HashMap<String, Client>>,
    allowed: ItemTables,
    lease_table: String,
}

/// The resource's properties.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ItemProperties {
    /// The table, by name or ARN.
    pub table_name: String,
    /// The item's key attributes.
    pub key: Map<String, Value>,
    /// The item's other attributes.
    #[serde(default)]
    pub attributes: Map<String, Value>,
    /// The table's region; by default the ARN's, else the stack's.
    pub region: Option<String>,
    /// Take over an existing item that is not this resource's.
    #[serde(default)]
    pub adopt: bool,
}

impl DynamoDbItem {
    /// A provider writing with `sdk`'s credentials to the tables `allowed` permits, never
    /// `lease_table`.
    pub fn new(sdk: &SdkConfig, attempt_timeout_ms: u64, allowed: ItemTables, lease_table: impl Into<String>) -> Self {
        Self {
            sdk: sdk.clone(),
            attempt_timeout_ms,
            clients: Mutex::new(HashMap::new()),
            allowed,
            lease_table: lease_table.into(),
        }
    }

    fn table(&self, region: &str, table: &str) -> FencedTable {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let client = clients
            .entry(region.to_owned())
            .or_insert_with(|| crate::aws::dynamodb_client(&self.sdk, self.attempt_timeout_ms, region))
            .clone();
        FencedTable::with_client(client, table)
    }

    fn check_table(&self, table: &str) -> Result<TableRef, ProviderError> {
        let parsed =
            TableRef::parse(table).map_err(|why| PropertyError::new(format!("invalid property TableName: {why}")))?;
        if self.allowed.allows(&parsed, &self.lease_table) {
            return Ok(parsed);
        }
        Err(ProviderError::Failed(if parsed.name == self.lease_table {
            format!("TableName {table} is cfn-once's own lease table, which providers may never write")
        } else {
            format!("TableName {table} is not allowed: add it to the handler's CFN_ONCE_ITEM_TABLES")
        }))
    }

    /// Where `properties` put the item: checked, but not yet checked against the allowed tables.
    fn locate(&self, ctx: &ProviderContext, properties: &ItemProperties) -> Result<Location, ProviderError> {
        let table = TableRef::parse(&properties.table_name)
            .map_err(|why| PropertyError::new(format!("invalid property TableName: {why}")))?;
        let key = attribute_map(&properties.key, "Key")?;
        if key.is_empty() {
            return Err(PropertyError::new("invalid property Key: name at least the table's key attributes").into());
        }
        for (name, value) in &key {
            if !matches!(value, AttributeValue::S(_) | AttributeValue::N(_)) {
                return Err(PropertyError::new(format!(
                    "invalid property Key.{name}: a key attribute must be a string or {{\"N\": ...}}"
                ))
                .into());
            }
        }
        let region =
            match properties.region.clone().or_else(|| table.region.clone()).or_else(|| stack_region(&ctx.stack_id)) {
                // A region the SDK turns into an endpoint: a host name here would point the
                // handler's credentials anywhere.
                Some(region) if is_region(&region) => region,
                _ => {
                    return Err(PropertyError::new(
                        "invalid property Region: name the table's AWS region, e.g. us-east-1",
                    )
                    .into());
                }
            };
        if table.region.as_ref().is_some_and(|arn_region| *arn_region != region) {
            return Err(
                PropertyError::new("invalid property Region: it differs from the region in TableName's ARN").into()
            );
        }
        let key_json = key_json(&properties.key)?;
        let physical_resource_id = format!("{ID_PREFIX}{region}:{}:{key_json}", properties.table_name);
        if physical_resource_id.len() > PHYSICAL_ID_BYTES_MAX {
            return Err(ProviderError::Failed(format!(
                "TableName and Key are too long to name the resource: {} bytes, CloudFormation allows {PHYSICAL_ID_BYTES_MAX}",
                physical_resource_id.len()
            )));
        }
        Ok(Location { region, key, key_json, physical_resource_id })
    }

    async fn put(&self, ctx: &ProviderContext, properties: ItemProperties) -> Result<ProviderOutput, ProviderError> {
        self.check_table(&properties.table_name)?;
        let Location { region, key, key_json, physical_resource_id } = self.locate(ctx, &properties)?;
        let attributes = attribute_map(&properties.attributes, "Attributes")?;
        if let Some(name) = attributes.keys().find(|name| key.contains_key(*name)) {
            return Err(
                PropertyError::new(format!("invalid property Attributes.{name}: it is already part of Key")).into()
            );
        }
        // Only a privileged request takes over what is not its own (CFN_ONCE_PRIVILEGED_TOPIC_ARNS):
        // any other writes as without Adopt, so a free key or its own item is written as ever.
        let adopting = properties.adopt && ctx.privileged;
        let rules = ctx.owned().adopting(adopting);
        let table = self.table(&region, &properties.table_name);
        // Whose item an adopting write would take over, read before it: a write whose reply was
        // lost answers only that it stands (`Written::Stands`), and the item then carries this
        // resource's owner, so the Data would otherwise say `Adopted` only when the reply came
        // back. The read decides nothing (the write's one condition does); only the Data of a
        // write that stands is taken from it.
        let before = if adopting { Some(previous_owner(&table, &key, &rules).await?) } else { None };
        let written = match table.write(rules).put(key, attributes).await {
            Ok(written) => written,
            Err(FencedWriteError::OwnedByAnother { owner }) => {
                let whose = match owner {
                    Some(owner) => format!("which belongs to another resource, {owner}"),
                    None => "which cfn-once did not write (it existed before, or something else wrote it)".to_owned(),
                };
                let remedy = if properties.adopt {
                    unprivileged_adopt(ctx)
                } else {
                    "choose another Key, or set Adopt: \"true\" to take it over (this resource's Delete then removes it)"
                        .to_owned()
                };
                return Err(ProviderError::Failed(format!(
                    "table {} already has an item at key {key_json}, {whose}; {remedy}",
                    properties.table_name
                )));
            }
            Err(error) => return Err(error.into()),
        };
        tracing::info!(table = %properties.table_name, region, fence = ctx.fence.value, ?written, "item written");
        let mut output = ProviderOutput::with_id(physical_resource_id)
            .data("TableName", properties.table_name.as_str())
            .data("Region", region.as_str())
            .data("Key", key_json.as_str());
        let adopted_from = match (written, before) {
            (Written::Adopted { previous_owner }, _) | (Written::Stands, Some(Some(previous_owner))) => {
                Some(previous_owner)
            }
            _ => None,
        };
        if let Some(previous_owner) = adopted_from {
            let from =
                previous_owner.map_or_else(|| "an item cfn-once did not write".to_owned(), |owner| owner.to_string());
            output = output.data("Adopted", "true").data("AdoptedFrom", from);
        }
        Ok(output)
    }
}

/// Whether a write under `rules` would take over the item at `key` as it is now, read
/// consistently: `Some(owner)` (its owner, `None` for an item cfn-once did not write) if it would,
/// `None` if there is no item or it is this resource's own.
async fn previous_owner(
    table: &FencedTable,
    key: &HashMap<String, AttributeValue>,
    rules: &WriteRules,
) -> Result<Option<Option<Owner>>, ProviderError> {
    let Some(item) = table.get_item(key.clone()).await? else { return Ok(None) };
    let owner = match item.get(crate::fenced::OWNER_ATTRIBUTE) {
        Some(AttributeValue::S(owner)) => Some(Owner::from_stored(owner.clone())),
        _ => None,
    };
    Ok((owner != rules.owner).then_some(owner))
}

#[async_trait]
impl Provider for DynamoDbItem {
    type Properties = ItemProperties;

    async fn create(&self, ctx: &ProviderContext, properties: ItemProperties) -> Result<Step, ProviderError> {
        self.put(ctx, properties).await.map(Step::Done)
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: ItemProperties,
        _old_properties: Option<ItemProperties>,
    ) -> Result<Step, ProviderError> {
        // A changed table or key yields a new id: CloudFormation treats that as a replacement
        // and deletes the old item with a separate Delete.
        self.put(ctx, properties).await.map(Step::Done)
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: ItemProperties,
    ) -> Result<Step<()>, ProviderError> {
        let (region, table, key) = match parse_physical_id(physical_resource_id) {
            Some(ours) => {
                self.check_table(&ours.1)?;
                ours
            }
            // Not an id this provider returned: the rollback of a Create that failed or was
            // abandoned after it may have written the item its properties name.
            None => match self.locate(ctx, &properties) {
                Ok(location) if self.check_table(&properties.table_name).is_ok() => {
                    tracing::info!(
                        "Delete of an id this provider never returned: deleting what its Create may have written, if it is this resource's"
                    );
                    (location.region, properties.table_name, location.key)
                }
                _ => {
                    tracing::info!(
                        "Delete of an id this provider never returned, naming no writable item: nothing to delete"
                    );
                    return Ok(Step::Done(()));
                }
            },
        };
        match self.table(&region, &table).write(ctx.owned()).delete(key).await {
            Ok(Deleted::NotOwned { owner }) => {
                let owner = owner.map_or_else(|| "nobody (cfn-once did not write it)".to_owned(), |o| o.to_string());
                tracing::info!(table, owner, "the item at the key is not this resource's: left as it is");
                Ok(Step::Done(()))
            }
            Ok(deleted) => {
                tracing::info!(table, ?deleted, "delete done");
                Ok(Step::Done(()))
            }
            Err(FencedWriteError::NoSuchTable { .. }) => Ok(Step::Done(())),
            Err(error) => Err(error.into()),
        }
    }
}

/// Why an `Adopt: "true"` that met another's item was refused: the request is not privileged.
fn unprivileged_adopt(ctx: &ProviderContext) -> String {
    let through = match &ctx.topic_arn {
        Some(topic) => format!("arrived through topic {topic}, which is not"),
        None => "arrived without a topic (raw message delivery), so it is not".to_owned(),
    };
    format!(
        "Adopt: \"true\" takes over an existing item only for a privileged request, and this one {through} in the handler's CFN_ONCE_PRIVILEGED_TOPIC_ARNS: choose another Key, or publish through a privileged topic"
    )
}

/// Where an item lives, and the id that names it.
struct Location {
    region: String,
    key: HashMap<String, AttributeValue>,
    key_json: String,
    physical_resource_id: String,
}

/// Converts a property map into DynamoDB attributes, naming the offending path on error.
fn attribute_map(
    properties: &Map<String, Value>,
    path: &str,
) -> Result<HashMap<String, AttributeValue>, ProviderError> {
    let mut attributes = HashMap::new();
    for (name, value) in properties {
        if name.starts_with("cfn_once_") || name == FENCE_ATTRIBUTE || name == SCOPE_ATTRIBUTE {
            return Err(PropertyError::new(format!(
                "invalid property {path}.{name}: names starting with cfn_once_ are reserved"
            ))
            .into());
        }
        let attribute =
            to_attribute(value).map_err(|why| PropertyError::new(format!("invalid property {path}.{name}: {why}")))?;
        attributes.insert(name.clone(), attribute);
    }
    Ok(attributes)
}

fn to_attribute(value: &Value) -> Result<AttributeValue, String> {
    let typed_hint = "use a string, or one typed value such as {\"N\": \"5\"} or {\"BOOL\": \"true\"}";
    match value {
        Value::String(text) => Ok(AttributeValue::S(text.clone())),
        Value::Number(number) => Ok(AttributeValue::N(number.to_string())),
        Value::Bool(flag) => Ok(AttributeValue::Bool(*flag)),
        Value::Array(items) => items.iter().map(to_attribute).collect::<Result<_, _>>().map(AttributeValue::L),
        Value::Object(map) if map.len() == 1 => {
            let (tag, inner) = map.iter().next().ok_or_else(|| typed_hint.to_owned())?;
            typed_attribute(tag, inner)
        }
        Value::Object(_) | Value::Null => Err(typed_hint.into()),
    }
}

fn typed_attribute(tag: &str, inner: &Value) -> Result<AttributeValue, String> {
    let as_number = |value: &Value| -> Result<String, String> {
        let text = match value {
            Value::String(text) => text.trim().to_owned(),
            Value::Number(number) => number.to_string(),
            other => return Err(format!("expected a number, got {other}")),
        };
        text.parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(|_| text.clone())
            .ok_or(format!("{text:?} is not a number"))
    };
    let as_bool = |value: &Value| match value {
        Value::Bool(flag) => Ok(*flag),
        Value::String(text) if text.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(text) if text.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(format!("expected \"true\" or \"false\", got {other}")),
    };
    let strings = |value: &Value| -> Result<Vec<String>, String> {
        value
            .as_array()
            .ok_or("expected a list")?
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(|| format!("expected strings, got {item}")))
            .collect()
    };
    match tag {
        "S" => inner.as_str().map(|s| AttributeValue::S(s.to_owned())).ok_or_else(|| "S expects a string".into()),
        "N" => as_number(inner).map(AttributeValue::N),
        "BOOL" => as_bool(inner).map(AttributeValue::Bool),
        "NULL" => as_bool(inner)
            .and_then(|flag| if flag { Ok(AttributeValue::Null(true)) } else { Err("NULL must be \"true\"".into()) }),
        "SS" => strings(inner).and_then(|set| non_empty(set).map(AttributeValue::Ss)),
        "NS" => {
            let items = inner.as_array().ok_or("NS expects a list")?;
            let numbers = items.iter().map(as_number).collect::<Result<Vec<_>, _>>()?;
            non_empty(numbers).map(AttributeValue::Ns)
        }
        "L" => inner
            .as_array()
            .ok_or("L expects a list")?
            .iter()
            .map(to_attribute)
            .collect::<Result<_, _>>()
            .map(AttributeValue::L),
        "M" => {
            let map = inner.as_object().ok_or("M expects an object")?;
            map.iter()
                .map(|(name, value)| to_attribute(value).map(|attribute| (name.clone(), attribute)))
                .collect::<Result<_, _>>()
                .map(AttributeValue::M)
        }
        other => Err(format!("{other} is not a DynamoDB type; use S, N, BOOL, NULL, SS, NS, L or M")),
    }
}

fn non_empty(set: Vec<String>) -> Result<Vec<String>, String> {
    if set.is_empty() { Err("a set must have at least one member".into()) } else { Ok(set) }
}

/// The key in canonical DynamoDB JSON (sorted names, explicit types), for the physical id.
fn key_json(key: &Map<String, Value>) -> Result<String, ProviderError> {
    let mut canonical = BTreeMap::new();
    for (name, value) in key {
        let typed = match to_attribute(value)
            .map_err(|why| PropertyError::new(format!("invalid property Key.{name}: {why}")))?
        {
            AttributeValue::S(text) => json!({ "S": text }),
            AttributeValue::N(number) => json!({ "N": number }),
            _ => {
                return Err(
                    PropertyError::new(format!("invalid property Key.{name}: must be a string or number")).into()
                );
            }
        };
        canonical.insert(name.clone(), typed);
    }
    Ok(serde_json::to_string(&canonical).unwrap_or_default())
}

/// The region in `arn:aws:cloudformation:<region>:<account>:stack/...`.
fn stack_region(stack_id: &str) -> Option<String> {
    stack_id.split(':').nth(3).filter(|region| !region.is_empty()).map(str::to_owned)
}

/// The region, table and key an id of this provider names; `None` for any other id. The table
/// may be an ARN (colons and all); the key is the JSON object after it, and neither a table name
/// nor an ARN contains `{`.
fn parse_physical_id(id: &str) -> Option<(String, String, HashMap<String, AttributeValue>)> {
    let (region, rest) = id.strip_prefix(ID_PREFIX)?.split_once(':')?;
    let split = rest.find(":{")?;
    let (table, key_json) = (&rest[..split], &rest[split + 1..]);
    let key: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_str(key_json).ok()?;
    let mut attributes = HashMap::new();
    for (name, typed) in key {
        let attribute = match typed.iter().next() {
            Some((tag, value)) if typed.len() == 1 && tag == "S" => AttributeValue::S(value.clone()),
            Some((tag, value)) if typed.len() == 1 && tag == "N" => AttributeValue::N(value.clone()),
            _ => return None,
        };
        attributes.insert(name, attribute);
    }
    (!region.is_empty() && !table.is_empty() && !attributes.is_empty())
        .then(|| (region.to_owned(), table.to_owned(), attributes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_conversion_table() {
        let check = |value: Value, expected: Result<AttributeValue, &str>| {
            assert_eq!(to_attribute(&value), expected.map_err(str::to_owned), "for {value}");
        };
        check(json!("x"), Ok(AttributeValue::S("x".into())));
        check(json!({"N": "5"}), Ok(AttributeValue::N("5".into())));
        check(json!({"N": "five"}), Err("\"five\" is not a number"));
        check(json!({"BOOL": "true"}), Ok(AttributeValue::Bool(true)));
        check(json!({"BOOL": "maybe"}), Err("expected \"true\" or \"false\", got \"maybe\""));
        check(json!({"NULL": "true"}), Ok(AttributeValue::Null(true)));
        check(json!({"SS": ["a", "b"]}), Ok(AttributeValue::Ss(vec!["a".into(), "b".into()])));
        check(json!({"SS": []}), Err("a set must have at least one member"));
        check(json!({"NS": ["1", "2.5"]}), Ok(AttributeValue::Ns(vec!["1".into(), "2.5".into()])));
        check(
            json!({"L": ["a", {"N": "1"}]}),
            Ok(AttributeValue::L(vec![AttributeValue::S("a".into()), AttributeValue::N("1".into())])),
        );
        check(
            json!({"M": {"k": "v"}}),
            Ok(AttributeValue::M(HashMap::from([("k".into(), AttributeValue::S("v".into()))]))),
        );
        check(json!({"X": "1"}), Err("X is not a DynamoDB type; use S, N, BOOL, NULL, SS, NS, L or M"));
        assert!(to_attribute(&json!({"a": 1, "b": 2})).is_err());
    }

    #[test]
    fn physical_ids_round_trip() {
        let key = json!({"pk": "tenant#42", "sk": {"N": "7"}});
        let key_json = key_json(key.as_object().expect("object")).expect("valid key");
        assert_eq!(key_json, r#"{"pk":{"S":"tenant#42"},"sk":{"N":"7"}}"#);
        let id = format!("{ID_PREFIX}eu-west-1:settings:{key_json}");
        let (region, table, parsed) = parse_physical_id(&id).expect("ours");
        assert_eq!((region.as_str(), table.as_str()), ("eu-west-1", "settings"));
        assert_eq!(parsed.get("pk"), Some(&AttributeValue::S("tenant#42".into())));
        assert_eq!(parsed.get("sk"), Some(&AttributeValue::N("7".into())));
        assert_eq!(parse_physical_id("demo-Thing-1A2B3C"), None, "CloudFormation-generated ids are not ours");
        assert_eq!(parse_physical_id("dynamodb-item:us-east-1:t:not json"), None);
        assert_eq!(parse_physical_id("dynamodb-item:t:{\"pk\":{\"S\":\"x\"}}"), None, "no region");
        let arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/settings";
        let (_, table, _) = parse_physical_id(&format!("{ID_PREFIX}eu-west-1:{arn}:{key_json}")).expect("ours");
        assert_eq!(table, arn, "a table named by ARN comes back whole, so its Delete finds it");
        assert_eq!(
            stack_region("arn:aws:cloudformation:us-east-2:123456789012:stack/s/guid").as_deref(),
            Some("us-east-2")
        );
    }
}
