//! `/v1/responses`: OpenAI's Responses API for clients built on the newer OpenAI API
//! (openai-agents uses it by default). A request runs as a chat completion (`request`
//! turns its body into one, `generate::start` validates, tokenizes and submits it, so
//! sampling, limits, structured output, tools and the engine loop are the chat path's);
//! `build` turns the text into the `response` object or its stream events (messages,
//! reasoning, function calls), and `sink` hands those to the one drive loop (`running`).
//!
//! Responses are stored (`store`, default true as OpenAI's) in a bounded memory `store`:
//! `previous_response_id` continues one, `GET`/`DELETE /v1/responses/{id}` and
//! `GET /v1/responses/{id}/input_items` read and remove them. `background` and
//! `conversation` stay 400s naming the field (see `known_fields`).

mod build;
mod items;
mod request;
mod sink;
mod store;
mod tool_fields;

pub use store::{Limits, Store};

use crate::api::Api;
use crate::body::JsonObject;
use crate::error::{ApiError, Error};
use crate::fields::Fields;
use crate::state::AppState;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use build::Build;
use serde_json::{json, Map, Value};
use sink::ResponsesSink;
use std::time::Instant;

pub async fn responses(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    let arrival = Instant::now();
    answer(st, body, arrival)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn answer(
    st: AppState,
    body: Map<String, Value>,
    arrival: Instant,
) -> Result<Response, ApiError> {
    crate::known_fields::check_responses(&body)?;
    let history = match Fields::new(&body).str("previous_response_id")? {
        Some(id) => stored(&st, id, Some("previous_response_id"))?.continued(),
        None => Vec::new(),
    };
    let chat = request::to_chat(&body, history)?;
    let mut req = crate::generate::start(st.clone(), Api::Chat, chat.body, arrival)
        .await
        .map_err(request::renamed)?;
    let keep = chat
        .asked
        .store
        .then(|| (st.0.responses.clone(), chat.context));
    let build = Build::new(
        req.job.model.clone(),
        chat.asked,
        req.job.reasoning,
        req.job.tools,
    );
    req.job.id = build.id().to_string();
    req.drive(ResponsesSink { build, keep }).await
}

/// The stored response `id`, or a 404 saying what became of it (`field`: the request
/// field that named it).
fn stored(
    st: &AppState,
    id: &str,
    field: Option<&'static str>,
) -> Result<std::sync::Arc<store::Stored>, ApiError> {
    let store = &st.0.responses;
    store.get(id).map_err(|gone| {
        Error::ResponseNotFound {
            id: id.into(),
            field,
            why: gone.describe(store.limits()),
        }
        .into()
    })
}

/// `GET /v1/responses/{id}`: the response object as answered.
pub async fn get(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(stored(&st, &id, None)?.response.clone()))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = &st.0.responses;
    store.delete(&id).map_err(|gone| Error::ResponseNotFound {
        id: id.clone(),
        field: None,
        why: gone.describe(store.limits()),
    })?;
    Ok(Json(
        json!({"id": id, "object": "response", "deleted": true}),
    ))
}

/// `GET /v1/responses/{id}/input_items?limit=&order=&after=`: the items the model saw
/// (history included), newest first unless `order=asc`, as OpenAI's list.
pub async fn input_items(
    State(st): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let page = Page::parse(query.as_deref().unwrap_or(""))?;
    let s = stored(&st, &id, None)?;
    Ok(Json(page.list(&s.context)))
}

/// The list parameters of `input_items`.
struct Page {
    limit: usize,
    asc: bool,
    after: Option<String>,
}

impl Page {
    fn parse(query: &str) -> Result<Page, ApiError> {
        let mut p = Page {
            limit: 20,
            asc: false,
            after: None,
        };
        for (k, v) in query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        {
            match k {
                "limit" => match v.parse::<usize>() {
                    Ok(n) if (1..=100).contains(&n) => p.limit = n,
                    _ => {
                        return Err(ApiError::param(
                            "limit",
                            format!("must be an integer in [1, 100], got {v:?}"),
                        ))
                    }
                },
                "order" => match v {
                    "asc" => p.asc = true,
                    "desc" => p.asc = false,
                    _ => {
                        return Err(ApiError::param(
                            "order",
                            format!("must be asc or desc, got {v:?}"),
                        ))
                    }
                },
                "after" => p.after = Some(v.to_string()),
                // `include[]` asks for extra data folio does not have.
                _ => {}
            }
        }
        Ok(p)
    }

    fn list(&self, items: &[Value]) -> Value {
        let mut ordered: Vec<&Value> = items.iter().collect();
        if !self.asc {
            ordered.reverse();
        }
        let start = match &self.after {
            Some(a) => ordered
                .iter()
                .position(|i| i["id"] == a.as_str())
                .map_or(ordered.len(), |p| p + 1),
            None => 0,
        };
        let rest = &ordered[start..];
        let data: Vec<Value> = rest.iter().take(self.limit).map(|v| (*v).clone()).collect();
        json!({
            "object": "list",
            "first_id": data.first().map(|i| i["id"].clone()),
            "last_id": data.last().map(|i| i["id"].clone()),
            "has_more": rest.len() > self.limit,
            "data": data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_pages() {
        let items: Vec<Value> = (0..5).map(|i| json!({"id": format!("i{i}")})).collect();
        let ids = |v: Value| -> Vec<String> {
            v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_string())
                .collect()
        };
        let l = Page::parse("").unwrap().list(&items);
        assert_eq!(ids(l.clone()), ["i4", "i3", "i2", "i1", "i0"]);
        assert_eq!(
            (l["first_id"].clone(), l["has_more"].clone()),
            (json!("i4"), json!(false))
        );
        let l = Page::parse("order=asc&limit=2&after=i1")
            .unwrap()
            .list(&items);
        assert_eq!(ids(l.clone()), ["i2", "i3"]);
        assert_eq!(l["has_more"], true);
        assert_eq!(
            Page::parse("limit=0").err().unwrap().message,
            "limit: must be an integer in [1, 100], got \"0\""
        );
    }
}
