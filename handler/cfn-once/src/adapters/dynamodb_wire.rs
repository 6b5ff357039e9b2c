//! DynamoDB's JSON protocol spoken directly, for the lease store's protocol calls.
//!
//! Every request the function answers makes three conditional writes to the lease table
//! (acquire, commit, the delivered mark). Through the SDK, each goes through smithy's
//! orchestrator: a config bag, a dozen interceptors, endpoint rules evaluated per call, the
//! request and its answer built twice over (fluent builder, input, HTTP). The profile of a warm
//! batch put that at about a third of the function's CPU (BENCHMARKS.md). [`DynamoWire`] sends
//! the same requests itself: one JSON body (the `awsJson1_0` protocol's `X-Amz-Target` and
//! `application/x-amz-json-1.0`), signed (SigV4, by `sigv4::PostSigner`, held byte for byte to
//! `aws-sigv4`, the signer the SDK uses, which signs any request of another shape) on the
//! credentials of the SDK's configuration, on the process's one TLS configuration and an
//! HTTP/1.1 client of its own (`h1::Client`: the exchange on the caller's task, keep-alive
//! connections of one origin).
//!
//! What it keeps of the SDK, so that the two cannot drift:
//! - **The endpoint**: the SDK's own DynamoDB endpoint rules (`DefaultResolver`), resolved once,
//!   at the first call (not during the init), from the same settings `aws_sdk_dynamodb::config::Builder::from(&SdkConfig)` reads
//!   (`AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL` and the profile's, FIPS, dual-stack); the
//!   account-ID endpoints are not used (they need the account, which Lambda's credentials lack).
//! - **The classification** of a failed call (`dynamodb_errors::of_service_error`): the same
//!   table of error codes. Transport failures map as the SDK's do: a timeout, a failed send or an
//!   unreadable answer is an unknown outcome, never "not applied". Credentials that cannot be
//!   loaded are "not applied": nothing was sent. The unit tests hold the two to the same answers
//!   on the same HTTP responses, the SDK's client and this one side by side.
//! - **One attempt per call, within the call's timeout** (`store_timeout_ms`): the worker retries.
//!
//! The function's credentials are cached until five minutes before they expire, or for fifteen
//! minutes when they carry no expiry (Lambda's, from the environment), as the SDK's identity
//! cache does. Nothing here logs: a request body holds the stored response.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_dynamodb::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_smithy_runtime_api::client::identity::Identity;
use futures_util::FutureExt;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use super::dynamodb_errors::{Failure, of_service_error};
use super::h1;
use super::sigv4::{JSON_1_0, PostSigner};

/// An item as the SDK types it: what the lease store parses records from.
pub type Item = HashMap<String, AttributeValue>;

/// The longest answer read: an item is at most 400 KB, its JSON a little more.
const ANSWER_LIMIT: usize = 4 << 20;

/// How long credentials without an expiry are reused, and how long before an expiry they are
/// fetched again: the SDK identity cache's defaults.
const NO_EXPIRY_REUSE: Duration = Duration::from_secs(15 * 60);
const EXPIRY_BUFFER: Duration = Duration::from_secs(5 * 60);

/// The longest TCP and TLS connect a call waits for, as the SDK clients are configured (`app`).
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(2);

/// How a call failed.
#[derive(Debug)]
pub enum WireError {
    /// DynamoDB answered with an error: its code (the part after `#`, empty if the answer named
    /// none), its message, and the item a failed condition returned (`ALL_OLD`).
    Service { code: String, message: Option<String>, item: Option<Item> },
    /// The call did not get an answer, or its answer could not be read.
    Failed(Failure),
}

impl WireError {
    /// The error as the SDK path classifies the same failure (`dynamodb_errors::classify`).
    pub fn failure(self) -> Failure {
        match self {
            Self::Service { code, message, .. } => {
                let named = if code.is_empty() { "an unnamed error" } else { &code };
                let text = match message {
                    Some(message) => format!("{named}: {message}"),
                    None => named.to_owned(),
                };
                of_service_error(&code, text)
            }
            Self::Failed(failure) => failure,
        }
    }
}

