//! The size limits a constraint must meet before llguidance compiles it.
//!
//! llguidance's grammar and schema compilers recurse once per rule of a rule chain, once
//! per `$ref` of a `$defs` chain and once per property of an object, and some of their work
//! grows with the square of the number of properties or `patternProperties`; nothing in a
//! running compile can be cancelled. A few kilobytes of request could therefore overflow a
//! thread's stack (which aborts the whole process) or keep a core busy for minutes. These
//! checks are cheap, iterative (a deep schema cannot overflow them), and run first, so
//! whatever passes compiles in bounded stack, time and memory: with the defaults, within
//! [`COMPILE_STACK_BYTES`] of stack, in a few seconds and ~200 MB at most on one core.

use crate::constraint::Constraint;
use serde_json::Value;

/// The stack a compile needs at the default limits, with margin: a 10,000-rule Lark chain
/// takes ~30 MB and a 1,000-deep `$ref` chain ~7 MB. Only the pages a compile touches
/// are ever resident.
pub const COMPILE_STACK_BYTES: usize = 128 << 20;

/// The most of each thing one constraint may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrammarLimits {
    /// Bytes of the grammar, regex or choice texts, or of the schema as JSON (1 MiB
    /// compiles in ~1.5 s and ~120 MB).
    pub max_bytes: usize,
    /// Lark rule and terminal definitions (GBNF rules after conversion): each link of a
    /// rule chain is a level of recursion in llguidance.
    pub max_rules: usize,
    /// Properties over every object of a schema: compile time grows with their square
    /// (4,000 take ~0.9 s, 8,000 ~3 s, 12,000 panic in llguidance).
    pub max_properties: usize,
    /// `patternProperties` entries over a schema: every pair is intersected to check that
    /// they are disjoint.
    pub max_pattern_properties: usize,
    /// `$ref`s in a schema (or in a Lark grammar's inline `%json`): a chain of them is a
    /// level of recursion each.
    pub max_refs: usize,
    /// Nesting of a schema's objects and arrays (llguidance itself stops at 128).
    pub max_depth: usize,
}

impl Default for GrammarLimits {
    fn default() -> Self {
        GrammarLimits {
            max_bytes: 1 << 20,
            max_rules: 10_000,
            max_properties: 5_000,
            max_pattern_properties: 32,
            max_refs: 1_000,
            max_depth: 128,
        }
    }
}

/// A constraint over one of the [`GrammarLimits`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("has {value} {what}, over the limit of {limit}")]
pub struct LimitError {
    /// What was counted, plural ("grammar bytes", "schema properties", …).
    pub what: &'static str,
    pub limit: usize,
    pub value: usize,
}

fn within(what: &'static str, value: usize, limit: usize) -> Result<(), LimitError> {
    if value > limit {
        Err(LimitError { what, limit, value })
    } else {
        Ok(())
    }
}

impl GrammarLimits {
    /// Checks `c` against every limit; linear in its size.
    pub fn check(&self, c: &Constraint) -> Result<(), LimitError> {
        match c {
            Constraint::JsonObject => Ok(()),
            Constraint::Regex(r) => within("regex bytes", r.len(), self.max_bytes),
            Constraint::Choice(cs) => within(
                "choice bytes",
                cs.iter().map(String::len).sum(),
                self.max_bytes,
            ),
            Constraint::Lark(g) => self.check_lark(g),
            Constraint::JsonSchema(s) => self.check_schema(s),
        }
    }

    /// The grammar's bytes, rule definitions and `$ref`s (of inline `%json` schemas).
    pub fn check_lark(&self, g: &str) -> Result<(), LimitError> {
        within("grammar bytes", g.len(), self.max_bytes)?;
        let rules = g.lines().filter(|l| defines_rule(l)).count();
        within("grammar rules", rules, self.max_rules)?;
        within("$refs", g.matches("\"$ref\"").count(), self.max_refs)
    }

