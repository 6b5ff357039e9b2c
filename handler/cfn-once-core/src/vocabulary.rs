//! The protocol's vocabulary: what the worker is given and what it says back.
//!
//! The worker is given one [`QueueRecord`] at a time, within an [`Invocation`], by a region of
//! some [`Role`]; it answers with a [`Disposition`] (what the queue must do with the message),
//! and [`Handled`] adds which request that was about ([`RequestSummary`]). Every crate speaks
//! these types: the Lambda and the local event source mapping build records and settle
//! dispositions, the simulator and the reports read them, the operations tools parse a
//! dead-lettered message's [`DeadLetterCause`]. They are plain data and sit below everything
//! that uses them: this module depends on the request and response types only, never on the
//! worker, the decision table or the configuration.

use crate::request::{Request, RequestKind};
use crate::response::Status;

/// A regional deployment's configured role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Does the work while active; on standby it starts no new work, except near the deadline.
    Primary,
    /// The backup: its queue delays every copy, so it acts on whatever the primary missed.
    Secondary,
}

impl Role {
    /// Parses `primary` or `secondary`.
    pub fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "primary" => Some(Self::Primary),
            "secondary" => Some(Self::Secondary),
            _ => None,
        }
    }

    /// The configured spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Secondary => "secondary",
        }
    }
}

/// The Lambda invocation a record is handled in.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Lambda's request id (or the local event source mapping's).
    pub id: String,
    /// When the invocation is killed, epoch ms.
    pub deadline_ms: u64,
}

/// One SQS record, as far as the protocol cares.
#[derive(Debug, Clone, Copy)]
pub struct QueueRecord<'a> {
    /// The record's body: an SNS envelope or a bare request; `None` dead-letters the record.
    pub body: Option<&'a str>,
    /// SQS's ApproximateReceiveCount, 1 on first delivery.
    pub receive_count: u32,
    /// SQS's SentTimestamp (epoch ms): when the request was sent; a queue delay does not move
    /// it. `None` counts from now.
    pub sent_ms: Option<u64>,
}

/// A delivery's result with what it was about, for reports and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// `None` when the record could not be decoded.
    pub request: Option<RequestSummary>,
    /// What to do with the message.
    pub disposition: Disposition,
}

/// The identifying parts of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSummary {
    /// CloudFormation's StackId.
    pub stack_id: String,
    /// CloudFormation's RequestId.
    pub request_id: String,
    /// The resource's logical id in the template.
    pub logical_resource_id: String,
    /// Create, Update or Delete; `None` when the request did not say in a readable way.
    pub request_type: Option<RequestKind>,
    /// The ResourceType, e.g. `Custom::Echo`; `None` when the request could not be parsed.
    pub resource_type: Option<String>,
}

impl RequestSummary {
    /// The summary of `request`.
    pub fn of(request: &Request) -> Self {
        Self {
            stack_id: request.key.stack_id.to_string(),
            request_id: request.key.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            request_type: request.kind(),
            resource_type: request.resource_type().map(str::to_owned),
        }
    }
}

/// What to do with the message after this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// The request needs nothing more from this message: delete it.
    Done(Done),
    /// Make the message visible again after `delay_s` and report it failed.
    Retry {
        /// The visibility timeout to set, in seconds: within SQS's limit, and bounded by the
        /// backoff floor and the request's deadline.
        delay_s: u32,
        /// Why the message comes back, for the logs.
        why: String,
    },
    /// Move the message to the dead-letter queue now: nobody can be answered (no usable
    /// ResponseURL, a refused sender), or the request's deadline has passed unanswered. Only
    /// these ever reach the DLQ before its deadline; SQS's own `maxReceiveCount` is a backstop
    /// (see `budget`).
    DeadLetter {
        /// Why the message cannot be answered, for the logs.
        why: String,
        /// Which of the two it is: a redrive skips undeliverable messages unless asked.
        cause: DeadLetterCause,
    },
}

/// Why a message goes to the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterCause {
    /// Nobody can be answered: no usable ResponseURL, a refused sender, unreadable input.
    /// Sending it again changes nothing.
    Undeliverable,
    /// The request's deadline passed before it was answered. A redriven copy still PUTs an
    /// answer that was committed but never delivered.
    DeadlinePassed,
}

impl DeadLetterCause {
    /// The spelling put on dead-lettered messages (`cfn-once-cause`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Undeliverable => "undeliverable",
            Self::DeadlinePassed => "deadline-passed",
        }
    }

    /// Parses [`DeadLetterCause::as_str`].
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "undeliverable" => Some(Self::Undeliverable),
            "deadline-passed" => Some(Self::DeadlinePassed),
            _ => None,
        }
    }
}

/// Why a message is finished with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// This delivery ran the provider, committed and PUT.
    Answered {
        /// The fencing token the answer was committed under.
        fence: u64,
        /// Whether the answer was SUCCESS or FAILED.
        status: Status,
    },
    /// An earlier execution committed; this delivery PUT the stored bytes.
    Replayed {
        /// The fencing token the stored answer was committed under.
        fence: u64,
    },
    /// Committed and delivered before: a duplicate, dropped.
    Duplicate,
    /// A newer attempt with the same RequestId exists: a stale delivery, dropped.
    Superseded,
}

#[cfg(test)]
mod tests {
    use super::*;
    use Role::{Primary, Secondary};

    #[test]
    fn roles_parse() {
        assert_eq!(Role::parse("Primary"), Some(Primary));
        assert_eq!(Role::parse("secondary"), Some(Secondary));
        assert_eq!(Role::parse("tertiary"), None);
    }
}