/// DynamoDB's JSON protocol on one endpoint and region, with the SDK configuration's
/// credentials. Cheap to clone (one shared connection pool).
#[derive(Clone)]
pub struct DynamoWire {
    inner: Arc<Inner>,
}

struct Inner {
    /// What the endpoint is resolved from, and, once the first call resolved it, its URL with a
    /// trailing `/` (the protocol posts to the root): the rules are evaluated on first use, not
    /// during the function's init.
    endpoint: Params,
    url: OnceLock<Result<Endpoint, String>>,
    region: String,
    signer: PostSigner,
    credentials: SharedCredentialsProvider,
    /// Shared, not cloned, by each call: a `Credentials` clone copies its property map.
    cached: Mutex<Option<(Arc<Credentials>, Instant)>>,
    client: h1::Client,
    timeout: Duration,
}

impl std::fmt::Debug for DynamoWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoWire")
            .field("endpoint", &self.inner.endpoint)
            .field("region", &self.inner.region)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl DynamoWire {
    /// The wire to DynamoDB in `region` with `sdk`'s endpoint settings and credentials, each
    /// call given up after `timeout_ms`. An error says what is missing (no credentials provider,
    /// an endpoint the SDK's rules reject, an unusable TLS configuration).
    pub fn from_sdk(sdk: &aws_config::SdkConfig, region: &str, timeout_ms: u64) -> Result<Self, String> {
        let credentials =
            sdk.credentials_provider().ok_or_else(|| "the SDK configuration has no credentials provider".to_owned())?;
        let endpoint = endpoint_params(sdk, region)?;
        let tls = super::https::client_config()?;
        let timeout = Duration::from_millis(timeout_ms);
        let client = h1::Client::new(&tls, timeout.min(CONNECT_TIMEOUT_MAX));
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint,
                url: OnceLock::new(),
                region: region.to_owned(),
                signer: PostSigner::new(region, "dynamodb"),
                credentials,
                cached: Mutex::new(None),
                client,
                timeout,
            }),
        })
    }

    /// The endpoint this wire posts to, as the SDK's DynamoDB endpoint rules resolve it (an
    /// error says why they do not).
    pub fn url(&self) -> Result<&str, String> {
        self.endpoint().map(|endpoint| endpoint.url.as_str())
    }

    fn endpoint(&self) -> Result<&Endpoint, String> {
        self.inner
            .url
            .get_or_init(|| resolve(&self.inner.endpoint).and_then(Endpoint::of))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// One call of `operation` (`UpdateItem`, `PutItem`, `GetItem`) with `body`: its answer's
    /// JSON object, or how it failed.
    pub async fn call(&self, operation: &str, body: &impl Serialize) -> Result<Map<String, Value>, WireError> {
        let body = serde_json::to_vec(body).map_err(|error| {
            WireError::Failed(Failure::Permanent(format!("the request could not be built: {error}")))
        })?;
        let credentials = self.credentials().await?;
        let request = self.signed(operation, &body, &credentials).map_err(|error| {
            WireError::Failed(Failure::Permanent(format!("the request could not be built: {error}")))
        })?;
        let origin = &self.endpoint().map_err(|error| WireError::Failed(Failure::Permanent(error)))?.origin;
        match tokio::time::timeout(self.inner.timeout, self.exchange(origin, &request)).await {
            Ok(answer) => answer,
            Err(_) => Err(WireError::Failed(Failure::Unknown("no answer before the timeout".to_owned()))),
        }
    }

    /// The credentials to sign with, from the cache while they are fresh.
    async fn credentials(&self) -> Result<Arc<Credentials>, WireError> {
        let now = Instant::now();
        if let Some((credentials, until)) = self.inner.cached.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
            && now < *until
        {
            return Ok(Arc::clone(credentials));
        }
        let credentials: Credentials = self.inner.credentials.provide_credentials().await.map_err(|error| {
            WireError::Failed(Failure::NotApplied(format!("the function's credentials are not available: {error}")))
        })?;
        let until = match credentials.expiry() {
            Some(expiry) => {
                let left = expiry.duration_since(SystemTime::now()).unwrap_or_default();
                now + left.saturating_sub(EXPIRY_BUFFER)
            }
            None => now + NO_EXPIRY_REUSE,
        };
        let credentials = Arc::new(credentials);
        *self.inner.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some((Arc::clone(&credentials), until));
        Ok(credentials)
    }

    /// The POST of `body` for `operation`, signed (SigV4, service `dynamodb`): by the
    /// [`PostSigner`] where the request has its shape (the endpoint's root, header values signed
    /// as they are), else by `aws-sigv4`.
    fn signed(&self, operation: &str, body: &[u8], credentials: &Credentials) -> Result<SignedPost, String> {
        self.signed_at(operation, body, credentials, SystemTime::now(), true)
    }

    /// [`Self::signed`] at `now`, by `aws-sigv4` alone unless `own_signer` (the tests compare
    /// the two).
    ///
    /// The signer's POST is written straight into the bytes h1 sends, its headers in the order
    /// the `aws-sigv4` path gives them: no `http::Request`, header map or URI is built for it and
    /// dropped again (they were about 3% of a warm request's CPU in `make profile`).
    fn signed_at(
        &self,
        operation: &str,
        body: &[u8],
        credentials: &Credentials,
        now: SystemTime,
        own_signer: bool,
    ) -> Result<SignedPost, String> {
        let endpoint = self.endpoint()?;
        let target = format!("DynamoDB_20120810.{operation}");
        let signer = &self.inner.signer;
        if own_signer && endpoint.root && signer.fits(&endpoint.host, &target, credentials) {
            let signed = signer.sign(credentials, now, &endpoint.host, &target, body);
            let token = credentials.session_token();
            let headers = [
                ("content-type", Some(JSON_1_0)),
                ("x-amz-target", Some(target.as_str())),
                ("host", Some(endpoint.host.as_str())),
                ("x-amz-date", Some(signed.amz_date.as_str())),
                ("x-amz-security-token", token),
                ("authorization", Some(signed.authorization.as_str())),
            ];
            let present = headers.iter().filter_map(|(name, value)| Some((*name, (*value)?.as_bytes())));
            return Ok(SignedPost(h1::request("POST", "/", present, body)));
        }
        let mut request = http::Request::post(endpoint.uri.clone())
            .header(http::header::CONTENT_TYPE, JSON_1_0)
            .header("x-amz-target", &target)
            .header(http::header::HOST, &endpoint.host)
            .body(())
            .map_err(|error| error.to_string())?;
        let identity: Identity = credentials.clone().into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.inner.region)
            .name("dynamodb")
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|error| format!("the signing parameters are incomplete: {error}"))?
            .into();
        let headers = request.headers().iter().map(|(name, value)| (name.as_str(), value.to_str().unwrap_or_default()));
        let signable = SignableRequest::new("POST", &endpoint.url, headers, SignableBody::Bytes(body))
            .map_err(|error| format!("the request cannot be signed: {error}"))?;
        let (instructions, _signature) =
            sign(signable, &params).map_err(|error| format!("the request cannot be signed: {error}"))?.into_parts();
        instructions.apply_to_request_http1x(&mut request);
        let target = request.uri().path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
        let headers = request.headers().iter().map(|(name, value)| (name.as_str(), value.as_bytes()));
        Ok(SignedPost(h1::request("POST", target, headers, body)))
    }

    /// Sends `request` to `origin` and reads its answer.
    async fn exchange(&self, origin: &h1::Origin, request: &SignedPost) -> Result<Map<String, Value>, WireError> {
        let answer = self
            .inner
            .client
            .exchange(origin, &request.0, ANSWER_LIMIT)
            .await
            .map_err(|error| WireError::Failed(Failure::Unknown(error.to_string())))?;
        if (200..300).contains(&answer.status) {
            return match serde_json::from_slice::<Value>(&answer.body) {
                Ok(Value::Object(answer)) => Ok(answer),
                // The SDK reads it as an error without a name (an unknown outcome): so does this.
                _ => Err(WireError::Service { code: String::new(), message: None, item: None }),
            };
        }
        Err(service_error(answer.error_type.as_deref(), &answer.body))
    }
}

