//! Value limits of one schema node, checked as kube-openapi's validators check them
//! (`pkg/validation/validate`), worded as its errors (`pkg/validation/errors/schema.go`) after
//! apiextensions-apiserver's `kubeOpenAPIResultToFieldErrors` made them field errors:
//! `maxLength` a `TooLong`, `maxItems` and `maxProperties` a `TooMany`, `enum` a
//! `NotSupported`, a `format` a type error, every other an `Invalid` with kube-openapi's
//! sentence (`spec.replicas in body should be less than or equal to 16384`).

use regex::Regex;
use serde_json::{Map, Value};

use super::error::SchemaError;
use super::formats::Format;
use crate::runtime::{FieldError, FieldErrorType};

/// The limits of one node; all `None` is no work.
#[derive(Debug, Default)]
pub(super) struct Limits {
    /// `(bound, exclusive)`.
    minimum: Option<(f64, bool)>,
    maximum: Option<(f64, bool)>,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<Regex>,
    enumeration: Option<Vec<Value>>,
    format: Option<Format>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique_items: bool,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
}

impl Limits {
    pub(super) fn is_empty(&self) -> bool {
        self.minimum.is_none()
            && self.maximum.is_none()
            && self.multiple_of.is_none()
            && self.min_length.is_none()
            && self.max_length.is_none()
            && self.pattern.is_none()
            && self.enumeration.is_none()
            && self.format.is_none()
            && self.min_items.is_none()
            && self.max_items.is_none()
            && !self.unique_items
            && self.min_properties.is_none()
            && self.max_properties.is_none()
    }

    /// Takes the limits `schema` declares. `inline_enum`: whether an `enum` there is the
    /// user's (on a field) rather than a named Rust enum's, which decoding already enforced.
    pub(super) fn merge(
        &mut self,
        schema: &Map<String, Value>,
        inline_enum: bool,
        path: &str,
    ) -> Result<(), SchemaError> {
        let number = |key: &str| schema.get(key).and_then(Value::as_f64);
        let count = |key: &str| schema.get(key).and_then(Value::as_u64);
        let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
        // 2020-12 writes an exclusive bound as a number; OpenAPI 3.0 as a flag beside it.
        if let Some(min) = number("exclusiveMinimum") {
            self.minimum = Some((min, true));
        } else if let Some(min) = number("minimum") {
            self.minimum = Some((min, flag("exclusiveMinimum")));
        }
        if let Some(max) = number("exclusiveMaximum") {
            self.maximum = Some((max, true));
        } else if let Some(max) = number("maximum") {
            self.maximum = Some((max, flag("exclusiveMaximum")));
        }
        // The bounds schemars writes for a Rust integer type (`u32`: `minimum: 0`) are its
        // type's, which decoding enforced already: no work for them.
        if let Some((low, high)) = schema
            .get("format")
            .and_then(Value::as_str)
            .and_then(rust_integer_range)
        {
            self.minimum = self.minimum.filter(|(m, x)| *x || *m != low);
            self.maximum = self.maximum.filter(|(m, x)| *x || *m != high);
        }
        self.multiple_of = number("multipleOf")
            .filter(|m| *m > 0.0)
            .or(self.multiple_of);
        self.min_length = count("minLength").or(self.min_length);
        self.max_length = count("maxLength").or(self.max_length);
        self.min_items = count("minItems").or(self.min_items);
        self.max_items = count("maxItems").or(self.max_items);
        self.min_properties = count("minProperties").or(self.min_properties);
        self.max_properties = count("maxProperties").or(self.max_properties);
        self.unique_items |= flag("uniqueItems");
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            let regex = Regex::new(pattern).map_err(|e| {
                SchemaError::new(path, format!("pattern {pattern:?} does not compile: {e}"))
            })?;
            self.pattern = Some(regex);
        }
        if inline_enum && let Some(values) = schema.get("enum").and_then(Value::as_array) {
            self.enumeration = Some(values.clone());
        }
        if let Some(format) = schema.get("format").and_then(Value::as_str) {
            self.format = Format::known(format).or(self.format.take());
        }
        Ok(())
    }

    /// Every limit `value` breaks, in kube-openapi's order (numbers, strings, enum, format,
    /// arrays, objects).
    pub(super) fn check(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let name = if path.is_empty() { "." } else { path };
        match value {
            Value::Number(n) => {
                self.check_number(n.as_f64().unwrap_or_default(), value, name, errors)
            }
            Value::String(s) => self.check_string(s, value, name, errors),
            Value::Array(items) => self.check_array(items, name, errors),
            Value::Object(map) => self.check_object(map, name, errors),
            _ => {}
        }
        if let Some(allowed) = &self.enumeration
            && !allowed.contains(value)
        {
            let supported: Vec<String> = allowed
                .iter()
                .map(|v| match v {
                    Value::String(s) => format!("{s:?}"),
                    other => format!("{:?}", other.to_string()),
                })
                .collect();
            errors.push(FieldError {
                type_: FieldErrorType::NotSupported,
                field: path.to_string(),
                value: Some(render(value)),
                detail: format!("supported values: {}", supported.join(", ")),
            });
        }
    }

    fn check_number(&self, n: f64, value: &Value, name: &str, errors: &mut Vec<FieldError>) {
        let invalid = |errors: &mut Vec<FieldError>, sentence: String| {
            errors.push(invalid(name, value, format!("{name} in body {sentence}")));
        };
        if let Some((max, exclusive)) = self.maximum {
            if exclusive && n >= max {
                invalid(errors, format!("should be less than {}", go_float(max)));
            } else if !exclusive && n > max {
                invalid(
                    errors,
                    format!("should be less than or equal to {}", go_float(max)),
                );
            }
        }
        if let Some((min, exclusive)) = self.minimum {
            if exclusive && n <= min {
                invalid(errors, format!("should be greater than {}", go_float(min)));
            } else if !exclusive && n < min {
                invalid(
                    errors,
                    format!("should be greater than or equal to {}", go_float(min)),
                );
            }
        }
        if let Some(factor) = self.multiple_of {
            let quotient = n / factor;
            if (quotient - quotient.round()).abs() > 1e-9 {
                invalid(
                    errors,
                    format!("should be a multiple of {}", go_float(factor)),
                );
            }
        }
    }

    fn check_string(&self, s: &str, value: &Value, name: &str, errors: &mut Vec<FieldError>) {
        // kube-openapi counts characters (runes).
        let length = s.chars().count() as u64;
        if let Some(max) = self.max_length.filter(|max| length > *max) {
            errors.push(FieldError::too_long(name_of(name), max as usize));
        }
        if let Some(min) = self.min_length.filter(|min| length < *min) {
            let detail = format!("{name} in body should be at least {min} chars long");
            errors.push(invalid(name, value, detail));
        }
        if let Some(pattern) = self.pattern.as_ref().filter(|p| !p.is_match(s)) {
            let detail = format!("{name} in body should match '{}'", pattern.as_str());
            errors.push(invalid(name, value, detail));
        }
        if let Some(format) = self.format.filter(|f| !f.accepts(s)) {
            let detail = format!("{name} in body must be of type {}: {s:?}", format.name());
            errors.push(invalid(name, value, detail));
        }
    }

    fn check_array(&self, items: &[Value], name: &str, errors: &mut Vec<FieldError>) {
        let count = items.len() as u64;
        if let Some(max) = self.max_items.filter(|max| count > *max) {
            errors.push(too_many(name, count, max, "items"));
        }
        if let Some(min) = self.min_items.filter(|min| count < *min) {
            let detail = format!("{name} in body should have at least {min} items");
            errors.push(invalid(name, &Value::from(count), detail));
        }
        if self.unique_items
            && items
                .iter()
                .enumerate()
                .any(|(i, a)| items[..i].contains(a))
        {
            // kube-openapi's DuplicateItems carries no value (a CRD may not set it; a
            // schemars `HashSet` does).
            let detail = format!("{name} in body shouldn't contain duplicates");
            errors.push(invalid(name, &Value::String(String::new()), detail));
        }
    }

    fn check_object(&self, map: &Map<String, Value>, name: &str, errors: &mut Vec<FieldError>) {
        let count = map.len() as u64;
        if let Some(max) = self.max_properties.filter(|max| count > *max) {
            errors.push(too_many(name, count, max, "properties"));
        }
        if let Some(min) = self.min_properties.filter(|min| count < *min) {
            let detail = format!("{name} in body should have at least {min} properties");
            errors.push(invalid(name, &Value::from(count), detail));
        }
    }
}

