//! A stand-in for a Route 53 ARC cluster: moto has no ARC, so this HTTP peer answers the two
//! data-plane calls cfn-once makes with ARC's documented wire format (awsJson1_0, target
//! `ToggleCustomerAPI`): GetRoutingControlState and UpdateRoutingControlStates. Each endpoint
//! of the cluster can be told to answer, fail with a 500, or not listen at all. Each endpoint
//! is served on hyper (`background_server.rs`) and closes its connection after every answer.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cfn_once::config::ArcEndpoint;
use cfn_once_local::http_server::{Body, Unanswered, json_reply, read_body};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::background_server::serve_in_background;

/// The longest request body an endpoint reads (a longer one is answered 413): ARC's requests
/// name a few routing controls.
const BODY_BYTES_MAX: usize = 1024 * 1024;

/// One endpoint's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointMode {
    Answer,
    /// HTTP 500 with an InternalServerException body.
    Fail,
    /// Nothing listens on the port.
    Down,
}

/// The entries of one UpdateRoutingControlStates call: (routing control, On).
pub type Update = Vec<(String, bool)>;

#[derive(Debug, Default)]
struct Endpoint {
    failing: AtomicBool,
    requests: AtomicU32,
}

/// A fake cluster: routing control states shared by all its endpoints.
#[derive(Debug, Clone)]
pub struct FakeArcCluster {
    states: Arc<Mutex<HashMap<String, bool>>>,
    endpoints: Vec<(ArcEndpoint, Arc<Endpoint>)>,
    /// How many UpdateRoutingControlStates calls arrived, and their entries.
    updates: Arc<Mutex<Vec<Update>>>,
}

impl FakeArcCluster {
    /// A cluster with one endpoint per mode, in order, and the given initial states.
    pub fn start(modes: &[EndpointMode], states: &[(&str, bool)]) -> Self {
        let cluster = Self {
            states: Arc::new(Mutex::new(states.iter().map(|(arn, on)| ((*arn).to_owned(), *on)).collect())),
            endpoints: Vec::new(),
            updates: Arc::new(Mutex::new(Vec::new())),
        };
        let endpoints = modes.iter().enumerate().map(|(index, mode)| cluster.endpoint(index, *mode)).collect();
        Self { endpoints, ..cluster }
    }

    fn endpoint(&self, index: usize, mode: EndpointMode) -> (ArcEndpoint, Arc<Endpoint>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let endpoint =
            Arc::new(Endpoint { failing: AtomicBool::new(mode == EndpointMode::Fail), requests: AtomicU32::new(0) });
        if mode == EndpointMode::Down {
            drop(listener);
        } else {
            let peer = Arc::new(Peer {
                states: Arc::clone(&self.states),
                endpoint: Arc::clone(&endpoint),
                updates: Arc::clone(&self.updates),
            });
            serve_in_background("fake-arc-endpoint", listener, move |request| {
                let peer = Arc::clone(&peer);
                async move { Ok::<_, Unanswered>(peer.answer(request).await) }
            });
        }
        let regions = ["us-east-1", "ap-southeast-2", "eu-west-1", "us-west-2", "ap-northeast-1"];
        (
            ArcEndpoint { region: regions[index % regions.len()].into(), url: format!("http://127.0.0.1:{port}/v1") },
            endpoint,
        )
    }

    /// The endpoints, as cfn-once is configured with them.
    pub fn endpoints(&self) -> Vec<ArcEndpoint> {
        self.endpoints.iter().map(|(endpoint, _)| endpoint.clone()).collect()
    }

    /// `CFN_ONCE_ARC_ENDPOINTS` for this cluster.
    pub fn endpoints_variable(&self) -> String {
        self.endpoints().iter().map(|e| format!("{}={}", e.region, e.url)).collect::<Vec<_>>().join(",")
    }

    /// Requests each endpoint received.
    pub fn requests(&self) -> Vec<u32> {
        self.endpoints.iter().map(|(_, endpoint)| endpoint.requests.load(Ordering::SeqCst)).collect()
    }

    /// Makes endpoint `index` fail (or answer again).
    pub fn set_failing(&self, index: usize, failing: bool) {
        self.endpoints[index].1.failing.store(failing, Ordering::SeqCst);
    }

    /// A routing control's state.
    pub fn is_on(&self, arn: &str) -> Option<bool> {
        self.states.lock().expect("states").get(arn).copied()
    }

    /// Every UpdateRoutingControlStates call's entries.
    pub fn updates(&self) -> Vec<Update> {
        self.updates.lock().expect("updates").clone()
    }
}

/// What one endpoint's server holds: the cluster's shared states and its own counters.
#[derive(Debug)]
struct Peer {
    states: Arc<Mutex<HashMap<String, bool>>>,
    endpoint: Arc<Endpoint>,
    updates: Arc<Mutex<Vec<Update>>>,
}

impl Peer {
    /// Answers one call as ARC does, or with a 500 while the endpoint is failing.
    async fn answer(&self, request: Request<Incoming>) -> Response<Body> {
        self.endpoint.requests.fetch_add(1, Ordering::SeqCst);
        let failing = self.endpoint.failing.load(Ordering::SeqCst);
        let (head, body) = request.into_parts();
        let target = head.headers.get("x-amz-target").and_then(|value| value.to_str().ok()).unwrap_or_default();
        let body = match read_body(body, BODY_BYTES_MAX).await {
            Ok(body) => body,
            Err(refusal) => return refusal,
        };
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, answer) = if failing {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"__type": "InternalServerException", "message": "injected failure"}),
            )
        } else {
            match target {
                "ToggleCustomerAPI.GetRoutingControlState" => {
                    let arn = request["RoutingControlArn"].as_str().unwrap_or_default().to_owned();
                    match self.states.lock().expect("states").get(&arn) {
                        Some(on) => (
                            StatusCode::OK,
                            json!({"RoutingControlArn": arn, "RoutingControlState": if *on { "On" } else { "Off" }, "RoutingControlName": "cell"}),
                        ),
                        None => (
                            StatusCode::BAD_REQUEST,
                            json!({"__type": "ResourceNotFoundException", "message": "no such routing control"}),
                        ),
                    }
                }
                "ToggleCustomerAPI.UpdateRoutingControlStates" => {
                    let entries: Update = request["UpdateRoutingControlStateEntries"]
                        .as_array()
                        .map(|entries| {
                            entries
                                .iter()
                                .map(|e| {
                                    (
                                        e["RoutingControlArn"].as_str().unwrap_or_default().to_owned(),
                                        e["RoutingControlState"] == "On",
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let mut states = self.states.lock().expect("states");
                    for (arn, on) in &entries {
                        states.insert(arn.clone(), *on);
                    }
                    self.updates.lock().expect("updates").push(entries);
                    (StatusCode::OK, json!({}))
                }
                _ => (StatusCode::BAD_REQUEST, json!({"__type": "ValidationException", "message": "unknown target"})),
            }
        };
        // Every answer closes its connection, as this stand-in's always have: the adapter's next
        // call to the endpoint opens a fresh one.
        let mut reply = json_reply(status, &[("connection", "close")], answer.to_string());
        reply.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/x-amz-json-1.0"));
        reply
    }
}
