//! The functions file: which Lambda functions `cfn-once local` runs, and which custom resource
//! types they answer (`make local FUNCTIONS=path`).
//!
//! A YAML mapping of each `Custom::` type to its functions by kind: `on-event` with an optional
//! `is-complete` (the AWS CDK Provider framework's contract), or `cfn-response` (a function that
//! PUTs its own answer, as `cfnresponse` and crhelper do). Each function names its `folder`
//! (relative to the file), its `handler` (`module.function`, as Lambda's Python runtime reads
//! it), and optionally its `name`, `environment`, `timeout-s` and `memory-mb`:
//!
//! ```yaml
//! Custom::Reservation:
//!   on-event:
//!     folder: cdk-provider
//!     handler: app.on_event
//!     timeout-s: 30
//! ```
//!
//! Everything is checked before anything starts: an unknown key, a type that is not
//! `Custom::Name`, a missing folder or handler module, a bad handler string, a kind missing or
//! one too many, a reserved or malformed variable is a [`FunctionsFileError`] naming the file,
//! the line and the problem. The checks run while the YAML is read (serde seeds carrying the
//! file's folder), so each problem carries the position of the node it is about.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// Lambda's default function timeout, used when a function names none.
pub const TIMEOUT_S_DEFAULT: u32 = 3;
/// Lambda's longest function timeout.
pub const TIMEOUT_S_MAX: u32 = 900;
/// Lambda's default memory, used when a function names none.
pub const MEMORY_MB_DEFAULT: u32 = 128;
/// Lambda's memory range.
pub const MEMORY_MB_MIN: u32 = 128;
pub const MEMORY_MB_MAX: u32 = 10_240;
/// Lambda's limit on a function's variables, names and values together.
pub const ENVIRONMENT_BYTES_MAX: usize = 4096;

/// Variables Lambda sets itself and refuses in a function's configuration.
const RESERVED_VARIABLES: [&str; 18] = [
    "_HANDLER",
    "_X_AMZN_TRACE_ID",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_RUNTIME_API",
    "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR",
];

/// A function's role in its route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    OnEvent,
    IsComplete,
    CfnResponse,
}

impl Kind {
    /// The key naming it in the file.
    pub fn key(self) -> &'static str {
        match self {
            Kind::OnEvent => "on-event",
            Kind::IsComplete => "is-complete",
            Kind::CfnResponse => "cfn-response",
        }
    }
}

impl TryFrom<String> for Kind {
    type Error = String;

    fn try_from(key: String) -> Result<Self, String> {
        [Kind::OnEvent, Kind::IsComplete, Kind::CfnResponse]
            .into_iter()
            .find(|kind| kind.key() == key)
            .ok_or_else(|| format!("unknown kind `{key}`, expected on-event, is-complete or cfn-response"))
    }
}

/// One function, as the file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Its name in each region (`AWS_LAMBDA_FUNCTION_NAME`, and what `CFN_ONCE_FUNCTIONS` names).
    pub name: String,
    pub kind: Kind,
    /// The function's code, absolute.
    pub folder: PathBuf,
    /// `module.function`, as Lambda's `Handler`.
    pub handler: String,
    /// The function's own variables.
    pub environment: BTreeMap<String, String>,
    pub timeout_s: u32,
    pub memory_mb: u32,
}

/// One custom resource type and its functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `Custom::Name`.
    pub resource_type: String,
    /// `on-event`, or the `cfn-response` function.
    pub on_event: Function,
    pub is_complete: Option<Function>,
}

impl Route {
    /// The function answers CloudFormation itself.
    pub fn answers_itself(&self) -> bool {
        self.on_event.kind == Kind::CfnResponse
    }

    /// This route's entry of `CFN_ONCE_FUNCTIONS`.
    pub fn entry(&self) -> String {
        match (&self.is_complete, self.answers_itself()) {
            (_, true) => format!("{}=cfn-response:{}", self.resource_type, self.on_event.name),
            (Some(is_complete), false) => {
                format!("{}={}|{}", self.resource_type, self.on_event.name, is_complete.name)
            }
            (None, false) => format!("{}={}", self.resource_type, self.on_event.name),
        }
    }

