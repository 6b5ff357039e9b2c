//! Each resource's turn in an operation: prepared (its properties resolved against the stack
//! as it stands, its request built), run as a job, and settled (the stack's state and its
//! events updated); and the runner that keeps as many turns going as the dependencies allow.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::nested::{self, NestedOp};
use super::{Engine, Finished, Notice, Phase, Running};
use crate::cloud::{CfnRequest, Outcome, RequestType};
use crate::intrinsics::{Scope, evaluate, to_properties};
use crate::jobs::{self, Done, Job, WaitEnd};
use crate::state::{Kind, Live, RequestRecord, View, made_up_id, service_timeout_s, without_presigned_urls};
use crate::template::{Policy, ResourceDecl, Template};

/// What preparing a turn came to.
pub(super) enum Prepared {
    Job(Job),
    /// Nothing to do: unchanged in an update.
    Unchanged,
    /// Done without a request: deleted with `Retain`.
    Skipped,
    /// Failed before anything was sent (a template error, a refused change).
    Failed(String),
    /// A nested stack's operation.
    Nested(NestedOp),
}

impl<'a> Engine<'a> {
    /// Runs `ids` in dependency order, or with `reverse` in reverse order (a resource after
    /// everything that depends on it), as many at once as are ready. With `stop_on_failure`,
    /// the first failure stops new starts and cancels what is running. True when all succeeded.
    pub(super) async fn run(
        &mut self,
        phase: Phase,
        ids: BTreeSet<String>,
        deps: &BTreeMap<String, BTreeSet<String>>,
        reverse: bool,
        stop_on_failure: bool,
    ) -> bool {
        let no_deps = BTreeSet::new();
        let deps_of = |id: &String| deps.get(id).unwrap_or(&no_deps);
        let mut succeeded: BTreeSet<String> = BTreeSet::new();
        let mut started: BTreeSet<String> = BTreeSet::new();
        let mut all_ok = true;
        let mut stopping = false;
        let mut running: Running<'a> = Running::new();
        // Nested stacks' operations run to their end: a nested stack is not cancelled halfway.
        let mut nested_running: Running<'a> = Running::new();
        let mut in_flight: BTreeSet<String> = BTreeSet::new();
        loop {
            let mut progressed = false;
            if !stopping {
                let ready: Vec<String> = ids
                    .iter()
                    .filter(|id| !started.contains(*id))
                    .filter(|id| {
                        if reverse {
                            ids.iter().all(|other| succeeded.contains(other) || !deps_of(other).contains(*id))
                        } else {
                            deps_of(id).iter().all(|d| succeeded.contains(d) || !ids.contains(d))
                        }
                    })
                    .cloned()
                    .collect();
                for id in ready {
                    started.insert(id.clone());
                    progressed = true;
                    match self.prepare(phase, &id) {
                        Prepared::Job(job) => {
                            let (cloud, stack, notify, poll) =
                                (self.cloud, self.stack.clone(), self.notify, self.wait_poll);
                            in_flight.insert(id.clone());
                            running.push(Box::pin(async move {
                                let progress = move |line: String| notify(Notice::Progress(line));
                                let (id, job, done) = jobs::run(cloud, stack, id, job, &progress, poll).await;
                                Finished::Job(id, Box::new(job), done)
                            }));
                        }
                        Prepared::Nested(op) => {
                            let child = Box::new(self.children.remove(&id).expect("a nested stack's engine"));
                            nested_running.push(nested::play(child, id, op, self.step.clone(), self.phase_name));
                        }
                        Prepared::Unchanged => {
                            succeeded.insert(id);
                        }
                        Prepared::Skipped => {
                            self.resource_event(&id, "DELETE_SKIPPED", None);
                            self.live.remove(&id);
                            succeeded.insert(id);
                        }
                        Prepared::Failed(reason) => {
                            all_ok = false;
                            self.fail_turn(phase, &id, reason);
                            if stop_on_failure {
                                stopping = true;
                                break;
                            }
                        }
                    }
                }
            }
            if stopping && !in_flight.is_empty() {
                // CloudFormation cancels what is in progress when a resource fails; answers
                // that come later go to ResponseURLs nobody reads.
                for id in std::mem::take(&mut in_flight) {
                    self.cancel_turn(phase, &id);
                }
                running = Running::new();
            }
            if running.is_empty() && nested_running.is_empty() {
                if progressed && !stopping {
                    continue;
                }
                break;
            }
            let finished = tokio::select! {
                Some(finished) = running.next(), if !running.is_empty() => finished,
                Some(finished) = nested_running.next(), if !nested_running.is_empty() => finished,
                else => break,
            };
            let (id, ok, answered) = match finished {
                Finished::Job(id, job, done) => {
                    in_flight.remove(&id);
                    let answered = matches!(done, Done::Answer(Ok(Outcome::Answered(_))));
                    let ok = self.settle(phase, &id, *job, done);
                    (id, ok, answered)
                }
                Finished::Nested(id, child, end) => {
                    let ok = self.settle_nested(phase, &id, child, end);
                    (id, ok, false)
                }
            };
            if ok {
                succeeded.insert(id);
            } else {
                all_ok = false;
                if stop_on_failure {
                    stopping = true;
                }
            }
            if answered {
                self.faults.lock().await.answered(self.notify).await;
            }
        }
        let all = all_ok && ids.iter().all(|id| succeeded.contains(id));
        self.succeeded = succeeded;
        all
    }