/// A signed POST as HTTP/1.1 writes it (`h1::request`). It holds the signature and, with
/// temporary credentials, the session token: its `Debug` shows the request line and the
/// header names only.
struct SignedPost(Vec<u8>);

impl std::fmt::Debug for SignedPost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = self.0.split(|byte| *byte == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line));
        let mut lines = head.take_while(|line| !line.is_empty());
        let request_line = lines.next().map(String::from_utf8_lossy).unwrap_or_default();
        let names: Vec<_> = lines
            .map(|line| String::from_utf8_lossy(line.split(|byte| *byte == b':').next().unwrap_or_default()))
            .collect();
        f.debug_struct("SignedPost")
            .field("request_line", &request_line)
            .field("headers", &names)
            .finish_non_exhaustive()
    }
}

/// The error an answer that is not a success names, read as the SDK's `awsJson1_0` error parser
/// reads it: the code from the `x-amzn-ErrorType` header, else the body's `code`, else its
/// `__type`, without a suffix from the first `:` or a namespace up to the first `#`; its
/// message; and a failed condition's item. A body that is not JSON names nothing (the SDK's
/// "unhandled" error), whatever the header says; an empty one leaves the header.
fn service_error(error_type: Option<&str>, body: &[u8]) -> WireError {
    let unnamed = || WireError::Service { code: String::new(), message: None, item: None };
    let json = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(json @ Value::Object(_)) => json,
            _ => return unnamed(),
        }
    };
    let field = |name: &str| json.get(name).and_then(Value::as_str);
    let named = error_type.or_else(|| field("code")).or_else(|| field("__type"));
    let code = named.map(sanitize_code).unwrap_or_default().to_owned();
    let message = field("message").or_else(|| field("Message")).or_else(|| field("errorMessage")).map(str::to_owned);
    let item = json.get("Item").and_then(|item| item_from_json(item).ok());
    WireError::Service { code, message, item }
}

