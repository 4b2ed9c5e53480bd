//! Endpoint filters (CONVENTIONS "Destinations, filters, throttles, endpoint authentication"):
//! a small JSON predicate on the envelope as delivered. An event whose envelope does not match
//! an endpoint's filter creates no delivery for that endpoint.
//!
//! ```json
//! {"channel.type": {"$in": ["whatsapp_cloud"]}, "data.direction": "inbound",
//!  "$or": [{"data.amount": {"$gte": 100}}, {"metadata.occurred_at": {"$lt": "2026-01-01T00:00:00Z"}}]}
//! ```
//!
//! - A key is a dotted path into the envelope (`channel.type`); a segment of digits indexes an
//!   array. The keys of one object must all hold (and).
//! - A value that is not an object is a literal: the field equals it. Numbers compare by value
//!   (`1` equals `1.0`); `null` matches a field that is null or absent.
//! - An object value holds operators: `$eq`, `$ne` (any literal), `$in`, `$nin` (a list of
//!   literals), `$exists` (`true` or `false`), `$gt`, `$gte`, `$lt`, `$lte` (a number, or an
//!   RFC 3339 time compared as an instant). `$ne` and `$nin` hold for an absent field; the
//!   order operators never hold for a field of another kind (a string that is not a time, when
//!   the bound is a time).
//! - `$and` and `$or` take a non-empty list of filters.
//!
//! Anything else (an unknown operator, an object literal, a wrong operand) is malformed.

use std::cmp::Ordering;

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

/// The most conditions (paths and `$and`/`$or` members) in one filter.
pub const MAX_CONDITIONS: usize = 64;
/// The deepest nesting of `$and` / `$or`.
pub const MAX_DEPTH: usize = 5;
/// The most values in one `$in` / `$nin` list.
pub const MAX_LIST: usize = 100;
/// The longest path, in bytes.
pub const MAX_PATH_LEN: usize = 200;
/// The largest filter, as JSON text, in bytes.
pub const MAX_FILTER_BYTES: usize = 8 * 1024;

/// A parsed filter: the conditions of which all must hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter(Vec<Condition>);

#[derive(Clone, Debug, PartialEq)]
enum Condition {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    /// Every operator must hold on the value at the path.
    Field(Vec<String>, Vec<Op>),
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Eq(Value),
    Ne(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    Cmp(CmpOp, Bound),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Clone, Debug, PartialEq)]
enum Bound {
    Number(f64),
    Time(DateTime<FixedOffset>),
}

const OPERATORS: &str = "$eq, $ne, $in, $nin, $exists, $gt, $gte, $lt, $lte";

struct Parser {
    conditions: usize,
}

impl Filter {
    /// Parses and checks a filter. The error is the issue for people (the field is `filter`).
    pub fn parse(v: &Value) -> Result<Filter, String> {
        if v.to_string().len() > MAX_FILTER_BYTES {
            return Err(format!("must be at most {MAX_FILTER_BYTES} bytes of JSON"));
        }
        Parser { conditions: 0 }.filter(v, 0, "")
    }

    /// Whether the envelope matches.
    pub fn matches(&self, envelope: &Value) -> bool {
        self.0.iter().all(|c| c.holds(envelope))
    }
}

impl Parser {
    fn filter(&mut self, v: &Value, depth: usize, at: &str) -> Result<Filter, String> {
        let Value::Object(map) = v else {
            return Err(format!(
                "{}must be an object of paths and operators",
                where_(at)
            ));
        };
        let mut conditions = Vec::with_capacity(map.len());
        for (key, value) in map {
            self.conditions += 1;
            if self.conditions > MAX_CONDITIONS {
                return Err(format!("must have at most {MAX_CONDITIONS} conditions"));
            }
            let here = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            conditions.push(match key.as_str() {
                "$and" | "$or" => {
                    if depth + 1 > MAX_DEPTH {
                        return Err(format!(
                            "nests `$and` / `$or` deeper than {MAX_DEPTH} levels"
                        ));
                    }
                    let Value::Array(items) = value else {
                        return Err(format!("`{key}` takes a list of filters"));
                    };
                    if items.is_empty() {
                        return Err(format!("`{key}` takes a non-empty list of filters"));
                    }
                    let subs = items
                        .iter()
                        .enumerate()
                        .map(|(i, f)| self.filter(f, depth + 1, &format!("{here}[{i}]")))
                        .collect::<Result<Vec<_>, _>>()?;
                    if key == "$and" {
                        Condition::And(subs)
                    } else {
                        Condition::Or(subs)
                    }
                }
                k if k.starts_with('$') => {
                    return Err(format!(
                        "`{k}` is not a known operator here (paths take {OPERATORS}; `$and` and `$or` combine filters)"
                    ));
                }
                path => Condition::Field(parse_path(path)?, ops(path, value)?),
            });
        }
        Ok(Filter(conditions))
    }
}

