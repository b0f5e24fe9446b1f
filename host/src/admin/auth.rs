//! `admin.token`: when set, every endpoint but `/healthz` requires `Authorization: Bearer <token>`.

use crate::config::AdminToken;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Passes the request on when no token is configured or it carries the token; else `401`. The
/// comparison takes the same time whatever the bytes, so the token cannot be guessed piecewise.
pub(super) async fn require_token(
    State(token): State<Option<AdminToken>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    if bool::from(presented.as_bytes().ct_eq(token.expose().as_bytes())) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "unauthorized: send admin.token as `Authorization: Bearer <token>`\n",
    )
        .into_response()
}
