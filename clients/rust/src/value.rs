//! Reply values and typed conversions.
//!
//! Must not touch the connection or commands: it knows `error` and the
//! protocol crate's frames, which `conn` hands it.

use std::collections::HashMap;
use std::hash::Hash;

use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame;

use super::error::{Error, Result};

/// A decoded RESP3 reply. Error replies never become a `Value`: they are
/// [`Error::Server`], also when nested inside an aggregate.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// RESP3 null (and RESP2 nil bulk/array).
    Nil,
    /// `:` integer.
    Int(i64),
    /// `$` bulk string (also RESP3 big numbers, as their digits).
    Bulk(Bytes),
    /// `+` simple string.
    Simple(String),
    /// `,` double.
    Double(f64),
    /// `#` boolean.
    Bool(bool),
    /// `*` array.
    Array(Vec<Value>),
    /// `%` map, in the server's order.
    Map(Vec<(Value, Value)>),
    /// `~` set, in the server's order.
    Set(Vec<Value>),
    /// `=` verbatim string, without its `txt:` prefix.
    Verbatim(String),
}

impl Value {
    /// The RESP type's plain name, as used in conversion errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Int(_) => "integer",
            Value::Bulk(_) => "bulk string",
            Value::Simple(_) => "simple string",
            Value::Double(_) => "double",
            Value::Bool(_) => "boolean",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
            Value::Set(_) => "set",
            Value::Verbatim(_) => "verbatim string",
        }
    }

    /// The bytes of a string-like value (bulk, simple, verbatim).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(b) => Some(b),
            Value::Simple(s) | Value::Verbatim(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Converts a decoded frame; error frames (at any depth) become
/// [`Error::Server`].
pub(crate) fn from_frame(f: BytesFrame) -> Result<Value> {
    Ok(match f {
        BytesFrame::BlobString { data, .. } => Value::Bulk(data),
        BytesFrame::SimpleString { data, .. } => Value::Simple(text(&data)),
        BytesFrame::SimpleError { data, .. } => return Err(Error::Server(data.to_string())),
        BytesFrame::BlobError { data, .. } => return Err(Error::Server(text(&data))),
        BytesFrame::Boolean { data, .. } => Value::Bool(data),
        BytesFrame::Null => Value::Nil,
        BytesFrame::Number { data, .. } => Value::Int(data),
        BytesFrame::Double { data, .. } => Value::Double(data),
        BytesFrame::BigNumber { data, .. } => Value::Bulk(data),
        BytesFrame::VerbatimString { data, .. } => Value::Verbatim(text(&data)),
        BytesFrame::Array { data, .. } | BytesFrame::Push { data, .. } => {
            Value::Array(data.into_iter().map(from_frame).collect::<Result<_>>()?)
        }
        BytesFrame::Set { data, .. } => {
            Value::Set(data.into_iter().map(from_frame).collect::<Result<_>>()?)
        }
        BytesFrame::Map { data, .. } => Value::Map(
            data.into_iter()
                .map(|(k, v)| Ok((from_frame(k)?, from_frame(v)?)))
                .collect::<Result<_>>()?,
        ),
        BytesFrame::Hello { .. } | BytesFrame::ChunkedString(_) => {
            return Err(Error::Protocol("unexpected frame type".into()))
        }
    })
}

fn type_err<T>(want: &str, v: &Value) -> Result<T> {
    Err(Error::Type(match v.as_bytes() {
        Some(b) if b.len() <= 64 => format!("expected {want}, got {} {:?}", v.kind(), text(b)),
        _ => format!("expected {want}, got {}", v.kind()),
    }))
}

/// Conversion from a reply [`Value`] into a Rust type, with a clear
/// [`Error::Type`] when it does not fit (`"expected integer, got bulk string"`).
pub trait FromValue: Sized {
    /// Converts `v`.
    fn from_value(v: Value) -> Result<Self>;
}

impl FromValue for Value {
    fn from_value(v: Value) -> Result<Self> {
        Ok(v)
    }
}

/// Accepts any reply (an error reply is already an `Err`).
impl FromValue for () {
    fn from_value(_: Value) -> Result<Self> {
        Ok(())
    }
}

/// `:1`/`:0` (any non-zero is true), `#t`/`#f`, nil (false), `+OK` (true).
impl FromValue for bool {
    fn from_value(v: Value) -> Result<Self> {
        match &v {
            Value::Int(n) => Ok(*n != 0),
            Value::Bool(b) => Ok(*b),
            Value::Nil => Ok(false),
            Value::Simple(s) if s == "OK" => Ok(true),
            Value::Bulk(b) if &b[..] == b"1" => Ok(true),
            Value::Bulk(b) if &b[..] == b"0" => Ok(false),
            _ => type_err("boolean", &v),
        }
    }
}

/// An integer reply, or a string reply holding a decimal integer.
impl FromValue for i64 {
    fn from_value(v: Value) -> Result<Self> {
        match &v {
            Value::Int(n) => Ok(*n),
            Value::Bool(b) => Ok(*b as i64),
            _ => match v.as_bytes().and_then(|b| std::str::from_utf8(b).ok()) {
                Some(s) => s.parse().or_else(|_| type_err("integer", &v)),
                None => type_err("integer", &v),
            },
        }
    }
}

impl FromValue for u64 {
    fn from_value(v: Value) -> Result<Self> {
        match &v {
            Value::Int(n) if *n >= 0 => Ok(*n as u64),
            Value::Bool(b) => Ok(*b as u64),
            _ => match v.as_bytes().and_then(|b| std::str::from_utf8(b).ok()) {
                Some(s) => s.parse().or_else(|_| type_err("non-negative integer", &v)),
                None => type_err("non-negative integer", &v),
            },
        }
    }
}

/// A double, an integer, or a string holding a number (`inf` too).
impl FromValue for f64 {
    fn from_value(v: Value) -> Result<Self> {
        match &v {
            Value::Double(d) => Ok(*d),
            Value::Int(n) => Ok(*n as f64),
            _ => match v.as_bytes().and_then(|b| std::str::from_utf8(b).ok()) {
                Some(s) => s.parse().or_else(|_| type_err("number", &v)),
                None => type_err("number", &v),
            },
        }
    }
}

/// Any string-like reply (must be UTF-8), or an integer/double formatted.
impl FromValue for String {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Simple(s) | Value::Verbatim(s) => Ok(s),
            Value::Bulk(b) => String::from_utf8(b.to_vec())
                .map_err(|_| Error::Type("expected UTF-8 string, got binary bulk string".into())),
            Value::Int(n) => Ok(n.to_string()),
            Value::Double(d) => Ok(d.to_string()),
            other => type_err("string", &other),
        }
    }
}