    /// The route's functions by kind, as `.local/env.json` names them.
    pub fn by_kind(&self) -> BTreeMap<String, String> {
        std::iter::once(&self.on_event)
            .chain(&self.is_complete)
            .map(|function| (function.kind.key().to_owned(), function.name.clone()))
            .collect()
    }
}

/// A checked functions file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionsFile {
    pub path: PathBuf,
    /// In the file's order.
    pub routes: Vec<Route>,
}

/// What is wrong with a functions file, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionsFileError {
    pub path: PathBuf,
    /// 1-based, when the problem is at a place in the file.
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl fmt::Display for FunctionsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "{}:{line}:{column}: {}", self.path.display(), self.message),
            _ => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for FunctionsFileError {}

impl FunctionsFile {
    /// Reads and checks the file at `path`; folders are relative to its folder.
    pub fn read(path: &Path) -> Result<Self, FunctionsFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| FunctionsFileError {
            path: path.to_path_buf(),
            line: None,
            column: None,
            message: format!("cannot read the functions file: {error}"),
        })?;
        Self::parse(path, &text)
    }

    /// Checks `text`, the content of the file at `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, FunctionsFileError> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base = absolute.parent().map(Path::to_path_buf).unwrap_or_default();
        let error = |error: serde_norway::Error| {
            let location = error.location();
            let mut message = error.to_string();
            if let Some(at) = &location {
                let suffix = format!(" at line {} column {}", at.line(), at.column());
                if let Some(stripped) = message.strip_suffix(&suffix) {
                    message = stripped.to_owned();
                }
            }
            FunctionsFileError {
                path: path.to_path_buf(),
                line: location.as_ref().map(serde_norway::Location::line),
                column: location.as_ref().map(serde_norway::Location::column),
                message,
            }
        };
        let routes = if text.trim().is_empty() {
            Vec::new()
        } else {
            FileSeed { base: &base }.deserialize(serde_norway::Deserializer::from_str(text)).map_err(error)?
        };
        if routes.is_empty() {
            return Err(FunctionsFileError {
                path: path.to_path_buf(),
                line: None,
                column: None,
                message: "names no resource types: map each Custom:: type to its functions (see docs/functions.md, \"Bring your functions\")".to_owned(),
            });
        }
        Ok(Self { path: path.to_path_buf(), routes })
    }

    /// `CFN_ONCE_FUNCTIONS` for these routes, as the regional template's `Functions` would say it.
    pub fn cfn_once_functions(&self) -> String {
        self.routes.iter().map(Route::entry).collect::<Vec<_>>().join(",")
    }

    /// Every function, in the file's order.
    pub fn functions(&self) -> impl Iterator<Item = &Function> {
        self.routes.iter().flat_map(|route| std::iter::once(&route.on_event).chain(&route.is_complete))
    }

    /// Whether any route's function answers by itself (and so needs an answer bucket).
    pub fn answers_itself(&self) -> bool {
        self.routes.iter().any(Route::answers_itself)
    }
}

/// The whole file: a mapping of types to routes.
struct FileSeed<'a> {
    base: &'a Path,
}

impl<'de> DeserializeSeed<'de> for FileSeed<'_> {
    type Value = Vec<Route>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FileSeed<'_> {
    type Value = Vec<Route>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of Custom:: resource types to their functions")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut routes: Vec<Route> = Vec::new();
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        while let Some(ResourceType(resource_type)) = map.next_key()? {
            let seed = RouteSeed { base: self.base, resource_type: &resource_type, routes: &routes, names: &mut names };
            let route = map.next_value_seed(seed)?;
            routes.push(route);
        }
        Ok(routes)
    }
}

/// One type's functions by kind.
struct RouteSeed<'a> {
    base: &'a Path,
    resource_type: &'a str,
    routes: &'a [Route],
    /// Function names taken so far, with where (`Custom::Type kind`).
    names: &'a mut BTreeMap<String, String>,
}

