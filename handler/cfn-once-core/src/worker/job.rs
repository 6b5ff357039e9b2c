//! What one delivery carries through the worker: the record as received and decoded, the job
//! (the request, this delivery's owner string and its budget), which answer the job gives (its
//! phase), and what acting on the record came to.

use crate::budget::Budget;
use crate::deadline::RequestDeadline;
use crate::decision::Redundant;
use crate::lease::Viewer;
use crate::marks::Ticket;
use crate::request::{Request, RequestKind, Undeliverable};
use crate::response::Status;
use crate::vocabulary::{Disposition, Done, QueueRecord, RequestSummary};
use crate::wait_condition::{Signal, SignalStatus};

/// A record decoded, before it is handled ([`Worker::receive`](super::Worker::receive)).
#[derive(Debug)]
pub struct Received<'a> {
    pub(super) record: QueueRecord<'a>,
    pub(super) decoded: Result<Box<Decoded>, Undeliverable>,
    /// The record's place among its batch's answers, when it came in a batch
    /// ([`crate::marks`]): its delivered mark waits for the batch's answers.
    pub(super) ticket: Option<Ticket>,
}

impl Received<'_> {
    /// The record as one of a batch whose delivered marks wait for its answers.
    pub fn in_batch(self, ticket: Ticket) -> Self {
        Self { ticket: Some(ticket), ..self }
    }

    /// What the record is about, if it could be decoded.
    pub fn summary(&self) -> Option<RequestSummary> {
        self.decoded.as_ref().ok().map(|decoded| RequestSummary::of(&decoded.request))
    }
}

/// A decoded request and when it was sent.
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) request: Request,
    /// The earliest of the publish time and the copy's send times, if any was known.
    pub(super) sent_ms: Option<u64>,
    /// The same, or when the record was received if none was known.
    pub(super) attempt_sent_ms: u64,
    pub(super) deadline: RequestDeadline,
    /// The deadline of the work the request hands past its answer, if it does.
    pub(super) work_deadline: Option<RequestDeadline>,
}

/// One delivery being handled: the request and what is known about this delivery of it.
#[derive(Clone)]
pub(super) struct Job<'a> {
    /// What this job answers: CloudFormation's request, or the work a resource handed past its
    /// answer (keyed and addressed as its own request, see `wait_condition`).
    pub(super) request: &'a Request,
    /// CloudFormation's request, which the provider is told about (the same as `request`
    /// unless this job is a work).
    pub(super) origin: &'a Request,
    /// Which answer this job gives.
    pub(super) phase: Phase,
    pub(super) receive_count: u32,
    /// When the request was sent, if the record said.
    pub(super) sent_ms: Option<u64>,
    /// When the request was sent, or when this delivery began if the record did not say.
    pub(super) attempt_sent_ms: u64,
    /// This execution, as recorded in the lease: region, invocation and a nonce.
    pub(super) owner: String,
    /// The request's deadline, the invocation's, and every end this delivery's calls keep.
    pub(super) budget: Budget<'a>,
    /// For the answer of a request that hands a work past it (`Phase::AnswerAtOnce`): the work's
    /// budget, which keeps the message once the answer's deadline has passed (`see_again`).
    pub(super) work_after: Option<Budget<'a>>,
    /// The delivery's place in its batch, whose answers its delivered mark waits for.
    pub(super) batch: Option<&'a Ticket>,
}

impl Job<'_> {
    pub(super) fn viewer(&self) -> Viewer<'_> {
        Viewer { fingerprint: &self.request.fingerprint, sent_ms: self.attempt_sent_ms, owner: &self.owner }
    }

    /// The status committed `bytes` carry: an answer's, or a signal's (FAILURE as FAILED).
    pub(super) fn status_of(&self, bytes: &[u8]) -> Status {
        match self.phase {
            Phase::Signal => match Signal::parse(bytes).map(|signal| signal.status) {
                Some(SignalStatus::Success) => Status::Success,
                _ => Status::Failed,
            },
            Phase::Answer | Phase::AnswerAtOnce => crate::response::status_of(bytes),
        }
    }
}

