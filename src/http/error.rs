//! The one error type of the REST and SSE API: a status and a JSON body that says what went
//! wrong and what to do about it.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::events::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Unknown, expired, malformed or (with tokens) unauthorised: the same answer for all, so
    /// nobody can probe which job IDs exist.
    #[error(
        "not found: no such job or correlation here (it may have expired), or the URL's token is \
         missing or wrong; use the URLs of the job handle as given"
    )]
    NotFound,
    #[error("{0}")]
    BadRequest(String),
    /// A body that does not fit what was asked: 400 like `BadRequest`, with the part that does
    /// not fit (`content.answer`) in the body's `field`, for a form to mark.
    #[error("{message}")]
    Unfit { message: String, field: String },
    /// A valid credential that does not open this endpoint.
    #[error("{0}")]
    Forbidden(String),
    /// The store cannot answer: a message without internals (see `From<StoreError>`).
    #[error("{0}")]
    Unavailable(&'static str),
    /// An answer for a job another replica runs that it did not confirm (or could not get).
    #[error("{0}")]
    Undelivered(String),
    /// The request is fine but the job is not in a state to take it (a second answer).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
}

impl ApiError {
    fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound => "not_found",
            ApiError::BadRequest(_) | ApiError::Unfit { .. } => "bad_request",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Unavailable(_) | ApiError::Undelivered(_) => "unavailable",
            ApiError::Conflict(_) => "conflict",
            ApiError::TooLarge(_) => "too_large",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) | ApiError::Unfit { .. } => StatusCode::BAD_REQUEST,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unavailable(_) | ApiError::Undelivered(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }
}

/// The client gets a clean message; the log gets the detail (the Redis address, the OS error).
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "the job API could not reach the job store");
        ApiError::Unavailable(e.public_message())
    }
}

/// How long a client is asked to wait when the store cannot answer.
const UNAVAILABLE_RETRY_AFTER_SECS: u32 = 5;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": { "code": self.code(), "message": self.to_string() } });
        if let ApiError::Unfit { field, .. } = &self {
            body["error"]["field"] = json!(field);
        }
        let mut response = (self.status(), Json(body)).into_response();
        if matches!(self, ApiError::Unavailable(_) | ApiError::Undelivered(_)) {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                UNAVAILABLE_RETRY_AFTER_SECS.into(),
            );
        }
        response
    }
}