    /// Resolves a resource's turn: what to send, or why nothing is sent.
    fn prepare(&mut self, phase: Phase, id: &str) -> Prepared {
        match phase {
            Phase::Forward => self.prepare_forward(id),
            Phase::UpdateBack => {
                if self.live.get(id).is_some_and(|live| live.kind == Kind::Nested) {
                    return self.prepare_nested_back(id);
                }
                let (Some(old), Some(attempted)) = (self.before.get(id).cloned(), self.attempted.get(id).cloned())
                else {
                    return Prepared::Unchanged;
                };
                self.resource_event(id, "UPDATE_IN_PROGRESS", None);
                let request = self.request(RequestType::Update, id, &old, old.properties.clone(), Some(attempted));
                Prepared::Job(Job::Send { request, fail_on_purpose: false })
            }
            Phase::Delete => {
                let Some(live) = self.live.get(id).cloned() else { return Prepared::Unchanged };
                if live.deletion_policy == Policy::Retain {
                    return Prepared::Skipped;
                }
                let snapshot = (live.deletion_policy == Policy::Snapshot).then(|| {
                    "DeletionPolicy Snapshot: CloudFormation takes a snapshot, then deletes the resource (play provisions neither)".to_owned()
                });
                self.resource_event(id, "DELETE_IN_PROGRESS", snapshot);
                if live.kind == Kind::Nested && self.children.contains_key(id) {
                    return Prepared::Nested(NestedOp::Delete);
                }
                if live.kind != Kind::Custom {
                    return Prepared::Job(Job::Nothing);
                }
                let request = self.request(RequestType::Delete, id, &live, live.properties.clone(), None);
                let fail_on_purpose = self.phase_name == "delete" && self.fails(id);
                Prepared::Job(Job::Send { request, fail_on_purpose })
            }
        }
    }

    fn prepare_forward(&mut self, id: &str) -> Prepared {
        let target = self.target.as_ref().expect("an operation's target");
        let decl = target.template.resource(id).expect("an included resource").clone();
        let kind = Kind::of(&decl.resource_type);
        let properties = match self.resolve(&target.template, &target.parameters, &decl) {
            Ok(properties) => properties,
            Err(reason) => {
                let status = if self.live.contains_key(id) { "UPDATE_IN_PROGRESS" } else { "CREATE_IN_PROGRESS" };
                self.resource_event(id, status, None);
                return Prepared::Failed(reason);
            }
        };
        let existing = self.live.get(id).cloned();
        if let Some(live) = &existing {
            // Policies change with no request.
            let entry = self.live.get_mut(id).expect("existing");
            entry.deletion_policy = decl.deletion_policy;
            entry.update_replace_policy = decl.update_replace_policy;
            if live.resource_type != decl.resource_type {
                self.resource_event(id, "UPDATE_IN_PROGRESS", None);
                return Prepared::Failed(format!(
                    "Update of resource type is not permitted: {} to {}",
                    live.resource_type, decl.resource_type
                ));
            }
            // A nested stack's template may change under the same properties.
            if live.properties == properties && kind != Kind::Nested {
                return Prepared::Unchanged;
            }
        }
        let status = if existing.is_some() { "UPDATE_IN_PROGRESS" } else { "CREATE_IN_PROGRESS" };
        match kind {
            Kind::Custom => self.prepare_custom(id, &decl, properties, existing, status),
            Kind::Handle => {
                self.resource_event(id, status, None);
                Prepared::Job(Job::Handle)
            }
            Kind::Wait => {
                self.resource_event(id, status, None);
                if existing.is_some() {
                    return Prepared::Failed(
                        "a wait condition is never updated: CloudFormation waits again only for a new WaitCondition \
                         with a new handle (new logical ids)"
                            .into(),
                    );
                }
                self.prepare_wait(id, &decl, properties)
            }
            Kind::Nested => self.prepare_nested(id, &decl, properties, existing.is_some(), status),
            Kind::Other => {
                self.live.insert(id.to_owned(), self.new_live(&decl, kind, made_up_id(&self.stack, id), properties));
                Prepared::Job(Job::Nothing)
            }
        }
    }