/// Any string-like reply, or an integer/double formatted.
impl FromValue for Bytes {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Bulk(b) => Ok(b),
            Value::Simple(s) | Value::Verbatim(s) => Ok(Bytes::from(s)),
            Value::Int(n) => Ok(Bytes::from(n.to_string())),
            Value::Double(d) => Ok(Bytes::from(d.to_string())),
            other => type_err("string", &other),
        }
    }
}

/// Same as [`Bytes`].
impl FromValue for Vec<u8> {
    fn from_value(v: Value) -> Result<Self> {
        Bytes::from_value(v).map(|b| b.to_vec())
    }
}

/// Nil is `None`.
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: Value) -> Result<Self> {
        match v {
            Value::Nil => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

fn items(v: Value, want: &str) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Map(m) => Ok(m.into_iter().flat_map(|(k, v)| [k, v]).collect()),
        Value::Nil => Ok(Vec::new()),
        other => type_err(want, &other),
    }
}

/// An array or set (a map flattened to key, value, ...; nil is empty).
impl<T: FromValue> FromValue for Vec<T> {
    fn from_value(v: Value) -> Result<Self> {
        items(v, "array")?.into_iter().map(T::from_value).collect()
    }
}

/// A two-element array.
impl<A: FromValue, B: FromValue> FromValue for (A, B) {
    fn from_value(v: Value) -> Result<Self> {
        let a = items(v, "array of 2")?;
        if a.len() != 2 {
            return Err(Error::Type(format!(
                "expected array of 2, got array of {}",
                a.len()
            )));
        }
        let mut it = a.into_iter();
        Ok((
            A::from_value(it.next().unwrap())?,
            B::from_value(it.next().unwrap())?,
        ))
    }
}

/// A map, or a flat array of key, value, ... (RESP2 style).
impl<K: FromValue + Eq + Hash, T: FromValue> FromValue for HashMap<K, T> {
    fn from_value(v: Value) -> Result<Self> {
        let pairs = match v {
            Value::Map(m) => m,
            other => {
                let a = items(other, "map")?;
                if a.len() % 2 != 0 {
                    return Err(Error::Type(format!(
                        "expected map, got array of odd length {}",
                        a.len()
                    )));
                }
                let mut it = a.into_iter();
                let mut m = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    m.push((k, v));
                }
                m
            }
        };
        pairs
            .into_iter()
            .map(|(k, v)| Ok((K::from_value(k)?, T::from_value(v)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(i64::from_value(Value::Int(5)), Ok(5));
        assert_eq!(i64::from_value(Value::Bulk("12".into())), Ok(12));
        assert_eq!(
            i64::from_value(Value::Bulk("x".into())),
            Err(Error::Type(
                "expected integer, got bulk string \"x\"".into()
            ))
        );
        assert_eq!(
            i64::from_value(Value::Array(vec![])),
            Err(Error::Type("expected integer, got array".into()))
        );
        assert_eq!(Option::<i64>::from_value(Value::Nil), Ok(None));
        let m: HashMap<String, i64> =
            FromValue::from_value(Value::Array(vec![Value::Bulk("a".into()), Value::Int(1)]))
                .unwrap();
        assert_eq!(m["a"], 1);
        assert!(<(i64, i64)>::from_value(Value::Array(vec![Value::Int(1)])).is_err());
    }
}