impl<'de> DeserializeSeed<'de> for RouteSeed<'_> {
    type Value = Route;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RouteSeed<'_> {
    type Value = Route;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of on-event (and is-complete), or cfn-response, to a function")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let resource_type = self.resource_type;
        if self.routes.iter().any(|route| route.resource_type == resource_type) {
            return Err(de::Error::custom("named twice in the file"));
        }
        let mut functions: BTreeMap<Kind, Function> = BTreeMap::new();
        while let Some(kind) = map.next_key::<Kind>()? {
            if functions.contains_key(&kind) {
                return Err(de::Error::custom(format!("{} is named twice", kind.key())));
            }
            let seed = FunctionSeed { base: self.base, resource_type, kind, names: &mut *self.names };
            functions.insert(kind, map.next_value_seed(seed)?);
        }
        let on_event = functions.remove(&Kind::OnEvent);
        let is_complete = functions.remove(&Kind::IsComplete);
        let cfn_response = functions.remove(&Kind::CfnResponse);
        let resource_type = resource_type.to_owned();
        match (on_event, is_complete, cfn_response) {
            (Some(on_event), is_complete, None) => Ok(Route { resource_type, on_event, is_complete }),
            (None, None, Some(on_event)) => Ok(Route { resource_type, on_event, is_complete: None }),
            (None, Some(_), None) => Err(de::Error::custom("is-complete needs an on-event function, which is missing")),
            (None, None, None) => Err(de::Error::custom(
                "no function: give it on-event (and optionally is-complete), or cfn-response for a function that answers CloudFormation itself",
            )),
            (_, _, Some(_)) => Err(de::Error::custom(
                "cfn-response is a function that answers by itself; it cannot be combined with on-event or is-complete",
            )),
        }
    }
}

/// One function: its fields read as they are written, then checked against the disk.
struct FunctionSeed<'a> {
    base: &'a Path,
    resource_type: &'a str,
    kind: Kind,
    names: &'a mut BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FunctionFields {
    name: Option<FunctionName>,
    folder: PathBuf,
    handler: Handler,
    #[serde(default)]
    environment: BTreeMap<VariableName, String>,
    #[serde(default)]
    timeout_s: Option<u32>,
    #[serde(default)]
    memory_mb: Option<u32>,
}

impl<'de> DeserializeSeed<'de> for FunctionSeed<'_> {
    type Value = Function;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FunctionSeed<'_> {
    type Value = Function;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a function: folder, handler, and optionally name, environment, timeout-s, memory-mb")
    }

    // The fields are read inside this mapping's visit, so a problem found in them afterwards (a
    // folder that is not there) is reported at the mapping's own line.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let fields = FunctionFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.check(fields).map_err(de::Error::custom)
    }
}

impl FunctionSeed<'_> {
    fn check(self, fields: FunctionFields) -> Result<Function, String> {
        // serde_norway prefixes each message with where it is (`Custom::Type.kind`).
        let place = format!("{}.{}", self.resource_type, self.kind.key());
        let name = match fields.name {
            Some(FunctionName(name)) => name,
            None => {
                let derived = format!(
                    "{}-{}",
                    self.resource_type.trim_start_matches("Custom::").replace('@', "-"),
                    self.kind.key()
                );
                FunctionName::check(&derived).map_err(|why| format!("{why}; give the function a shorter `name`"))?;
                derived
            }
        };
        if let Some(other) = self.names.get(&name) {
            return Err(format!("the function name {name} is taken by {other}; give one of them another `name`"));
        }
        let folder = self.base.join(&fields.folder);
        if !folder.is_dir() {
            return Err(format!(
                "the folder {} is not there (folders are relative to the functions file)",
                folder.display()
            ));
        }
        let Handler { module, function } = &fields.handler;
        let module_path = module.replace(['.', '/'], std::path::MAIN_SEPARATOR_STR);
        let candidates = [folder.join(format!("{module_path}.py")), folder.join(&module_path).join("__init__.py")];
        if !candidates.iter().any(|candidate| candidate.is_file()) {
            return Err(format!(
                "the handler {module}.{function} names the module {module}, but {} has no {module_path}.py",
                folder.display()
            ));
        }
        let timeout_s = fields.timeout_s.unwrap_or(TIMEOUT_S_DEFAULT);
        if !(1..=TIMEOUT_S_MAX).contains(&timeout_s) {
            return Err(format!("timeout-s is {timeout_s}; Lambda allows 1 to {TIMEOUT_S_MAX} seconds"));
        }
        let memory_mb = fields.memory_mb.unwrap_or(MEMORY_MB_DEFAULT);
        if !(MEMORY_MB_MIN..=MEMORY_MB_MAX).contains(&memory_mb) {
            return Err(format!("memory-mb is {memory_mb}; Lambda allows {MEMORY_MB_MIN} to {MEMORY_MB_MAX} MB"));
        }
        let environment: BTreeMap<String, String> =
            fields.environment.into_iter().map(|(VariableName(name), value)| (name, value)).collect();
        let bytes: usize = environment.iter().map(|(name, value)| name.len() + value.len()).sum();
        if bytes > ENVIRONMENT_BYTES_MAX {
            return Err(format!(
                "the environment holds {bytes} bytes; Lambda allows {ENVIRONMENT_BYTES_MAX} (names and values together)"
            ));
        }
        self.names.insert(name.clone(), place);
        Ok(Function {
            name,
            kind: self.kind,
            folder,
            handler: format!("{module}.{function}"),
            environment,
            timeout_s,
            memory_mb,
        })
    }
}