    fn prepare_custom(
        &mut self,
        id: &str,
        decl: &ResourceDecl,
        properties: Value,
        existing: Option<Live>,
        status: &str,
    ) -> Prepared {
        let reason = status.starts_with("CREATE").then(|| "Resource creation Initiated".to_owned());
        self.resource_event(id, status, reason);
        let Some(token) = properties.get("ServiceToken").and_then(Value::as_str).map(str::to_owned) else {
            return Prepared::Failed("Custom resource has no ServiceToken (a string) among its properties".into());
        };
        let timeout_s = match service_timeout_s(&properties) {
            Ok(seconds) => seconds,
            Err(reason) => return Prepared::Failed(reason),
        };
        let fail_on_purpose = self.fails(id);
        let request = match existing {
            Some(live) => {
                if live.service_token.as_deref() != Some(token.as_str()) {
                    return Prepared::Failed("Modifying service token is not allowed.".into());
                }
                let mut next = live.clone();
                next.service_timeout_s = timeout_s;
                self.request(RequestType::Update, id, &next, properties, Some(live.properties.clone()))
            }
            None => {
                let mut live = self.new_live(decl, Kind::Custom, made_up_id(&self.stack, id), properties.clone());
                live.service_token = Some(token);
                live.service_timeout_s = timeout_s;
                let request = self.request(RequestType::Create, id, &live, properties, None);
                self.live.insert(id.to_owned(), live);
                request
            }
        };
        self.attempted.insert(id.to_owned(), request.resource_properties.clone());
        Prepared::Job(Job::Send { request, fail_on_purpose })
    }

    fn prepare_wait(&mut self, id: &str, decl: &ResourceDecl, properties: Value) -> Prepared {
        let text = |field: &str| match properties.get(field) {
            Some(Value::String(text)) => Some(text.clone()),
            Some(other) => Some(other.to_string()),
            None => None,
        };
        let Some(handle) = text("Handle") else {
            return Prepared::Failed(
                "a WaitCondition without Handle waits on a CreationPolicy, which play refuses".into(),
            );
        };
        let timeout_s = match text("Timeout").map(|t| t.trim().parse::<u64>()) {
            Some(Ok(seconds)) if (1..=43_200).contains(&seconds) => seconds,
            _ => return Prepared::Failed("Timeout must be whole seconds from 1 to 43200".into()),
        };
        let count = match text("Count").map(|c| c.trim().parse::<usize>()) {
            None => 1,
            Some(Ok(count)) if count >= 1 => count,
            _ => return Prepared::Failed("Count must be a whole number of at least 1".into()),
        };
        self.live.insert(id.to_owned(), self.new_live(decl, Kind::Wait, made_up_id(&self.stack, id), properties));
        Prepared::Job(Job::Wait { handle, count, timeout_s })
    }