    /// The schema's nesting, properties, `patternProperties`, `$ref`s and bytes.
    pub fn check_schema(&self, schema: &Value) -> Result<(), LimitError> {
        let (mut props, mut patterns, mut refs) = (0, 0, 0);
        let mut todo: Vec<(&Value, usize)> = vec![(schema, 1)];
        while let Some((v, depth)) = todo.pop() {
            match v {
                Value::Object(o) => {
                    within("levels of schema nesting", depth, self.max_depth)?;
                    for (k, x) in o {
                        match (k.as_str(), x) {
                            ("properties", Value::Object(p)) => props += p.len(),
                            ("patternProperties", Value::Object(p)) => patterns += p.len(),
                            ("$ref", _) => refs += 1,
                            _ => {}
                        }
                        todo.push((x, depth + 1));
                    }
                }
                Value::Array(a) => {
                    within("levels of schema nesting", depth, self.max_depth)?;
                    todo.extend(a.iter().map(|x| (x, depth + 1)));
                }
                _ => {}
            }
        }
        within("schema properties", props, self.max_properties)?;
        within(
            "schema patternProperties",
            patterns,
            self.max_pattern_properties,
        )?;
        within("$refs", refs, self.max_refs)?;
        // Nesting is bounded, so serializing (which recurses) is safe now.
        let mut n = ByteCount(0);
        serde_json::to_writer(&mut n, schema).expect("counting bytes cannot fail");
        within("schema bytes", n.0, self.max_bytes)
    }
}

/// Whether a Lark line starts a rule or terminal: `[?!]name[.prio]:` (not `::=`).
fn defines_rule(line: &str) -> bool {
    let l = line.trim_start();
    let l = l.strip_prefix(['?', '!']).unwrap_or(l);
    let name_end = l
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(l.len());
    if name_end == 0 || l.as_bytes()[0].is_ascii_digit() {
        return false;
    }
    let rest =
        l[name_end..].trim_start_matches(|c: char| c == '.' || c == '-' || c.is_ascii_digit());
    let rest = rest.trim_start();
    rest.starts_with(':') && !rest.starts_with("::")
}

/// Counts bytes written.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lark_rules_are_counted() {
        let g = "start: a\n?a.2: \"x\" b\n  B: /y/\n// c: comment\n| \"z\"\n%import common.WS\n";
        let defs: Vec<&str> = g.lines().filter(|l| defines_rule(l)).collect();
        assert_eq!(defs, ["start: a", "?a.2: \"x\" b", "  B: /y/"]);
        let l = GrammarLimits {
            max_rules: 2,
            ..Default::default()
        };
        let e = l.check_lark(g).unwrap_err();
        assert_eq!((e.what, e.value, e.limit), ("grammar rules", 3, 2));
        assert_eq!(e.to_string(), "has 3 grammar rules, over the limit of 2");
    }

    #[test]
    fn schema_counts_name_the_limit() {
        let l = GrammarLimits {
            max_properties: 3,
            max_refs: 1,
            max_depth: 5,
            max_bytes: 200,
            ..Default::default()
        };
        let props = json!({"properties": {"a": {}, "b": {"properties": {"c": {}, "d": {}}}}});
        assert_eq!(
            l.check_schema(&props).unwrap_err().what,
            "schema properties"
        );
        let refs = json!({"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]});
        assert_eq!(l.check_schema(&refs).unwrap_err().what, "$refs");
        let deep = json!({"items": {"items": {"items": {"items": {"items": {}}}}}});
        let e = l.check_schema(&deep).unwrap_err();
        assert_eq!((e.what, e.value), ("levels of schema nesting", 6));
        let big = json!({"enum": ["x".repeat(300)]});
        assert_eq!(l.check_schema(&big).unwrap_err().what, "schema bytes");
        assert!(l.check_schema(&json!({"properties": {"a": {}}})).is_ok());
    }
}
