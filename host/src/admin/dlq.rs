//! `GET /dlq`, `POST /dlq/redrive`, `POST /dlq/purge`: the dead-letter operations of
//! `outbox-host dlq` on a running host. Errors answer `{"error": …}`; none quotes a value sent.

use super::AdminState;
use crate::dlq::{
    self, DEFAULT_LIST_LIMIT, DeadLetterJson, DeadLettersPage, MAX_LIST_LIMIT, SelectionJson,
};
use crate::repository::{DeadLetterSelection, RepositoryError};
use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;

/// `GET /dlq?type=T&since=TIME&limit=N`, each optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(rename = "type")]
    destination_type: Option<String>,
    since: Option<String>,
    limit: Option<u32>,
}

pub(super) async fn list(
    State(state): State<AdminState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request("the query takes type, since and limit (a number)");
    };
    let since = match query
        .since
        .map(|text| dlq::parse_since(&text, Utc::now()))
        .transpose()
    {
        Ok(since) => since,
        Err(error) => return bad_request(&error.to_string()),
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return bad_request(&format!("limit must be 1 to {MAX_LIST_LIMIT}"));
    }
    match state
        .repository
        .list_dead_letters(query.destination_type.as_deref(), since, limit)
        .await
    {
        Ok(rows) => Json(DeadLettersPage {
            dead_letters: rows.into_iter().map(DeadLetterJson::from).collect(),
        })
        .into_response(),
        Err(error) => database_failed(error),
    }
}

pub(super) async fn redrive(
    State(state): State<AdminState>,
    body: Result<Json<SelectionJson>, JsonRejection>,
) -> Response {
    match selection_of(body) {
        Ok(selection) => counted(
            "redriven",
            dlq::redrive(&state.repository, &selection, VIA)
                .await
                .map(|count| count as u64),
        ),
        Err(message) => bad_request(&message),
    }
}

pub(super) async fn purge(
    State(state): State<AdminState>,
    body: Result<Json<SelectionJson>, JsonRejection>,
) -> Response {
    match selection_of(body) {
        Ok(selection) => counted(
            "purged",
            dlq::purge(&state.repository, &selection, VIA).await,
        ),
        Err(message) => bad_request(&message),
    }
}

/// Who acted, in the log line of a redrive or purge.
const VIA: &str = "admin listener";

/// `{"<what>": count}`, or the database failure.
fn counted(what: &str, result: Result<u64, RepositoryError>) -> Response {
    match result {
        Ok(count) => Json(serde_json::json!({ what: count })).into_response(),
        Err(error) => database_failed(error),
    }
}

/// The selection a body names, or why it names none.
fn selection_of(
    body: Result<Json<SelectionJson>, JsonRejection>,
) -> Result<DeadLetterSelection, String> {
    let Ok(Json(body)) = body else {
        return Err(
            "the body must be JSON: {\"ids\": [1, 2]} or {\"type\": \"T\", \"since\": \"1h\"}"
                .to_owned(),
        );
    };
    body.selection(Utc::now())
        .map_err(|error| error.to_string())
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": message })),
    )
        .into_response()
}

fn database_failed(error: RepositoryError) -> Response {
    tracing::warn!(%error, "a dead-letter request failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "error": "the database did not answer" })),
    )
        .into_response()
}