/// `Code:http://…` or `com.amazonaws.dynamodb.v20120810#Code` → `Code`.
fn sanitize_code(code: &str) -> &str {
    let code = code.split_once(':').map_or(code, |(head, _)| head);
    code.split_once('#').map_or(code, |(_, tail)| tail)
}

/// What the SDK's DynamoDB client would resolve its endpoint from, given `sdk` in `region`
/// (`aws_sdk_dynamodb::config::Builder::from(&SdkConfig)` reads the same settings).
fn endpoint_params(sdk: &aws_config::SdkConfig, region: &str) -> Result<Params, String> {
    let configured = if sdk.get_origin("endpoint_url").is_client_config() {
        sdk.endpoint_url().map(str::to_owned)
    } else {
        let key = aws_types::service_config::ServiceConfigKey::builder()
            .service_id("DynamoDB")
            .env("AWS_ENDPOINT_URL")
            .profile("endpoint_url")
            .build()
            .map_err(|error| format!("the endpoint setting's key: {error}"))?;
        sdk.service_config()
            .and_then(|config| config.load_config(key))
            .or_else(|| sdk.endpoint_url().map(str::to_owned))
    };
    Params::builder()
        .region(region)
        .set_use_fips(sdk.use_fips())
        .set_use_dual_stack(sdk.use_dual_stack())
        .set_endpoint(configured)
        .account_id_endpoint_mode("disabled")
        .build()
        .map_err(|error| format!("DynamoDB's endpoint parameters: {error}"))
}

/// The endpoint's URL by the SDK's own DynamoDB endpoint rules, with a trailing `/`.
/// The resolved endpoint, parsed once: its URL, the URI requests go to, the `host` header they
/// carry (the URL's authority, as the SDK signs it), and whether the requests post to its root
/// (`/`, no query), the shape the [`PostSigner`] signs.
#[derive(Debug)]
struct Endpoint {
    url: String,
    uri: http::Uri,
    host: String,
    root: bool,
    origin: h1::Origin,
}

impl Endpoint {
    fn of(url: String) -> Result<Self, String> {
        let uri: http::Uri = url.parse().map_err(|error| format!("the endpoint {url:?} is not a URL: {error}"))?;
        let host = uri.authority().map(|authority| authority.to_string()).unwrap_or_default();
        let root = uri.path() == "/" && uri.query().is_none();
        let origin = h1::Origin::of(&uri).map_err(|error| format!("the endpoint {url:?} cannot be called: {error}"))?;
        Ok(Self { url, uri, host, root, origin })
    }
}

