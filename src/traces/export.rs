//! The exporter: OTLP over HTTP with protobuf bodies, configured by the standard variables
//! (most read by `opentelemetry-otlp` and the SDK themselves). This file decides whether there
//! is an exporter at all, and refuses what the bridge does not do (gRPC, another exporter)
//! instead of sending protobuf to a port that expects something else.
//!
//! [`RuntimeHttp`] is its HTTP client: the SDK's batch processor blocks on each export on a
//! thread of its own, so the client hands each request to the bridge's runtime and waits, on
//! the reqwest client the bridge already has (no second HTTP stack). Why: docs/design/traces.md.

use std::{env, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};

/// The collector's answer is read up to this size (an OTLP answer is a few bytes; the
/// crate's own clients stop at 4 MiB).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// `OTEL_EXPORTER_OTLP_TIMEOUT`'s default (the specification's).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The only protocol the bridge exports with.
const HTTP_PROTOBUF: &str = "http/protobuf";

#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error(
        "{var}={value:?}: the bridge exports traces over OTLP/HTTP with protobuf only; unset it \
         or set it to http/protobuf, and point the endpoint at the collector's HTTP port \
         (usually 4318)"
    )]
    Protocol { var: &'static str, value: String },
    #[error(
        "OTEL_TRACES_EXPORTER={0:?}: the bridge exports traces with otlp only; set it to otlp, \
         or to none for no traces"
    )]
    Exporter(String),
    #[error("{var}={value:?} is not a number of milliseconds")]
    Timeout { var: &'static str, value: String },
    #[error(
        "the trace exporter could not be built ({0}); check OTEL_EXPORTER_OTLP_ENDPOINT (a URL \
         such as http://collector:4318) and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("the HTTP client for traces could not be built: {0}")]
    Client(#[from] reqwest::Error),
}

/// What the environment asks of the exporter, past the variables the crates read themselves.
#[derive(Debug)]
pub(super) struct Settings {
    timeout: Duration,
}

impl Settings {
    /// `None`: no traces (no endpoint, or turned off).
    pub(super) fn from_env() -> Result<Option<Self>, TracesError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => return Err(TracesError::Exporter(other.to_string())),
        }
        if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
            && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = var(name)
                && value != HTTP_PROTOBUF
            {
                return Err(TracesError::Protocol { var: name, value });
            }
        }
        let mut timeout = DEFAULT_TIMEOUT;
        for name in [
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        ] {
            if let Some(value) = var(name) {
                let ms = value
                    .parse::<u64>()
                    .map_err(|_| TracesError::Timeout { var: name, value })?;
                timeout = Duration::from_millis(ms);
            }
        }
        Ok(Some(Self { timeout }))
    }
}

/// A set, non-empty variable (the specification treats an empty one as unset).
fn var(name: &str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The tracer provider: the exporter behind the SDK's batch processor.
pub(super) fn provider(settings: Settings) -> Result<SdkTracerProvider, TracesError> {
    let client = RuntimeHttp {
        client: reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()?,
        runtime: tokio::runtime::Handle::current(),
    };
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(client)
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_resource(resource())
        .with_batch_exporter(exporter)
        .build())
}

/// What the environment says of this service; named after the bridge unless
/// `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) names it.
fn resource() -> Resource {
    let version = KeyValue::new("service.version", env!("CARGO_PKG_VERSION"));
    let from_env = Resource::builder().build();
    let unnamed = from_env
        .get(&"service.name".into())
        .is_none_or(|name| name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder().with_attribute(version);
    if unnamed {
        builder.with_service_name(env!("CARGO_PKG_NAME")).build()
    } else {
        builder.build()
    }
}

/// Sends the exporter's requests on the bridge's runtime (see the module doc).
#[derive(Debug)]
struct RuntimeHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for RuntimeHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        // Not a task of a shutdown stage: its one owner is the export that waits for it here
        // (the last of them at the flush, in the last stage); dropping the wait aborts it.
        let mut sent = Abort(
            self.runtime
                .spawn(async move { send(&client, request).await }),
        );
        match (&mut sent.0).await {
            Ok(answer) => answer,
            Err(error) => Err(Box::new(error)),
        }
    }
}

async fn send(
    client: &reqwest::Client,
    request: reqwest::Request,
) -> Result<Response<Bytes>, HttpError> {
    let mut answer = client.execute(request).await?;
    let response = Response::builder().status(answer.status().as_u16());
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the collector's answer is over {MAX_ANSWER_BYTES} bytes").into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(response.body(Bytes::from(body))?)
}

/// Aborts the request when its export stops waiting for it.
struct Abort(tokio::task::JoinHandle<Result<Response<Bytes>, HttpError>>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}