    /// Settles a finished job; true when the resource's turn succeeded.
    fn settle(&mut self, phase: Phase, id: &str, job: Job, done: Done) -> bool {
        let verb = self.verb(phase, id);
        match (job, done) {
            (Job::Send { request, fail_on_purpose }, Done::Answer(result)) => {
                self.settle_answer(phase, id, verb, request, fail_on_purpose, result)
            }
            (_, Done::Handle(Ok(url))) => {
                let decl = self.target_decl(id);
                self.live.insert(id.to_owned(), self.new_live(&decl, Kind::Handle, url, Value::Object(Map::new())));
                self.resource_event(id, &format!("{verb}_COMPLETE"), None);
                true
            }
            (_, Done::Handle(Err(error))) => {
                self.fail_turn(phase, id, format!("cfn-once play could not make the handle: {error:#}"));
                false
            }
            (_, Done::Waited(Ok(WaitEnd::Complete(data)))) => {
                let text = Value::Object(data).to_string();
                if let Some(live) = self.live.get_mut(id) {
                    live.data = Map::from_iter([("Data".to_owned(), Value::String(text))]);
                }
                self.resource_event(id, &format!("{verb}_COMPLETE"), None);
                true
            }
            (_, Done::Waited(Ok(WaitEnd::Failed { unique_id, reason }))) => {
                let reason = format!("WaitCondition received failed message: '{reason}' for uniqueId: {unique_id}");
                self.fail_turn(phase, id, reason);
                false
            }
            (_, Done::Waited(Ok(WaitEnd::TimedOut { received, expected }))) => {
                let reason =
                    format!("WaitCondition timed out. Received {received} conditions when expecting {expected}");
                self.fail_turn(phase, id, reason);
                false
            }
            (_, Done::Waited(Err(error))) => {
                self.fail_turn(phase, id, format!("cfn-once play could not read the handle's signals: {error:#}"));
                false
            }
            (_, _) => {
                let reason = (self.live.get(id).map(|l| l.kind) == Some(Kind::Other) && phase == Phase::Forward)
                    .then(|| "not provisioned: cfn-once play sends requests to custom resources only".to_owned());
                if phase == Phase::Delete {
                    self.forget(id);
                }
                self.resource_event(id, &format!("{verb}_COMPLETE"), reason);
                true
            }
        }
    }

    fn settle_answer(
        &mut self,
        phase: Phase,
        id: &str,
        verb: &str,
        request: CfnRequest,
        fail_on_purpose: bool,
        result: anyhow::Result<Outcome>,
    ) -> bool {
        let mut shown = request.clone();
        shown.resource_properties = without_presigned_urls(&shown.resource_properties);
        shown.old_resource_properties = shown.old_resource_properties.as_ref().map(without_presigned_urls);
        let mut record = RequestRecord {
            step: self.step.clone(),
            phase: self.phase_name.to_owned(),
            request: shown,
            outcome: "TIMED OUT".into(),
            reason: None,
            answered_physical_id: None,
            answered_by: None,
            puts: 0,
            elapsed_ms: 0,
        };
        let failure = match result {
            Err(error) => Some(format!("cfn-once play could not send the request: {error:#}")),
            Ok(Outcome::TimedOut) => Some(format!(
                "CloudFormation did not receive a response from your Custom Resource within its ServiceTimeout of {} s",
                request.service_timeout_s
            )),
            Ok(Outcome::Answered(answer)) => {
                record.outcome = if answer.success { "SUCCESS" } else { "FAILED" }.into();
                record.reason.clone_from(&answer.reason);
                record.answered_physical_id.clone_from(&answer.physical_resource_id);
                record.answered_by.clone_from(&answer.answered_by);
                record.puts = answer.puts;
                record.elapsed_ms = answer.elapsed_ms;
                let answered_id = answer.physical_resource_id.clone();
                if let (Some(live), Some(answered)) = (self.live.get_mut(id), &answered_id)
                    && request.request_type == RequestType::Create
                {
                    // A FAILED Create's id is what its rollback Delete names.
                    live.physical_id.clone_from(answered);
                }
                if !answer.success {
                    Some(format!(
                        "Received response status [FAILED] from custom resource. Message returned: {}",
                        answer.reason.as_deref().unwrap_or("(no reason)")
                    ))
                } else if fail_on_purpose {
                    Some(format!(
                        "failed on purpose (--fail {id}@{}): the provider answered SUCCESS{}",
                        self.step,
                        answered_id.as_deref().map(|i| format!(" with PhysicalResourceId {i}")).unwrap_or_default()
                    ))
                } else {
                    self.apply_success(phase, id, &request, answer.physical_resource_id, answer.data, answer.no_echo);
                    None
                }
            }
        };
        self.history.entry(id.to_owned()).or_default().push(record);
        match failure {
            None => {
                let replaced = phase == Phase::Forward
                    && request.request_type == RequestType::Update
                    && self.live.get(id).map(|l| &l.physical_id) != request.physical_resource_id.as_ref();
                let reason = replaced
                    .then(|| "Requested update required the provider to create a new physical resource".to_owned());
                self.resource_event(id, &format!("{verb}_COMPLETE"), reason);
                true
            }
            Some(reason) => {
                self.fail_turn(phase, id, reason);
                false
            }
        }
    }