fn resolve(params: &Params) -> Result<String, String> {
    let resolved = DefaultResolver::new()
        .resolve_endpoint(params)
        .now_or_never()
        .ok_or_else(|| "DynamoDB's endpoint rules did not resolve at once".to_owned())?
        .map_err(|error| format!("DynamoDB's endpoint rules reject the configuration: {error}"))?;
    let url = resolved.url().trim_end_matches('/');
    Ok(format!("{url}/"))
}

/// A GetItem's request body: the lease store's reads and the control's.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetItemBody<'a> {
    pub table_name: &'a str,
    pub key: JsonItem<'a>,
    pub consistent_read: bool,
}

/// An item written as DynamoDB's JSON (`{"name": {"S": "…"}}`) as it is serialized: what a
/// request body carries, with no JSON value built first.
#[derive(Debug, Clone, Copy)]
pub struct JsonItem<'a>(pub &'a Item);

impl Serialize for JsonItem<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, &JsonValue(value))?;
        }
        map.end()
    }
}

/// Placeholders and their attribute values (`ExpressionAttributeValues`), written as DynamoDB's
/// JSON.
#[derive(Debug, Clone, Copy)]
pub struct JsonValues<'a>(pub &'a [(&'a str, AttributeValue)]);

impl Serialize for JsonValues<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (placeholder, value) in self.0 {
            map.serialize_entry(placeholder, &JsonValue(value))?;
        }
        map.end()
    }
}

/// One attribute value written as DynamoDB's JSON (`{"S": "…"}`).
#[derive(Debug, Clone, Copy)]
pub struct JsonValue<'a>(pub &'a AttributeValue);

/// A blob as the protocol carries it: base64.
struct Base64<'a>(&'a Blob);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&aws_smithy_types::base64::encode(self.0.as_ref()))
    }
}

/// A list written as a JSON array of `wrap`ped entries.
fn array<'a, S: Serializer, T, W: Serialize>(
    serializer: S,
    entries: &'a [T],
    wrap: impl Fn(&'a T) -> W,
) -> Result<S::Ok, S::Error> {
    let mut seq = serializer.serialize_seq(Some(entries.len()))?;
    for entry in entries {
        seq.serialize_element(&wrap(entry))?;
    }
    seq.end()
}

/// The content of an attribute value, without its kind.
struct Content<'a>(&'a AttributeValue);

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            AttributeValue::S(text) | AttributeValue::N(text) => serializer.serialize_str(text),
            AttributeValue::B(blob) => Base64(blob).serialize(serializer),
            AttributeValue::Bool(flag) | AttributeValue::Null(flag) => serializer.serialize_bool(*flag),
            AttributeValue::Ss(set) | AttributeValue::Ns(set) => array(serializer, set, String::as_str),
            AttributeValue::Bs(set) => array(serializer, set, Base64),
            AttributeValue::L(list) => array(serializer, list, JsonValue),
            AttributeValue::M(map) => JsonItem(map).serialize(serializer),
            _ => serializer.serialize_bool(true),
        }
    }
}

impl Serialize for JsonValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kind = match self.0 {
            AttributeValue::S(_) => "S",
            AttributeValue::N(_) => "N",
            AttributeValue::B(_) => "B",
            AttributeValue::Bool(_) => "BOOL",
            AttributeValue::Ss(_) => "SS",
            AttributeValue::Ns(_) => "NS",
            AttributeValue::Bs(_) => "BS",
            AttributeValue::L(_) => "L",
            AttributeValue::M(_) => "M",
            // Null, and a kind this SDK does not know, which cfn-once cannot have built.
            _ => "NULL",
        };
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(kind, &Content(self.0))?;
        map.end()
    }
}

/// An item from DynamoDB's JSON.
pub fn item_from_json(json: &Value) -> Result<Item, String> {
    let object = json.as_object().ok_or("an item is not a JSON object")?;
    object.iter().map(|(name, value)| Ok((name.clone(), value_from_json(value)?))).collect()
}

