//! Real HTTP for layer tests: serve an axum app on a loopback port, and send requests to it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A router whose one route, `/`, answers `ok` behind the rate-limit `layer`.
pub fn behind(layer: leasehold::layer::rate_limit::RedisRateLimitLayer) -> axum::Router {
    axum::Router::new().route("/", axum::routing::get(|| async { "ok" }).layer(layer))
}

/// The status of one request to `/` through `router`, in process (no network, no peer
/// address).
pub async fn status_of(router: &axum::Router) -> StatusCode {
    status_with(router, &[]).await
}

/// The status `router` answers a `GET /` with `headers`, without a network.
pub async fn status_with(router: &axum::Router, headers: &[(&str, &str)]) -> StatusCode {
    use tower::ServiceExt as _;
    let mut request = Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(axum::body::Body::empty()).expect("a request");
    router
        .clone()
        .oneshot(request)
        .await
        .expect("infallible")
        .status()
}

/// Serves `app` on a free loopback port, with the peer address available to extractors
/// (`ConnectInfo<SocketAddr>`). The server runs until the test's runtime ends.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    addr
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// A header as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The Retry-After header's delay-seconds; the header must be there.
    pub fn retry_after_secs(&self) -> u64 {
        self.header("retry-after")
            .expect("a Retry-After header")
            .parse()
            .expect("delay-seconds")
    }
}

/// A client for these tests (HTTP/1.1, keep-alive).
pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `GET http://addr/path` with extra headers, bounded by 10 s.
pub async fn get(
    client: &Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    send(client, Method::GET, addr, path, headers).await
}

/// `method http://addr/path` without a body, with extra headers, read whole within 10 s.
pub async fn send(
    client: &Client<HttpConnector, Empty<Bytes>>,
    method: Method,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let response = open(client, method, addr, path, headers).await;
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("a whole body within 10 s")
        .expect("body")
        .to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// `method http://addr/path` with extra headers: the response within 10 s, its body unread
/// (a stream the caller reads as far as it needs).
pub async fn open(
    client: &Client<HttpConnector, Empty<Bytes>>,
    method: Method,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Incoming> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::new()).expect("valid request");
    tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .expect("a response within 10 s")
        .expect("a response")
}
