//! The one error type of the REST and SSE API: a status and a JSON body that says what went
//! wrong and what to do about it.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::store::StoreError;

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
    /// A valid credential that does not open this endpoint.
    #[error("{0}")]
    Forbidden(String),
    #[error("the job store is unavailable: {0}")]
    Unavailable(String),
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
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Conflict(_) => "conflict",
            ApiError::TooLarge(_) => "too_large",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::Unavailable(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code(), "message": self.to_string() } });
        (self.status(), Json(body)).into_response()
    }
}