/// Which answer a job gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// CloudFormation's request, answered with what its provider comes to.
    Answer,
    /// A Create or Update of a resource with a wait condition: answered SUCCESS at once,
    /// without running the provider, which runs under the work instead.
    AnswerAtOnce,
    /// The work of a resource with a wait condition: its provider runs and is polled here, and
    /// its answer is the signal PUT to the handle.
    Signal,
}

impl Phase {
    /// The phase of CloudFormation's `request`: a Create or Update that declares a wait
    /// condition may hand its work over, unless it is an Update that keeps its handle, which
    /// no wait condition can be waiting on any more (CloudFormation does not wait again on a
    /// wait condition that completed): that one runs as an ordinary request. Whether a
    /// hand-over happens is decided when the answer is committed (`Worker::waits_on`).
    pub(super) fn of(request: &Request) -> Self {
        use crate::wait_condition::WaitDeclared;
        let keeps_handle = match (&request.wait, &request.old_wait) {
            (WaitDeclared::Valid(spec), Some(old)) => spec.handle == old.handle,
            _ => false,
        };
        let hands_over = matches!(request.kind(), Some(RequestKind::Create | RequestKind::Update))
            && !matches!(request.wait, WaitDeclared::None)
            && !(request.kind() == Some(RequestKind::Update) && keeps_handle);
        if hands_over { Self::AnswerAtOnce } else { Self::Answer }
    }

    /// Whose deadline this job keeps, for Reasons.
    pub(super) fn deadline_name(self) -> &'static str {
        match self {
            Self::Signal => "the work's deadline",
            Self::Answer | Self::AnswerAtOnce => "the request's deadline",
        }
    }

    /// What this job's answer is called in log lines.
    pub(super) fn answer_name(self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Answer | Self::AnswerAtOnce => "response",
        }
    }
}

/// What acting on a record came to: the disposition, the status of the answer this delivery
/// found delivered or delivered itself, if it did, and whether that answer handed the
/// resource's work to its wait condition.
pub(super) struct Acted {
    pub(super) disposition: Disposition,
    pub(super) answered: Option<Status>,
    pub(super) handed_over: bool,
}

impl Acted {
    pub(super) fn answered(disposition: Disposition, status: Status, handed_over: bool) -> Self {
        Self { disposition, answered: Some(status), handed_over }
    }

    /// An answer this delivery committed as a hand-over (`work::handed_over`), if it was
    /// delivered.
    pub(super) fn handed_over(disposition: Disposition) -> Self {
        Self { handed_over: true, ..disposition.into() }
    }
}

impl From<Disposition> for Acted {
    /// An answer this delivery committed and delivered carries its status in the disposition.
    fn from(disposition: Disposition) -> Self {
        let answered = match &disposition {
            Disposition::Done(Done::Answered { status, .. }) => Some(*status),
            _ => None,
        };
        Self { disposition, answered, handed_over: false }
    }
}

/// What a message the decision table found redundant comes to.
pub(super) fn dropped(redundant: Redundant) -> Done {
    match redundant {
        Redundant::Duplicate => Done::Duplicate,
        Redundant::Superseded => Done::Superseded,
    }
}

/// The deadline of the work on `spec`'s handle of a request sent at `sent_ms`: the wait
/// condition's timeout counted from then (a wait condition that depends on the resource starts
/// its own count later, so this is the earlier end), or the handle's expiry.
pub(super) fn work_deadline(sent_ms: u64, spec: &crate::wait_condition::WaitSpec) -> RequestDeadline {
    RequestDeadline::of_work(sent_ms, spec.timeout_s, spec.handle.presigned_expiry_ms())
}

/// "Custom::Echo Create", for Reasons.
pub(super) fn describe(request: &Request) -> String {
    format!(
        "{} {}",
        request.resource_type().unwrap_or("the resource"),
        request.kind().map(RequestKind::as_str).unwrap_or("request")
    )
}

/// The scope providers' fenced writes are keyed by: one per request.
pub fn fence_scope(request: &Request) -> String {
    crate::fingerprint::short_digest(&[&request.key.stack_id, &request.key.request_id])
}