fn where_(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!("`{at}` ")
    }
}

fn parse_path(path: &str) -> Result<Vec<String>, String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!("a path must be at most {MAX_PATH_LEN} bytes"));
    }
    let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
    if segments.iter().any(String::is_empty) {
        return Err(format!(
            "`{path}` is not a dotted path (such as `channel.type`)"
        ));
    }
    Ok(segments)
}

fn literal(path: &str, op: &str, v: &Value) -> Result<Value, String> {
    match v {
        Value::Object(_) => Err(format!(
            "`{path}`: `{op}` takes a string, number, boolean or null, not an object"
        )),
        Value::Array(_) => Err(format!(
            "`{path}`: `{op}` takes a string, number, boolean or null, not a list"
        )),
        v => Ok(v.clone()),
    }
}

fn ops(path: &str, v: &Value) -> Result<Vec<Op>, String> {
    let map = match v {
        Value::Object(map) => map,
        Value::Array(_) => {
            return Err(format!(
                "`{path}`: a list is not a literal (use `{{\"$in\": [...]}}`)"
            ));
        }
        v => return Ok(vec![Op::Eq(v.clone())]),
    };
    if map.is_empty() {
        return Err(format!("`{path}`: an empty object is not a condition"));
    }
    let mut out = Vec::with_capacity(map.len());
    for (op, operand) in map {
        out.push(match op.as_str() {
            "$eq" => Op::Eq(literal(path, op, operand)?),
            "$ne" => Op::Ne(literal(path, op, operand)?),
            "$in" | "$nin" => {
                let Value::Array(items) = operand else {
                    return Err(format!("`{path}`: `{op}` takes a list"));
                };
                if items.len() > MAX_LIST {
                    return Err(format!(
                        "`{path}`: `{op}` takes at most {MAX_LIST} values"
                    ));
                }
                let items = items
                    .iter()
                    .map(|i| literal(path, op, i))
                    .collect::<Result<Vec<_>, _>>()?;
                if op == "$in" {
                    Op::In(items)
                } else {
                    Op::Nin(items)
                }
            }
            "$exists" => match operand {
                Value::Bool(b) => Op::Exists(*b),
                _ => return Err(format!("`{path}`: `$exists` takes true or false")),
            },
            "$gt" | "$gte" | "$lt" | "$lte" => {
                let cmp = match op.as_str() {
                    "$gt" => CmpOp::Gt,
                    "$gte" => CmpOp::Gte,
                    "$lt" => CmpOp::Lt,
                    _ => CmpOp::Lte,
                };
                let bound = match operand {
                    Value::Number(n) => n.as_f64().map(Bound::Number),
                    Value::String(s) => time(s).map(Bound::Time),
                    _ => None,
                }
                .ok_or_else(|| {
                    format!("`{path}`: `{op}` takes a number or an RFC 3339 time")
                })?;
                Op::Cmp(cmp, bound)
            }
            other if other.starts_with('$') => {
                return Err(format!(
                    "`{path}`: `{other}` is not a known operator (use {OPERATORS})"
                ));
            }
            other => {
                return Err(format!(
                    "`{path}`: `{other}` is not an operator; an object value holds operators ({OPERATORS}), objects are not literals"
                ));
            }
        });
    }
    Ok(out)
}

fn time(s: &str) -> Option<DateTime<FixedOffset>> {
    if s.len() > 64 {
        return None;
    }
    DateTime::parse_from_rfc3339(s).ok()
}

