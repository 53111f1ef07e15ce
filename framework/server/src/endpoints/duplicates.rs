//! Decoding a body into JSON while noting duplicate fields, which a plain decode drops
//! silently (the last one wins). kube-apiserver reports them as field validation asks:
//! `strict decoding error: duplicate field "spec.reference"` (400) with `Strict`, a
//! `Warning` with `Warn`, nothing with `Ignore`.
//!
//! The path of a field is built only when it is a duplicate: each level keeps a reference to
//! its parent and its own key, so a body without duplicates costs no more than a plain decode.
//! As sigs.k8s.io/json saves strict errors, the first [`MAX_DUPLICATES`] distinct paths are
//! kept.
//!
//! The decoder also counts the values it makes: a YAML document's aliases replay their
//! anchor's values, so a small body could otherwise expand to billions of them.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Where a value sits: the root, a field of an object, or an item of a list.
enum Step<'a> {
    Root,
    Field(&'a str),
    Item(usize),
}

/// The most duplicate fields reported, as sigs.k8s.io/json's decoder keeps at most 100
/// strict errors.
pub const MAX_DUPLICATES: usize = 100;

/// What a decode found so far: the duplicate fields, and how many more values it may make.
struct Tally {
    duplicates: RefCell<Vec<String>>,
    seen: RefCell<HashSet<String>>,
    values_left: Cell<usize>,
    exceeded: Cell<bool>,
}

impl Tally {
    fn duplicate(&self, place: &Place<'_>) {
        if self.duplicates.borrow().len() >= MAX_DUPLICATES {
            return;
        }
        let path = place.path();
        if self.seen.borrow_mut().insert(path.clone()) {
            self.duplicates.borrow_mut().push(path);
        }
    }

    /// Counts one value made; `false` past the budget.
    fn take_value(&self) -> bool {
        match self.values_left.get() {
            0 => {
                self.exceeded.set(true);
                false
            }
            left => {
                self.values_left.set(left - 1);
                true
            }
        }
    }
}

/// The seed of one value: its place, and the decode's tally.
struct Place<'a> {
    parent: Option<&'a Place<'a>>,
    step: Step<'a>,
    tally: &'a Tally,
}

impl Place<'_> {
    fn child<'b>(&'b self, step: Step<'b>) -> Place<'b> {
        Place {
            parent: Some(self),
            step,
            tally: self.tally,
        }
    }

    /// `spec.items[0].name`, as kube-apiserver names a field in strict decoding errors.
    fn path(&self) -> String {
        let mut steps = Vec::new();
        let mut at = Some(self);
        while let Some(place) = at {
            steps.push(&place.step);
            at = place.parent;
        }
        let mut path = String::new();
        for step in steps.into_iter().rev() {
            match step {
                Step::Root => {}
                Step::Field(key) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Step::Item(i) => path.push_str(&format!("[{i}]")),
            }
        }
        path
    }
}

/// Decodes with `decode` (a JSON or YAML deserializer) into a JSON value, and the paths of
/// the fields that appeared more than once, in order.
pub fn decode_noting_duplicates<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<(Value, Vec<String>), D::Error> {
    decode_within(deserializer, usize::MAX).map_err(|e| match e {
        Exceeded::Values => serde::de::Error::custom(TOO_MANY_VALUES),
        Exceeded::Decoder(e) => e,
    })
}

const TOO_MANY_VALUES: &str = "the document makes too many values";

/// Why [`decode_within`] stopped.
#[derive(Debug)]
pub enum Exceeded<E> {
    /// The document makes more values than its budget (YAML aliases expanding).
    Values,
    /// The decoder's own error.
    Decoder(E),
}

/// [`decode_noting_duplicates`], making at most `max_values` values.
pub fn decode_within<'de, D: Deserializer<'de>>(
    deserializer: D,
    max_values: usize,
) -> Result<(Value, Vec<String>), Exceeded<D::Error>> {
    let tally = Tally {
        duplicates: RefCell::new(Vec::new()),
        seen: RefCell::new(HashSet::new()),
        values_left: Cell::new(max_values),
        exceeded: Cell::new(false),
    };
    let root = Place {
        parent: None,
        step: Step::Root,
        tally: &tally,
    };
    match root.deserialize(deserializer) {
        Ok(value) => Ok((value, tally.duplicates.into_inner())),
        Err(_) if tally.exceeded.get() => Err(Exceeded::Values),
        Err(e) => Err(Exceeded::Decoder(e)),
    }
}

impl<'de> DeserializeSeed<'de> for Place<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if !self.tally.take_value() {
            return Err(serde::de::Error::custom(TOO_MANY_VALUES));
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Place<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // A hint is the decoder's guess, not a promise: never reserve more than a page.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        loop {
            match seq.next_element_seed(self.child(Step::Item(items.len())))? {
                Some(value) => items.push(value),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.child(Step::Field(&key)))?;
            if object.contains_key(&key) {
                self.tally.duplicate(&self.child(Step::Field(&key)));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> (Value, Vec<String>) {
        decode_noting_duplicates(&mut serde_json::Deserializer::from_str(body)).unwrap()
    }

    #[test]
    fn duplicates_are_named_by_their_path() {
        let (value, duplicates) = json(
            r#"{"metadata":{"name":"a","name":"b"},"spec":{"items":[{"x":1,"x":2}],"r":1},"spec2":0}"#,
        );
        assert_eq!(duplicates, ["metadata.name", "spec.items[0].x"]);
        assert_eq!(
            value["metadata"]["name"], "b",
            "the last one wins, as in Go"
        );
        let (_, duplicates) = json(r#"{"a":1,"a":{"b":true},"c":[1.5,null,"s"]}"#);
        assert_eq!(duplicates, ["a"]);
    }

    /// As kube's strict decoder: each path once, and no more than 100 of them.
    #[test]
    fn duplicates_are_bounded() {
        let fields: String = (0..300)
            .map(|i| format!(r#""f{}":1,"f{}":2,"#, i % 200, i % 200))
            .collect();
        let (_, duplicates) = json(&format!("{{{fields}\"end\":0}}"));
        assert_eq!(duplicates.len(), MAX_DUPLICATES);
        assert_eq!(duplicates[..2], ["f0", "f1"]);
    }

    #[test]
    fn a_body_without_duplicates_decodes_as_serde_json() {
        let body =
            r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":{"d":"e"},"big":18446744073709551615}"#;
        let (value, duplicates) = json(body);
        assert!(duplicates.is_empty());
        assert_eq!(value, serde_json::from_str::<Value>(body).unwrap());
    }
}