    fn apply_success(
        &mut self,
        phase: Phase,
        id: &str,
        request: &CfnRequest,
        physical_id: Option<String>,
        data: Map<String, Value>,
        no_echo: bool,
    ) {
        match phase {
            Phase::Delete => {
                self.forget(id);
            }
            Phase::UpdateBack => {
                if let Some(old) = self.before.get(id).cloned() {
                    let mut restored = old;
                    restored.data = data;
                    restored.no_echo = no_echo;
                    self.live.insert(id.to_owned(), restored);
                }
            }
            Phase::Forward => {
                if let Some(live) = self.live.get_mut(id) {
                    if let Some(physical_id) = physical_id {
                        live.physical_id = physical_id;
                    }
                    live.properties = request.resource_properties.clone();
                    live.service_timeout_s = request.service_timeout_s;
                    live.data = data;
                    live.no_echo = no_echo;
                }
            }
        }
    }

    /// Whether `--fail` names `id` in this step.
    fn fails(&self, id: &str) -> bool {
        self.fail.contains(&(id.to_owned(), self.step.clone()))
    }

    /// Records a failed turn: its event and, for the stack's reason, its name.
    pub(super) fn fail_turn(&mut self, phase: Phase, id: &str, reason: String) {
        let verb = self.verb(phase, id);
        self.failed.push(id.to_owned());
        self.resource_event(id, &format!("{verb}_FAILED"), Some(reason));
    }

    fn cancel_turn(&mut self, phase: Phase, id: &str) {
        let verb = self.verb(phase, id);
        let what = if verb == "CREATE" { "creation" } else { "update" };
        self.resource_event(id, &format!("{verb}_FAILED"), Some(format!("Resource {what} cancelled")));
    }

    /// CREATE, UPDATE or DELETE, as the resource's events name this turn.
    pub(super) fn verb(&self, phase: Phase, id: &str) -> &'static str {
        match phase {
            Phase::Delete => "DELETE",
            Phase::UpdateBack => "UPDATE",
            Phase::Forward if self.before.contains_key(id) => "UPDATE",
            Phase::Forward => "CREATE",
        }
    }

    fn request(
        &self,
        request_type: RequestType,
        id: &str,
        live: &Live,
        properties: Value,
        old_properties: Option<Value>,
    ) -> CfnRequest {
        CfnRequest {
            request_type,
            logical_resource_id: id.to_owned(),
            resource_type: live.resource_type.clone(),
            service_token: live.service_token.clone().unwrap_or_default(),
            physical_resource_id: (request_type != RequestType::Create).then(|| live.physical_id.clone()),
            service_timeout_s: service_timeout_s(&properties).unwrap_or(live.service_timeout_s),
            resource_properties: properties,
            old_resource_properties: old_properties,
        }
    }

    pub(super) fn new_live(&self, decl: &ResourceDecl, kind: Kind, physical_id: String, properties: Value) -> Live {
        Live {
            resource_type: decl.resource_type.clone(),
            kind,
            physical_id,
            properties,
            data: Map::new(),
            no_echo: false,
            deletion_policy: decl.deletion_policy,
            update_replace_policy: decl.update_replace_policy,
            service_timeout_s: 3_600,
            service_token: None,
        }
    }

    /// Removes a deleted resource from the stack, remembering its type for its events.
    pub(super) fn forget(&mut self, id: &str) {
        if let Some(live) = self.live.remove(id) {
            self.gone.insert(id.to_owned(), live.resource_type);
        }
    }

    pub(super) fn target_decl(&self, id: &str) -> ResourceDecl {
        let template = &self.target.as_ref().or(self.current.as_ref()).expect("a template").template;
        template.resource(id).expect("a declared resource").clone()
    }

    /// A resource's properties resolved against the stack as it stands.
    fn resolve(
        &self,
        template: &Template,
        parameters: &BTreeMap<String, Value>,
        decl: &ResourceDecl,
    ) -> Result<Value, String> {
        let view = self.view(template, false);
        let scope = Scope { parameters, pseudo: &self.pseudo, conditions: &self.conditions, resources: &view };
        let value = evaluate(&decl.properties, &scope).map_err(|error| format!("Template error: {error}"))?;
        let value = value.unwrap_or_else(|| Value::Object(Map::new()));
        Ok(if Kind::of(&decl.resource_type) == Kind::Custom { to_properties(value) } else { value })
    }

    pub(super) fn view<'v>(&'v self, template: &'v Template, masked: bool) -> View<'v> {
        View { live: &self.live, declared: &template.resources, stack: &self.stack, stubs: &self.stubs, masked }
    }
}
