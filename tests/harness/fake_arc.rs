//! A stand-in for a Route 53 ARC cluster: moto has no ARC, so this HTTP peer answers the two
//! data-plane calls cfn-once makes with ARC's documented wire format (awsJson1_0, target
//! `ToggleCustomerAPI`): GetRoutingControlState and UpdateRoutingControlStates. Each endpoint
//! of the cluster can be told to answer, fail with a 500, or not listen at all.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cfn_once::config::ArcEndpoint;
use serde_json::{Value, json};

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
            let (state, served, updates) = (Arc::clone(&self.states), Arc::clone(&endpoint), Arc::clone(&self.updates));
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    served.requests.fetch_add(1, Ordering::SeqCst);
                    let _ = serve(stream, &state, served.failing.load(Ordering::SeqCst), &updates);
                }
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

fn serve(
    stream: TcpStream,
    states: &Mutex<HashMap<String, bool>>,
    failing: bool,
    updates: &Mutex<Vec<Update>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let (mut length, mut target) = (0, String::new());
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        if header.trim().is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("x-amz-target:") {
            target = header.split_once(':').map(|(_, v)| v.trim().to_owned()).unwrap_or_default();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, answer) = if failing {
        ("500 Internal Server Error", json!({"__type": "InternalServerException", "message": "injected failure"}))
    } else {
        match target.as_str() {
            "ToggleCustomerAPI.GetRoutingControlState" => {
                let arn = request["RoutingControlArn"].as_str().unwrap_or_default().to_owned();
                match states.lock().expect("states").get(&arn) {
                    Some(on) => (
                        "200 OK",
                        json!({"RoutingControlArn": arn, "RoutingControlState": if *on { "On" } else { "Off" }, "RoutingControlName": "cell"}),
                    ),
                    None => (
                        "400 Bad Request",
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
                let mut states = states.lock().expect("states");
                for (arn, on) in &entries {
                    states.insert(arn.clone(), *on);
                }
                updates.lock().expect("updates").push(entries);
                ("200 OK", json!({}))
            }
            _ => ("400 Bad Request", json!({"__type": "ValidationException", "message": "unknown target"})),
        }
    };
    let body = answer.to_string();
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
