//! Stored responses over real HTTP: `store` (default true) keeps a response,
//! `previous_response_id` continues it with the whole earlier turn in the prompt,
//! `GET`/`DELETE /v1/responses/{id}` and `/input_items` read and remove it, and an id the
//! store no longer holds (deleted, never stored, evicted by the count bound) is a 404
//! naming the id and why.

use folio_testkit::http as common;

use common::{get, post, post_ok, request, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn turn(input: Value, previous: Option<&Value>) -> Value {
    let mut b = json!({"input": input, "max_output_tokens": 12, "temperature": 0});
    if let Some(p) = previous {
        b["previous_response_id"] = p["id"].clone();
    }
    b
}

#[test]
fn previous_response_id_continues_with_the_first_turn_in_the_prompt() {
    let Some(s) = server() else { return };
    let first = post_ok(
        s.addr,
        "/v1/responses",
        &turn(json!("My name is Ada."), None),
    );
    assert_eq!(first["store"], true);
    let second = post_ok(
        s.addr,
        "/v1/responses",
        &turn(json!("What is my name?"), Some(&first)),
    );
    assert_eq!(second["previous_response_id"], first["id"]);
    // The same conversation sent whole: the same prompt, the same answer.
    let mut whole = turn(
        json!([{"role": "user", "content": "My name is Ada."}, first["output"][0],
               {"role": "user", "content": "What is my name?"}]),
        None,
    );
    whole["store"] = json!(false);
    let whole = post_ok(s.addr, "/v1/responses", &whole);
    assert_eq!(whole["store"], false);
    assert_eq!(
        second["usage"]["input_tokens"],
        whole["usage"]["input_tokens"]
    );
    assert_eq!(
        common::responses_output_text(&second),
        common::responses_output_text(&whole)
    );
    assert!(
        second["usage"]["input_tokens"].as_u64().unwrap()
            > first["usage"]["input_tokens"].as_u64().unwrap()
                + first["usage"]["output_tokens"].as_u64().unwrap()
    );

    // A streamed continuation is stored as its last event says.
    let mut b = turn(json!("And my age?"), Some(&second));
    b["stream"] = json!(true);
    let r = post(s.addr, "/v1/responses", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    let last = r.events().last().unwrap().1["response"].clone();
    let id = last["id"].as_str().unwrap();
    let got = get(s.addr, &format!("/v1/responses/{id}"));
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.json(), last);

    // Its input items: the whole conversation, newest first.
    let items = get(s.addr, &format!("/v1/responses/{id}/input_items")).json();
    let kinds: Vec<(String, String)> = items["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["type"].as_str().unwrap().to_string(),
                i["role"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let pair = |r: &str| ("message".to_string(), r.to_string());
    assert_eq!(
        kinds,
        [
            pair("user"),
            pair("assistant"),
            pair("user"),
            pair("assistant"),
            pair("user")
        ]
    );
    assert_eq!(items["object"], "list");
    assert_eq!(items["has_more"], false);
    assert_eq!(items["data"][1], second["output"][0]);
    assert_eq!(items["data"][4]["content"][0]["text"], "My name is Ada.");
    let asc = get(
        s.addr,
        &format!("/v1/responses/{id}/input_items?order=asc&limit=2"),
    )
    .json();
    assert_eq!(asc["data"][0], items["data"][4]);
    assert_eq!(asc["has_more"], true);
}

#[test]
fn get_delete_and_the_named_404s() {
    let Some(s) = server() else { return };
    let r = post_ok(s.addr, "/v1/responses", &turn(json!("Hi."), None));
    let id = r["id"].as_str().unwrap();
    let path = format!("/v1/responses/{id}");
    assert_eq!(get(s.addr, &path).json(), r);
    let d = request(s.addr, "DELETE", &path, b"");
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(
        d.json(),
        json!({"id": id, "object": "response", "deleted": true})
    );
    let g = get(s.addr, &path);
    assert_eq!(g.status, 404);
    assert_eq!(
        g.json()["error"],
        json!({"message": format!("response \"{id}\" is not stored: it was deleted"),
               "type": "not_found_error", "param": null, "code": "response_not_found"})
    );
    assert_eq!(request(s.addr, "DELETE", &path, b"").status, 404);
    let c = post(s.addr, "/v1/responses", &turn(json!("Again."), Some(&r)));
    assert_eq!(c.status, 404, "{}", c.text());
    assert_eq!(
        c.json()["error"],
        json!({"message": format!("previous_response_id: response \"{id}\" is not stored: it was deleted"),
               "type": "not_found_error", "param": "previous_response_id",
               "code": "previous_response_not_found"})
    );
    // store: false keeps nothing.
    let mut b = turn(json!("Hi."), None);
    b["store"] = json!(false);
    let r = post_ok(s.addr, "/v1/responses", &b);
    let g = get(
        s.addr,
        &format!("/v1/responses/{}", r["id"].as_str().unwrap()),
    );
    assert_eq!(g.status, 404);
    assert!(g.json()["error"]["message"]
        .as_str()
        .unwrap()
        .ends_with("is not stored: no response with this id was stored (folio keeps them in memory only, until it restarts)"));
}

#[test]
fn eviction_by_the_count_bound_is_named() {
    let Some(engine) = common::engine() else {
        return;
    };
    let s = common::start(
        engine,
        folio_server::ServerOptions {
            responses_store_max: 1,
            ..Default::default()
        },
    );
    let a = post_ok(s.addr, "/v1/responses", &turn(json!("One."), None));
    let b = post_ok(s.addr, "/v1/responses", &turn(json!("Two."), None));
    let r = post(s.addr, "/v1/responses", &turn(json!("Three."), Some(&a)));
    assert_eq!(r.status, 404, "{}", r.text());
    let id = a["id"].as_str().unwrap();
    assert_eq!(
        r.json()["error"],
        json!({"message": format!("previous_response_id: response \"{id}\" is not stored: it was evicted: the store keeps the 1 most recently used responses (--responses-store-max)"),
               "type": "not_found_error", "param": "previous_response_id",
               "code": "previous_response_not_found"})
    );
    // The newest is still there and continues.
    post_ok(s.addr, "/v1/responses", &turn(json!("Three."), Some(&b)));
}
