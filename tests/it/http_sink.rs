//! The response PUT against a real HTTP peer: success, retryable and permanent failures, and a
//! redirect that must not be followed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use cfn_once::adapters::http_sink::HttpResponseSink;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::{AllowedPrefix, UrlPolicy};

/// Answers each connection with `status_line` and `extra_headers`, and reports the request
/// line and body it received.
fn one_shot_server(status_line: &'static str, extra_headers: String) -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let request = read_request(&stream);
            let mut stream = stream;
            let response =
                format!("HTTP/1.1 {status_line}\r\ncontent-length: 0\r\nconnection: close\r\n{extra_headers}\r\n");
            let _ = stream.write_all(response.as_bytes());
            let _ = sender.send(request);
        }
    });
    (port, receiver)
}

fn read_request(stream: &TcpStream) -> (String, Vec<u8>) {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).expect("request line");
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).expect("header");
        if header.trim().is_empty() {
            break;
        }
        if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().expect("length");
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("body");
    (request_line.trim().to_owned(), body)
}

async fn put(port: u16) -> Result<(), PutError> {
    let url = UrlPolicy::new(vec![AllowedPrefix::parse(&format!("http://127.0.0.1:{port}/")).expect("prefix")])
        .check(&format!("http://127.0.0.1:{port}/bucket/key?X-Amz-Signature=secret"))
        .expect("allowed");
    HttpResponseSink::new(2_000).expect("client").put(&url, br#"{"Status":"SUCCESS"}"#).await
}

#[tokio::test]
async fn a_2xx_is_success_and_the_body_is_sent_as_is() {
    let (port, received) = one_shot_server("200 OK", String::new());
    put(port).await.expect("success");
    let (request_line, body) = received.recv_timeout(Duration::from_secs(5)).expect("request");
    assert_eq!(request_line, "PUT /bucket/key?X-Amz-Signature=secret HTTP/1.1");
    assert_eq!(body, br#"{"Status":"SUCCESS"}"#);
}

#[tokio::test]
async fn a_5xx_is_retryable_and_a_403_is_not() {
    let (port, _) = one_shot_server("503 Slow Down", String::new());
    assert!(matches!(put(port).await, Err(PutError::Retryable(_))));
    let (port, _) = one_shot_server("403 Forbidden", String::new());
    let error = put(port).await.expect_err("refused");
    assert!(matches!(error, PutError::Permanent(ref why) if why.contains("403")), "{error:?}");
    assert!(!error.to_string().contains("secret"), "{error}");
}

#[tokio::test]
async fn a_redirect_is_never_followed() {
    let (target_port, target) = one_shot_server("200 OK", String::new());
    let location = format!("location: http://127.0.0.1:{target_port}/elsewhere\r\n");
    let (port, _) = one_shot_server("307 Temporary Redirect", location);
    let error = put(port).await.expect_err("a redirect is not success");
    assert!(matches!(error, PutError::Permanent(ref why) if why.contains("redirect")), "{error:?}");
    assert!(target.recv_timeout(Duration::from_millis(500)).is_err(), "the redirect target was contacted");
}

#[tokio::test]
async fn a_refused_connection_is_retryable_and_names_no_url() {
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let error = put(port).await.expect_err("nobody listens");
    assert!(matches!(error, PutError::Retryable(_)), "{error:?}");
    assert!(!error.to_string().contains("secret") && !error.to_string().contains("/bucket/key"), "{error}");
}