/// One attribute value from DynamoDB's JSON: an object with exactly one known kind.
pub fn value_from_json(json: &Value) -> Result<AttributeValue, String> {
    let object =
        json.as_object().filter(|object| object.len() == 1).ok_or("an attribute value is not {kind: value}")?;
    let (kind, value) = object.iter().next().ok_or("an attribute value is empty")?;
    let text = || value.as_str().map(str::to_owned).ok_or_else(|| format!("a {kind} value is not a string"));
    let flag = || value.as_bool().ok_or_else(|| format!("a {kind} value is not a boolean"));
    let array = || value.as_array().ok_or_else(|| format!("a {kind} value is not an array"));
    let strings = || {
        array()?
            .iter()
            .map(|entry| entry.as_str().map(str::to_owned).ok_or_else(|| format!("a {kind} entry is not a string")))
            .collect::<Result<Vec<_>, _>>()
    };
    let blob = |entry: &Value| {
        let encoded = entry.as_str().ok_or_else(|| format!("a {kind} value is not a string"))?;
        aws_smithy_types::base64::decode(encoded).map(Blob::new).map_err(|_| format!("a {kind} value is not base64"))
    };
    Ok(match kind.as_str() {
        "S" => AttributeValue::S(text()?),
        "N" => AttributeValue::N(text()?),
        "B" => AttributeValue::B(blob(value)?),
        "BOOL" => AttributeValue::Bool(flag()?),
        "NULL" => AttributeValue::Null(flag()?),
        "SS" => AttributeValue::Ss(strings()?),
        "NS" => AttributeValue::Ns(strings()?),
        "BS" => AttributeValue::Bs(array()?.iter().map(blob).collect::<Result<_, _>>()?),
        "L" => AttributeValue::L(array()?.iter().map(value_from_json).collect::<Result<_, _>>()?),
        "M" => AttributeValue::M(item_from_json(value)?),
        other => return Err(format!("an attribute value of unknown kind {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_value_is_written_and_read_back_as_it_was() {
        let blob = || Blob::new(b"\x00\xffbytes".to_vec());
        let item: Item = HashMap::from([
            ("s".to_owned(), AttributeValue::S("text \"quoted\" \u{e9}".into())),
            ("n".to_owned(), AttributeValue::N("-12.5".into())),
            ("b".to_owned(), AttributeValue::B(blob())),
            ("bool".to_owned(), AttributeValue::Bool(false)),
            ("null".to_owned(), AttributeValue::Null(true)),
            ("ss".to_owned(), AttributeValue::Ss(vec!["a".into(), "b".into()])),
            ("ns".to_owned(), AttributeValue::Ns(vec!["1".into(), "2".into()])),
            ("bs".to_owned(), AttributeValue::Bs(vec![blob(), Blob::new(Vec::new())])),
            ("l".to_owned(), AttributeValue::L(vec![AttributeValue::S("x".into()), AttributeValue::N("3".into())])),
            ("m".to_owned(), AttributeValue::M(HashMap::from([("inner".to_owned(), AttributeValue::Bool(true))]))),
        ]);
        let json = serde_json::to_value(JsonItem(&item)).expect("serialize");
        assert_eq!(json["b"], serde_json::json!({"B": "AP9ieXRlcw=="}), "blobs are base64");
        assert_eq!(json["ns"], serde_json::json!({"NS": ["1", "2"]}), "numbers are strings");
        assert_eq!(item_from_json(&json).expect("parse"), item);
    }

    #[test]
    fn malformed_values_are_errors_not_panics() {
        for bad in [
            r#"{"x": 1}"#,
            r#"{"x": {}}"#,
            r#"{"x": {"S": 1}}"#,
            r#"{"x": {"S": "a", "N": "1"}}"#,
            r#"{"x": {"B": "%%"}}"#,
            r#"{"x": {"Q": "?"}}"#,
            "[]",
        ] {
            let json: Value = serde_json::from_str(bad).expect("json");
            assert!(item_from_json(&json).is_err(), "{bad}");
        }
    }

    fn url_of(sdk: aws_config::SdkConfig, region: &str) -> String {
        let sdk =
            sdk.into_builder().credentials_provider(SharedCredentialsProvider::new(Credentials::for_tests())).build();
        DynamoWire::from_sdk(&sdk, region, 1_000).expect("wire").url().expect("url").to_owned()
    }

    #[test]
    fn the_endpoint_is_the_one_the_sdk_rules_give() {
        let plain = || aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        assert_eq!(url_of(plain(), "eu-west-1"), "https://dynamodb.eu-west-1.amazonaws.com/");
        assert_eq!(url_of(plain(), "cn-north-1"), "https://dynamodb.cn-north-1.amazonaws.com.cn/");
        let fips = plain().into_builder().use_fips(true).build();
        assert_eq!(url_of(fips, "us-east-1"), "https://dynamodb-fips.us-east-1.amazonaws.com/");
        let local = plain().into_builder().endpoint_url("http://127.0.0.1:5000").build();
        assert_eq!(url_of(local, "us-east-1"), "http://127.0.0.1:5000/");
    }

    /// The request line, header lines and body of a signed POST.
    fn parts(post: &SignedPost) -> (String, Vec<(String, String)>, Vec<u8>) {
        let text = &post.0;
        let end = text.windows(4).position(|window| window == b"\r\n\r\n").expect("a head");
        let head = std::str::from_utf8(&text[..end]).expect("a text head");
        let mut lines = head.split("\r\n");
        let request_line = lines.next().expect("a request line").to_owned();
        let mut headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(": ").expect("name: value");
                (name.to_owned(), value.to_owned())
            })
            .collect();
        headers.sort();
        (request_line, headers, text[end + 4..].to_vec())
    }

    /// A request as the wire signs it and as aws-sigv4 alone signs it, at one time: the same
    /// request line, headers and body, and neither the signature nor the session token in its
    /// `Debug`.
    #[test]
    fn the_own_signer_signs_as_aws_sigv4_does() {
        let plain = || aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_176_472);
        let body = br#"{"TableName":"t","Key":{"StackId":{"S":"arn"}}}"#;
        let temporary = Credentials::new("ASIAEXAMPLE", "secret", Some("token/+=".to_owned()), None, "test");
        let permanent = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        let wires = [
            (plain(), "eu-west-1", true),
            (plain().into_builder().endpoint_url("http://127.0.0.1:5000").build(), "us-east-1", true),
            (plain().into_builder().endpoint_url("http://127.0.0.1:5000/behind/a/proxy").build(), "us-east-1", false),
        ];
        for (sdk, region, root) in wires {
            let sdk =
                sdk.into_builder().credentials_provider(SharedCredentialsProvider::new(permanent.clone())).build();
            let wire = DynamoWire::from_sdk(&sdk, region, 1_000).expect("wire");
            assert_eq!(wire.endpoint().expect("endpoint").root, root, "{:?}", wire.url());
            for credentials in [&temporary, &permanent] {
                let own = wire.signed_at("UpdateItem", body, credentials, time, true).expect("signed");
                let theirs = wire.signed_at("UpdateItem", body, credentials, time, false).expect("signed");
                let (own_line, own_headers, own_body) = parts(&own);
                assert_eq!(
                    (own_line.clone(), own_headers.clone(), own_body.clone()),
                    parts(&theirs),
                    "{:?}",
                    wire.url()
                );
                let path = if root { "/" } else { "/behind/a/proxy/" };
                assert_eq!(own_line, format!("POST {path} HTTP/1.1"));
                assert_eq!(own_body, body);
                let authorization =
                    own_headers.iter().find(|(name, _)| name == "authorization").map(|(_, value)| value.clone());
                let signature = authorization.as_deref().and_then(|value| value.split("Signature=").nth(1));
                let signature = signature.expect("a signature");
                for post in [&own, &theirs] {
                    let shown = format!("{post:?}");
                    assert!(shown.contains("authorization"), "{shown}");
                    assert!(!shown.contains(signature), "the signature is not shown: {shown}");
                    assert!(!shown.contains("token/+="), "the session token is not shown: {shown}");
                }
            }
        }
    }

    #[test]
    fn error_codes_lose_their_namespace_and_suffix_as_in_the_sdk() {
        assert_eq!(
            sanitize_code("com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"),
            "ConditionalCheckFailedException"
        );
        assert_eq!(sanitize_code("ThrottlingException:http://internal.amazon.com/coral/"), "ThrottlingException");
        assert_eq!(sanitize_code("a#b#C"), "b#C");
        assert_eq!(sanitize_code("Plain"), "Plain");
    }
}