/// The value at a path, `None` when absent.
fn lookup<'a>(envelope: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut at = envelope;
    for segment in path {
        at = match at {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// JSON equality, numbers by value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

/// Equality with a literal; `null` also matches an absent field.
fn equals(field: Option<&Value>, literal: &Value) -> bool {
    match field {
        Some(v) => equal(v, literal),
        None => literal.is_null(),
    }
}

impl Condition {
    fn holds(&self, envelope: &Value) -> bool {
        match self {
            Condition::And(fs) => fs.iter().all(|f| f.matches(envelope)),
            Condition::Or(fs) => fs.iter().any(|f| f.matches(envelope)),
            Condition::Field(path, ops) => {
                let field = lookup(envelope, path);
                ops.iter().all(|op| op.holds(field))
            }
        }
    }
}

impl Op {
    fn holds(&self, field: Option<&Value>) -> bool {
        match self {
            Op::Eq(l) => equals(field, l),
            Op::Ne(l) => !equals(field, l),
            Op::In(ls) => ls.iter().any(|l| equals(field, l)),
            Op::Nin(ls) => !ls.iter().any(|l| equals(field, l)),
            Op::Exists(want) => field.is_some() == *want,
            Op::Cmp(op, bound) => {
                let ord = match (bound, field) {
                    (Bound::Number(b), Some(Value::Number(n))) => {
                        n.as_f64().and_then(|n| n.partial_cmp(b))
                    }
                    (Bound::Time(b), Some(Value::String(s))) => time(s).map(|t| t.cmp(b)),
                    _ => None,
                };
                match (ord, op) {
                    (None, _) => false,
                    (Some(o), CmpOp::Gt) => o == Ordering::Greater,
                    (Some(o), CmpOp::Gte) => o != Ordering::Less,
                    (Some(o), CmpOp::Lt) => o == Ordering::Less,
                    (Some(o), CmpOp::Lte) => o != Ordering::Greater,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope() -> Value {
        json!({
            "event": "message.received",
            "data": {"direction": "inbound", "amount": 150, "tags": ["vip", "new"], "note": null},
            "metadata": {"occurred_at": "2026-08-14T09:30:00.000Z", "organization_id": 7},
            "channel": {"type": "whatsapp_cloud", "slug": "support"}
        })
    }

    fn m(f: Value) -> bool {
        Filter::parse(&f)
            .unwrap_or_else(|e| panic!("{f} should parse: {e}"))
            .matches(&envelope())
    }

    #[test]
    fn literals_are_equality() {
        assert!(m(json!({"channel.type": "whatsapp_cloud"})));
        assert!(!m(json!({"channel.type": "telegram"})));
        assert!(m(
            json!({"data.direction": "inbound", "channel.slug": "support"})
        ));
        assert!(!m(
            json!({"data.direction": "inbound", "channel.slug": "sales"})
        ));
        assert!(m(json!({"data.amount": 150.0})));
        assert!(m(json!({"metadata.organization_id": 7})));
        assert!(m(json!({"data.tags.0": "vip"})));
        assert!(!m(json!({"data.tags.5": "vip"})));
        // null matches null and absent, not a present value
        assert!(m(json!({"data.note": null})));
        assert!(m(json!({"data.missing": null})));
        assert!(!m(json!({"data.direction": null})));
        assert!(m(json!({})));
    }

    #[test]
    fn operators() {
        assert!(m(
            json!({"channel.type": {"$in": ["whatsapp_cloud", "telegram"]}})
        ));
        assert!(!m(json!({"channel.type": {"$in": ["telegram"]}})));
        assert!(m(json!({"channel.type": {"$nin": ["telegram"]}})));
        assert!(!m(json!({"channel.type": {"$nin": ["whatsapp_cloud"]}})));
        assert!(m(json!({"data.missing": {"$nin": ["x"]}})));
        assert!(m(json!({"channel.type": {"$eq": "whatsapp_cloud"}})));
        assert!(m(json!({"channel.type": {"$ne": "telegram"}})));
        assert!(m(json!({"data.missing": {"$ne": "telegram"}})));
        assert!(!m(json!({"channel.type": {"$ne": "whatsapp_cloud"}})));
        assert!(m(json!({"data.direction": {"$exists": true}})));
        assert!(m(json!({"data.note": {"$exists": true}})));
        assert!(m(json!({"data.missing": {"$exists": false}})));
        assert!(!m(json!({"data.missing": {"$exists": true}})));
    }

    #[test]
    fn order_on_numbers_and_times() {
        assert!(m(json!({"data.amount": {"$gt": 100}})));
        assert!(m(json!({"data.amount": {"$gte": 150, "$lte": 150}})));
        assert!(!m(json!({"data.amount": {"$lt": 150}})));
        assert!(m(json!({"data.amount": {"$gt": 149.5, "$lt": 200}})));
        assert!(m(
            json!({"metadata.occurred_at": {"$gt": "2026-08-14T09:29:59.999Z"}})
        ));
        // another offset, same instant
        assert!(m(
            json!({"metadata.occurred_at": {"$gte": "2026-08-14T11:30:00+02:00", "$lte": "2026-08-14T09:30:00Z"}})
        ));
        assert!(!m(
            json!({"metadata.occurred_at": {"$lt": "2026-08-14T09:30:00Z"}})
        ));
        // other kinds never compare
        assert!(!m(json!({"channel.type": {"$gt": 1}})));
        assert!(!m(json!({"data.amount": {"$gt": "2020-01-01T00:00:00Z"}})));
        assert!(!m(json!({"data.missing": {"$lt": 1}})));
    }

    #[test]
    fn and_or() {
        assert!(m(
            json!({"$or": [{"channel.type": "telegram"}, {"data.amount": {"$gt": 100}}]})
        ));
        assert!(!m(
            json!({"$or": [{"channel.type": "telegram"}, {"data.amount": {"$gt": 200}}]})
        ));
        assert!(m(
            json!({"$and": [{"channel.type": "whatsapp_cloud"}, {"data.amount": 150}]})
        ));
        assert!(!m(
            json!({"$and": [{"channel.type": "whatsapp_cloud"}, {"data.amount": 1}]})
        ));
        assert!(m(json!({
            "event": "message.received",
            "$or": [{"$and": [{"data.tags.1": "new"}, {"data.amount": {"$lt": 1000}}]}, {"event": "x"}]
        })));
    }

    #[test]
    fn malformed_filters_are_refused() {
        for (f, says) in [
            (json!([]), "must be an object"),
            (json!("x"), "must be an object"),
            (
                json!({"a": {"$regex": "x"}}),
                "`$regex` is not a known operator",
            ),
            (json!({"$nor": []}), "`$nor` is not a known operator"),
            (json!({"a": {"b": 1}}), "not an operator"),
            (json!({"a": {}}), "empty object"),
            (json!({"a": [1]}), "not a literal"),
            (json!({"a": {"$in": "x"}}), "takes a list"),
            (json!({"a": {"$in": [{"b": 1}]}}), "not an object"),
            (json!({"a": {"$eq": [1]}}), "not a list"),
            (json!({"a": {"$exists": 1}}), "true or false"),
            (json!({"a": {"$gt": "yesterday"}}), "RFC 3339"),
            (json!({"a": {"$gt": true}}), "RFC 3339"),
            (json!({"a..b": 1}), "dotted path"),
            (json!({"": 1}), "dotted path"),
            (json!({"$or": {}}), "list of filters"),
            (json!({"$and": []}), "non-empty"),
            (json!({"$or": [1]}), "must be an object"),
        ] {
            let err = Filter::parse(&f).expect_err(&f.to_string());
            assert!(err.contains(says), "{f}: {err}");
        }
    }

    #[test]
    fn filters_are_bounded() {
        let many: serde_json::Map<String, Value> =
            (0..65).map(|i| (format!("k{i}"), json!(1))).collect();
        assert!(Filter::parse(&Value::Object(many)).is_err());
        let mut deep = json!({"a": 1});
        for _ in 0..6 {
            deep = json!({"$and": [deep]});
        }
        assert!(Filter::parse(&deep).unwrap_err().contains("deeper"));
        let long = json!({"a": {"$in": (0..101).collect::<Vec<_>>()}});
        assert!(Filter::parse(&long).is_err());
        let big = json!({"a": "x".repeat(9000)});
        assert!(Filter::parse(&big).unwrap_err().contains("bytes"));
    }
}