/// Deserializes a string checked by `T: TryFrom<String>` inside the scalar's own visit, so that
/// a problem carries the scalar's line (serde's `try_from` checks after the visit, which would
/// report the enclosing mapping's).
fn checked<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<String, Error = String>,
{
    struct Checked<T>(std::marker::PhantomData<T>);

    impl<T: TryFrom<String, Error = String>> Visitor<'_> for Checked<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            T::try_from(text.to_owned()).map_err(E::custom)
        }
    }

    deserializer.deserialize_str(Checked(std::marker::PhantomData))
}

macro_rules! checked_string {
    ($($name:ident),*) => {$(
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                checked(deserializer)
            }
        }
    )*};
}

checked_string!(ResourceType, Kind, FunctionName, Handler, VariableName);

/// `Custom::Name`, as CloudFormation allows it.
#[derive(Debug)]
struct ResourceType(String);

impl TryFrom<String> for ResourceType {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let Some(name) = text.strip_prefix("Custom::") else {
            return Err(format!("{text:?} is not a custom resource type: it must start with Custom::"));
        };
        if name.is_empty()
            || name.len() > 60
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'@' | b'-'))
        {
            return Err(format!(
                "{text:?} is not a custom resource type: after Custom:: come 1 to 60 letters, digits, _, @ and -"
            ));
        }
        Ok(Self(text))
    }
}

/// A Lambda function name.
#[derive(Debug)]
struct FunctionName(String);

impl FunctionName {
    fn check(name: &str) -> Result<(), String> {
        if name.is_empty()
            || name.len() > 64
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        {
            return Err(format!("{name:?} is not a Lambda function name (1 to 64 letters, digits, - and _)"));
        }
        Ok(())
    }
}

impl TryFrom<String> for FunctionName {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Self::check(&name)?;
        Ok(Self(name))
    }
}

/// `module.function`, the module a dotted or slashed path (`app`, `pkg.app`, `src/app`).
#[derive(Debug)]
struct Handler {
    module: String,
    function: String,
}

impl TryFrom<String> for Handler {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let bad = || format!("handler {text:?} is not module.function (for example app.handler, or pkg.app.on_event)");
        let (module, function) = text.rsplit_once('.').ok_or_else(bad)?;
        let identifier = |part: &str| {
            let mut bytes = part.bytes();
            bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        };
        if !identifier(function) || !module.split(['.', '/']).all(identifier) {
            return Err(bad());
        }
        Ok(Self { module: module.to_owned(), function: function.to_owned() })
    }
}

/// A variable name Lambda accepts and does not reserve.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct VariableName(String);

impl TryFrom<String> for VariableName {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        let mut bytes = name.bytes();
        let well_formed = name.len() >= 2
            && bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !well_formed {
            return Err(format!(
                "{name:?} is not a variable name Lambda accepts (a letter, then letters, digits and _)"
            ));
        }
        if RESERVED_VARIABLES.contains(&name.as_str()) {
            return Err(format!("{name} is set by Lambda itself and cannot be a function's variable"));
        }
        Ok(Self(name))
    }
}

#[cfg(test)]
#[path = "functions_file_tests.rs"]
mod tests;
