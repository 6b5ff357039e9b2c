//! Lambda's SQS event read record by record, so that a record the types refuse is that
//! record's failure alone.
//!
//! Deserializing the whole event as one `SqsEvent` fails the invocation on one bad record, and
//! a failed invocation makes the event source mapping return every record of the batch, until
//! the bad one reaches `maxReceiveCount`: its batch-mates wait with it. The deployed function
//! therefore takes the event as JSON and reads each record on its own. A record that cannot be
//! read keeps what of its identity can be read (messageId, receiptHandle, eventSourceARN,
//! attributes) and goes through the batch as a record without a body, which the worker sends to
//! the DLQ at once, as it does for any body it cannot decode, and as `cfn-once local` does.
//!
//! Invariant: reading never fails on a record's content; only an event that is not an object
//! with a `Records` array is refused as a whole (then nothing in it can be named).

use aws_lambda_events::event::sqs::SqsMessage;
use serde::Deserialize;
use serde_json::Value;

/// One record of the event, as far as it could be read.
#[derive(Debug)]
pub struct ReadRecord {
    /// The record. An unreadable one carries its identity where it could be read, and as its
    /// body the text to put on the DLQ: its own body if that is a string, else the whole record.
    pub message: SqsMessage,
    /// Why the record could not be read; `None` for a record the types read.
    pub unreadable: Option<String>,
}

impl ReadRecord {
    /// A record already read (the local event source mapping builds them from SQS's answer).
    pub fn readable(message: SqsMessage) -> Self {
        Self { message, unreadable: None }
    }

    /// The body the worker is to decode: none for an unreadable record, which the worker then
    /// sends to the DLQ as undecodable.
    pub fn body(&self) -> Option<&str> {
        match self.unreadable {
            Some(_) => None,
            None => self.message.body.as_deref(),
        }
    }
}

/// Reads the event's records one by one. Fails only when the event has no `Records` array.
pub fn read_event(payload: Value) -> Result<Vec<ReadRecord>, String> {
    match payload {
        Value::Object(mut event) => match event.remove("Records") {
            Some(Value::Array(records)) => Ok(records.into_iter().map(read_record).collect()),
            Some(_) => Err("the event's Records is not an array".to_owned()),
            None => Err("the event has no Records: it is not an SQS event".to_owned()),
        },
        _ => Err("the event is not a JSON object: it is not an SQS event".to_owned()),
    }
}

/// Reads one record: as Lambda's types read it, or, failing that, its identity alone.
pub fn read_record(record: Value) -> ReadRecord {
    // A record `raw_event` stood in for, because it was not even JSON text, says so.
    let marked = record.get(crate::raw_event::UNREADABLE).map(|why| why.as_str().unwrap_or_default().to_owned());
    match (marked, SqsMessage::deserialize(&record)) {
        (None, Ok(message)) => ReadRecord::readable(message),
        (marked, result) => {
            let error = marked.unwrap_or_else(|| result.err().map(|error| error.to_string()).unwrap_or_default());
            let text = |name: &str| record.get(name).and_then(Value::as_str).map(str::to_owned);
            let mut message = SqsMessage::default();
            message.message_id = text("messageId");
            message.receipt_handle = text("receiptHandle");
            message.event_source = text("eventSource");
            message.event_source_arn = text("eventSourceARN");
            message.aws_region = text("awsRegion");
            message.attributes = record
                .get("attributes")
                .and_then(Value::as_object)
                .map(|attributes| {
                    attributes
                        .iter()
                        .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            // SQS refuses an empty body, so the DLQ gets the whole record when its body is not
            // a string.
            message.body = Some(text("body").filter(|body| !body.is_empty()).unwrap_or_else(|| record.to_string()));
            ReadRecord { message, unreadable: Some(format!("the record cannot be read: {error}")) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good(id: &str) -> Value {
        json!({
            "messageId": id,
            "receiptHandle": format!("handle-{id}"),
            "body": "{\"RequestType\":\"Create\"}",
            "attributes": {"ApproximateReceiveCount": "2", "SentTimestamp": "1700000000000"},
            "messageAttributes": {},
            "md5OfBody": "x",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
            "awsRegion": "us-east-1"
        })
    }

    #[test]
    fn a_refused_record_fails_alone_and_keeps_its_identity() {
        let mut bad = good("bad");
        bad["body"] = json!(42);
        bad["attributes"]["SentTimestamp"] = json!(1_700_000_000_000_u64);
        let read = read_event(json!({"Records": [good("first"), bad.clone(), good("last")]})).expect("an SQS event");
        let ids: Vec<_> = read.iter().map(|record| record.message.message_id.as_deref()).collect();
        assert_eq!(ids, [Some("first"), Some("bad"), Some("last")], "every record, in order");
        for mate in [&read[0], &read[2]] {
            assert_eq!(mate.unreadable, None, "a batch-mate is read");
            assert_eq!(mate.body(), Some("{\"RequestType\":\"Create\"}"));
        }
        let bad_read = &read[1];
        let why = bad_read.unreadable.as_deref().expect("the bad record is unreadable");
        assert!(why.contains("the record cannot be read"), "{why}");
        assert_eq!(bad_read.body(), None, "the worker sees no body, so it dead-letters the record");
        assert_eq!(bad_read.message.receipt_handle.as_deref(), Some("handle-bad"));
        assert_eq!(bad_read.message.event_source_arn.as_deref(), Some("arn:aws:sqs:us-east-1:123456789012:q"));
        assert_eq!(bad_read.message.attributes.get("ApproximateReceiveCount").map(String::as_str), Some("2"));
        assert_eq!(bad_read.message.attributes.get("SentTimestamp"), None, "a number is not an attribute's string");
        assert_eq!(bad_read.message.body, Some(bad.to_string()), "the DLQ gets the whole record");
    }

    #[test]
    fn a_record_without_a_readable_id_is_read_without_one() {
        let read = read_record(json!({"messageId": 7, "body": "kept for the DLQ"}));
        assert!(read.unreadable.is_some());
        assert_eq!(read.message.message_id, None);
        assert_eq!(read.message.body.as_deref(), Some("kept for the DLQ"));
        let read = read_record(json!("not an object"));
        assert!(read.unreadable.is_some());
        assert_eq!(read.message.body.as_deref(), Some("\"not an object\""));
    }

    #[test]
    fn a_record_marked_unreadable_is_unreadable_though_its_types_read() {
        let mut marked = good("marked");
        marked[crate::raw_event::UNREADABLE] = json!("not JSON text");
        let read = read_record(marked);
        assert_eq!(read.unreadable.as_deref(), Some("the record cannot be read: not JSON text"));
        assert_eq!(read.body(), None);
        assert_eq!(read.message.message_id.as_deref(), Some("marked"));
    }

    #[test]
    fn only_an_event_without_records_is_refused_whole() {
        for event in [json!([]), json!({}), json!({"Records": {}}), json!("x")] {
            assert!(read_event(event.clone()).is_err(), "{event} was read");
        }
        assert!(read_event(json!({"Records": []})).expect("empty batch").is_empty());
    }
}
