//! Stored responses (`store: true`, OpenAI's default): what `previous_response_id`
//! continues from and `GET /v1/responses/{id}` returns. Memory only, bounded three ways
//! (count, bytes, age; least recently used out first), because a local server has no
//! place to keep every answer forever. Each entry holds its whole context (the input
//! items the model saw, history included) and its response, so a continuation needs one
//! lookup and still works after its ancestors were evicted.
//!
//! An id that is gone stays remembered (a bounded list) with why, so the 404 can say
//! "evicted by the byte limit" rather than only "unknown".

use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The store's bounds (from `ServerOptions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most responses kept.
    pub count: usize,
    /// Most bytes kept (responses and their contexts as JSON text).
    pub bytes: usize,
    /// A response older than this is dropped.
    pub age: Duration,
}

/// One stored response.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The `response` object as answered.
    pub response: Value,
    /// The input items the model saw: the history of `previous_response_id` and the
    /// request's own `input`.
    pub context: Vec<Value>,
}

impl Stored {
    /// The context of a response continuing this one: its context and then its output.
    pub fn continued(&self) -> Vec<Value> {
        let mut items = self.context.clone();
        if let Some(out) = self.response["output"].as_array() {
            items.extend(out.iter().cloned());
        }
        items
    }
}

/// Why an id is not (or no longer) stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    Unknown,
    Deleted,
    Expired,
    /// Pushed out by the count limit.
    Count,
    /// Pushed out by the byte limit (or larger than it alone).
    Bytes,
}

impl Gone {
    /// The reason, with the limit that applied.
    pub fn describe(self, l: &Limits) -> String {
        match self {
            Gone::Unknown => "no response with this id was stored (folio keeps them in memory only, until it restarts)".into(),
            Gone::Deleted => "it was deleted".into(),
            Gone::Expired => format!(
                "it expired: responses are kept {} s (--responses-store-max-age-s)",
                l.age.as_secs()
            ),
            Gone::Count => format!(
                "it was evicted: the store keeps the {} most recently used responses (--responses-store-max)",
                l.count
            ),
            Gone::Bytes => format!(
                "it was evicted: the store keeps at most {} bytes of responses (--responses-store-bytes)",
                l.bytes
            ),
        }
    }
}

/// Ids remembered as gone, at most.
const REMEMBER_GONE: usize = 4096;

struct Entry {
    stored: Arc<Stored>,
    bytes: usize,
    at: Instant,
    /// Its place in `order` (last use).
    tick: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Last use → id, least recent first.
    order: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
    gone: VecDeque<(String, Gone)>,
}

/// The store; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Store {
    limits: Limits,
    inner: Arc<Mutex<Inner>>,
}

