//! The functions file's reader: a whole file read with its defaults and routes, each mistake
//! named with its line and problem, an empty file answered with what to write.

use super::*;

/// A folder holding `app.py` and `pkg/mod.py`, for the files below to point at.
fn fixture() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cfn-once-functions-file-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("fn/pkg")).unwrap();
    std::fs::write(dir.join("fn/app.py"), "def handler(e, c): pass\n").unwrap();
    std::fs::write(dir.join("fn/pkg/mod.py"), "def handler(e, c): pass\n").unwrap();
    dir
}

fn parse(text: &str) -> Result<FunctionsFile, FunctionsFileError> {
    FunctionsFile::parse(&fixture().join("functions.yaml"), text)
}

/// `text` fails at `line` with a message containing `problem`.
#[track_caller]
fn check_error(text: &str, line: usize, problem: &str) {
    let error = parse(text).expect_err("a mistake");
    assert_eq!(error.line, Some(line), "{error}");
    assert!(error.message.contains(problem), "{error}");
    let shown = error.to_string();
    assert!(shown.contains(&format!("functions.yaml:{line}:")), "{shown}");
}

#[test]
fn a_full_file_is_read_with_defaults_and_routes() {
    let file = parse(
        "Custom::Thing:\n  on-event:\n    folder: fn\n    handler: app.handler\n    environment:\n      TABLE: things\n      PORT: 8080\n    timeout-s: 30\n    memory-mb: 512\n  is-complete:\n    name: thing-poll\n    folder: fn\n    handler: pkg.mod.handler\nCustom::Hello:\n  cfn-response:\n    folder: ./fn\n    handler: app.handler\n",
    )
    .expect("a good file");
    assert_eq!(file.routes.len(), 2);
    let thing = &file.routes[0];
    assert_eq!(thing.on_event.name, "Thing-on-event");
    assert_eq!(thing.on_event.environment["TABLE"], "things");
    assert_eq!(thing.on_event.environment["PORT"], "8080");
    assert_eq!((thing.on_event.timeout_s, thing.on_event.memory_mb), (30, 512));
    let poll = thing.is_complete.as_ref().expect("is-complete");
    assert_eq!((poll.name.as_str(), poll.handler.as_str()), ("thing-poll", "pkg.mod.handler"));
    assert_eq!((poll.timeout_s, poll.memory_mb), (TIMEOUT_S_DEFAULT, MEMORY_MB_DEFAULT));
    assert!(file.routes[1].answers_itself());
    assert_eq!(
        file.cfn_once_functions(),
        "Custom::Thing=Thing-on-event|thing-poll,Custom::Hello=cfn-response:Hello-cfn-response"
    );
    assert_eq!(file.functions().count(), 3);
}

#[test]
fn each_mistake_names_its_line_and_problem() {
    let good = "    folder: fn\n    handler: app.handler\n";
    check_error(&format!("Custom::A:\n  on-event:\n{good}    timeout: 3\n"), 5, "unknown field `timeout`");
    check_error(&format!("Custom::A:\n  on-event:\n{good}Thing:\n  on-event:\n{good}"), 5, "must start with Custom::");
    check_error(&format!("Custom::A:\n  on-event:\n{good}Custom::A b:\n  on-event:\n{good}"), 5, "1 to 60 letters");
    check_error("Custom::A:\n  on-event:\n    folder: nowhere\n    handler: app.handler\n", 3, "nowhere is not there");
    check_error("Custom::A:\n  on-event:\n    folder: fn\n    handler: main.handler\n", 3, "has no main.py");
    check_error("Custom::A:\n  on-event:\n    folder: fn\n    handler: handler\n", 4, "is not module.function");
    check_error("Custom::A:\n  on-event:\n    handler: app.handler\n", 3, "missing field `folder`");
    check_error(&format!("Custom::A:\n  is-complete:\n{good}"), 2, "is-complete needs an on-event");
    check_error(&format!("Custom::A:\n  on-event:\n{good}  cfn-response:\n{good}"), 2, "cannot be combined");
    check_error(&format!("Custom::A:\n  on-events:\n{good}"), 2, "unknown kind `on-events`");
    check_error(&format!("Custom::A:\n  on-event:\n{good}    timeout-s: 901\n"), 3, "Lambda allows 1 to 900");
    check_error(&format!("Custom::A:\n  on-event:\n{good}    memory-mb: 64\n"), 3, "128 to 10240");
    check_error(&format!("Custom::A:\n  on-event:\n{good}    timeout-s: soon\n"), 5, "invalid type");
    check_error(&format!("Custom::A:\n  on-event:\n{good}    environment:\n      AWS_REGION: x\n"), 6, "set by Lambda");
    check_error(&format!("Custom::A:\n  on-event:\n{good}    environment:\n      1X: x\n"), 6, "not a variable name");
    check_error(
        &format!("Custom::A:\n  on-event:\n    name: same\n{good}Custom::B:\n  on-event:\n    name: same\n{good}"),
        8,
        "same is taken by Custom::A.on-event",
    );
    check_error(&format!("Custom::A:\n  on-event:\n{good}    name: a.b\n"), 5, "not a Lambda function name");
    check_error("Custom::A:\n  on-event: [\n", 2, "expected a function");
}

#[test]
fn an_empty_file_says_what_to_write() {
    let error = parse("# nothing yet\n").expect_err("empty");
    assert!(error.message.contains("names no resource types"), "{error}");
}
