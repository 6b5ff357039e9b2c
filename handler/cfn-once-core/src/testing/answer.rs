//! What the kit hands a test: the request it built (to deliver once or many times), and what a
//! delivery came to (the disposition and the answer PUT).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::response::{ResponseBody, Status};
use crate::vocabulary::{Disposition, Done};

/// One CloudFormation request the kit built, to deliver once or many times.
#[derive(Debug, Clone)]
pub struct TestRequest {
    /// The request as CloudFormation sends it (its ResponseURL points into the kit's recording sink).
    pub request: Value,
    pub(super) url: String,
}

impl TestRequest {
    /// The same request with a `ServiceTimeout` (seconds, 1 to 3600): its deadline.
    pub fn service_timeout_s(mut self, seconds: u64) -> Self {
        self.request["ResourceProperties"]["ServiceTimeout"] = json!(seconds.to_string());
        self
    }

    /// The same request for another logical resource of the stack (two resources of one
    /// template), `Resource` by default.
    pub fn logical_resource_id(mut self, logical_resource_id: &str) -> Self {
        self.request["LogicalResourceId"] = json!(logical_resource_id);
        self
    }
}

/// How a takeover played out, for [`ProviderTest::stale_write_after_take_over`].
///
/// [`ProviderTest::stale_write_after_take_over`]: super::ProviderTest::stale_write_after_take_over
#[derive(Debug, Clone)]
pub struct TakeOver {
    /// The taking-over execution's delivery: the request's answer.
    pub answer: Answer,
    /// The stale execution's delivery once it resumed: its writes were fenced out and it
    /// committed and sent nothing (a retry, or a drop as a duplicate).
    pub stale: Disposition,
}

/// What one delivery of a request came to: what the worker did with the message, and the
/// request's answer as last PUT (`None` if nothing was PUT yet).
#[derive(Debug, Clone)]
pub struct Answer {
    /// What the worker decided for this delivery: answered, re-sent, dropped as a duplicate,
    /// retried later.
    pub disposition: Disposition,
    /// The body last PUT to the request's ResponseURL.
    pub body: Option<ResponseBody>,
}

impl Answer {
    /// SUCCESS or FAILED; `None` while nothing is answered yet (the request is still in
    /// progress, or the delivery is to be retried).
    pub fn status(&self) -> Option<Status> {
        self.body.as_ref().map(|body| body.status)
    }

    /// Whether a body was PUT.
    pub fn is_answered(&self) -> bool {
        self.body.is_some()
    }

    /// The FAILED answer's Reason.
    pub fn reason(&self) -> Option<&str> {
        self.body.as_ref().and_then(|body| body.reason.as_deref())
    }

    /// The PhysicalResourceId answered; empty while nothing is answered.
    pub fn physical_resource_id(&self) -> &str {
        self.body.as_ref().map_or("", |body| body.physical_resource_id.as_str())
    }

    /// The Data answered; empty while nothing is answered.
    pub fn data(&self) -> &BTreeMap<String, Value> {
        static EMPTY: BTreeMap<String, Value> = BTreeMap::new();
        self.body.as_ref().map_or(&EMPTY, |body| &body.data)
    }

    /// The fence the answer was committed under, when this delivery answered.
    pub fn fence(&self) -> Option<u64> {
        match &self.disposition {
            Disposition::Done(Done::Answered { fence, .. }) => Some(*fence),
            _ => None,
        }
    }
}