impl Store {
    pub fn new(limits: Limits) -> Store {
        Store {
            limits,
            inner: Arc::default(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent maps (no partial update
        // spans a panic point), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `stored` under `id`, evicting what the limits require.
    pub fn put(&self, id: &str, stored: Stored) {
        let bytes =
            json_bytes(&stored.response) + stored.context.iter().map(json_bytes).sum::<usize>();
        let mut g = self.lock();
        g.remove(id, Gone::Deleted);
        if bytes > self.limits.bytes || self.limits.count == 0 {
            g.forget(id, Gone::Bytes);
            return;
        }
        let now = Instant::now();
        g.expire(now, self.limits.age);
        while g.entries.len() >= self.limits.count {
            g.evict_oldest(Gone::Count);
        }
        while g.bytes + bytes > self.limits.bytes {
            g.evict_oldest(Gone::Bytes);
        }
        g.tick += 1;
        let tick = g.tick;
        g.order.insert(tick, id.to_string());
        g.bytes += bytes;
        g.entries.insert(
            id.to_string(),
            Entry {
                stored: Arc::new(stored),
                bytes,
                at: now,
                tick,
            },
        );
    }

    /// The response stored under `id` (now the most recently used), or why there is none.
    pub fn get(&self, id: &str) -> Result<Arc<Stored>, Gone> {
        let mut g = self.lock();
        g.expire(Instant::now(), self.limits.age);
        let Some(tick) = g.entries.get(id).map(|e| e.tick) else {
            return Err(g.why(id));
        };
        g.tick += 1;
        let new = g.tick;
        g.order.remove(&tick);
        g.order.insert(new, id.to_string());
        let e = g.entries.get_mut(id).expect("present above");
        e.tick = new;
        Ok(e.stored.clone())
    }

    /// Deletes `id`; `Err` says why there was nothing to delete.
    pub fn delete(&self, id: &str) -> Result<(), Gone> {
        let mut g = self.lock();
        g.expire(Instant::now(), self.limits.age);
        match g.remove(id, Gone::Deleted) {
            true => Ok(()),
            false => Err(g.why(id)),
        }
    }
}

impl Inner {
    fn why(&self, id: &str) -> Gone {
        self.gone
            .iter()
            .rev()
            .find(|(g, _)| g == id)
            .map_or(Gone::Unknown, |(_, why)| *why)
    }

    fn forget(&mut self, id: &str, why: Gone) {
        if self.gone.len() == REMEMBER_GONE {
            self.gone.pop_front();
        }
        self.gone.push_back((id.to_string(), why));
    }

    /// Removes `id` if stored (remembering `why`); whether it was.
    fn remove(&mut self, id: &str, why: Gone) -> bool {
        let Some(e) = self.entries.remove(id) else {
            return false;
        };
        self.order.remove(&e.tick);
        self.bytes -= e.bytes;
        self.forget(id, why);
        true
    }

    fn evict_oldest(&mut self, why: Gone) {
        if let Some((_, id)) = self.order.first_key_value().map(|(k, v)| (*k, v.clone())) {
            self.remove(&id, why);
        }
    }

    /// Drops every entry older than `age`.
    fn expire(&mut self, now: Instant, age: Duration) {
        let old: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.at) > age)
            .map(|(id, _)| id.clone())
            .collect();
        for id in old {
            self.remove(&id, Gone::Expired);
        }
    }
}

fn json_bytes(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(text: &str) -> Stored {
        Stored {
            response: json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}]}),
            context: vec![json!({"type": "message", "role": "user", "content": "q"})],
        }
    }

    fn limits(count: usize, bytes: usize) -> Limits {
        Limits {
            count,
            bytes,
            age: Duration::from_secs(3600),
        }
    }

    #[test]
    fn least_recently_used_goes_first_and_is_named() {
        let s = Store::new(limits(2, 1 << 20));
        s.put("a", stored("1"));
        s.put("b", stored("2"));
        s.get("a").unwrap();
        s.put("c", stored("3"));
        assert_eq!(s.get("b").unwrap_err(), Gone::Count);
        assert!(s.get("a").is_ok() && s.get("c").is_ok());
        assert_eq!(s.get("zz").unwrap_err(), Gone::Unknown);
        s.delete("a").unwrap();
        assert_eq!(s.get("a").unwrap_err(), Gone::Deleted);
        assert_eq!(s.delete("a").unwrap_err(), Gone::Deleted);
        let c = s.get("c").unwrap().continued();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1]["content"][0]["text"], "3");
    }

    #[test]
    fn byte_limit_and_age_evict() {
        let one = {
            let st = stored("x");
            json_bytes(&st.response) + json_bytes(&st.context[0])
        };
        let s = Store::new(limits(100, 2 * one));
        for id in ["a", "b", "c"] {
            s.put(id, stored("x"));
        }
        assert_eq!(s.get("a").unwrap_err(), Gone::Bytes);
        assert!(s.get("b").is_ok());
        s.put("big", stored(&"y".repeat(3 * one)));
        assert_eq!(s.get("big").unwrap_err(), Gone::Bytes);
        assert!(s.get("c").is_ok());
        let s = Store::new(Limits {
            age: Duration::ZERO,
            ..limits(10, 1 << 20)
        });
        s.put("a", stored("x"));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(s.get("a").unwrap_err(), Gone::Expired);
        assert_eq!(
            Gone::Count.describe(&limits(2, 9)),
            "it was evicted: the store keeps the 2 most recently used responses (--responses-store-max)"
        );
    }
}