/// The range of the Rust integer type a schemars `format` names.
fn rust_integer_range(format: &str) -> Option<(f64, f64)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "int64" | "int" => (i64::MIN as f64, i64::MAX as f64),
        "uint8" => (0.0, u8::MAX.into()),
        "uint16" => (0.0, u16::MAX.into()),
        "uint32" => (0.0, u32::MAX.into()),
        "uint64" | "uint" => (0.0, u64::MAX as f64),
        _ => return None,
    })
}

/// `field.Invalid(path, value, detail)`.
fn invalid(name: &str, value: &Value, detail: String) -> FieldError {
    FieldError {
        type_: FieldErrorType::Invalid,
        field: name_of(name).to_string(),
        value: Some(render(value)),
        detail,
    }
}

/// `field.TooMany(path, actual, max)`: `Too many: 5: must have at most 3 items`.
fn too_many(name: &str, actual: u64, max: u64, what: &str) -> FieldError {
    let _ = what; // kube words properties as items too
    FieldError {
        type_: FieldErrorType::TooMany,
        field: name_of(name).to_string(),
        value: Some(actual.to_string()),
        detail: format!("must have at most {max} items"),
    }
}

/// The root's name in kube-openapi's sentences is `.`; as a field path it is empty.
fn name_of(name: &str) -> &str {
    if name == "." { "" } else { name }
}

/// A value as Go's field errors print it: strings quoted, numbers and booleans bare.
pub(super) fn render(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// A float64 as Go's `%v` prints it: integral values without a fraction.
fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{}", f as i128)
    } else {
        format!("{f}")
    }
}
