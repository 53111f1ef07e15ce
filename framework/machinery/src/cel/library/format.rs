//! kube's format library (`library/format.go`): named formats (`format.dns1123Label()`,
//! `format.named('uuid')`, …) whose `validate(string)` is an optional list of the
//! failures, none when the string is valid, worded as kube's validators word them.

use std::sync::Arc;

use base64::Engine as _;
use cel::common::types::{STRING_TYPE, Type};
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};

use super::{global, member, op, opaque_arg, optional, string_arg, urls::Url};
use crate::validation;

/// The CEL type name of a format (kube's `kubernetes.NamedFormat`).
pub(crate) const FORMAT_TYPE: &str = "kubernetes.NamedFormat";

/// The formats, by name.
const FORMATS: &[&str] = &[
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// The largest regex kube assumes a format to run (`MaxRegexSize`), for cost.
pub(crate) fn max_regex_size(name: &str) -> u64 {
    match name {
        "dns1123Label" | "dns1035Label" | "dns1123LabelPrefix" | "dns1035LabelPrefix" => 30,
        "dns1123Subdomain" | "qualifiedName" | "dns1123SubdomainPrefix" => 60,
        "labelValue" => 40,
        // govalidator's URL regex, strfmt's patterns
        "uri" => 2083,
        "uuid" => 90,
        "byte" => 71,
        _ => 65,
    }
}

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let format = Type::new_opaque_type(FORMAT_TYPE);
    for name in FORMATS {
        let function = format!("format.{name}");
        global(env, &function, &[], format_op(name))?;
    }
    global(env, "format.named", &[STRING_TYPE], op!(named))?;
    member(env, "validate", &format, &[STRING_TYPE], op!(validate))?;
    Ok(())
}

/// The overload of `format.<name>()`: one function a format, as an overload is a plain
/// function pointer.
fn format_op(name: &str) -> cel::common::functions::Function {
    macro_rules! constant {
        ($name:literal) => {
            op!(|_: &[Value]| -> Result<Value, ExecutionError> { Ok(value($name)) })
        };
    }
    match name {
        "dns1123Label" => constant!("dns1123Label"),
        "dns1123Subdomain" => constant!("dns1123Subdomain"),
        "dns1035Label" => constant!("dns1035Label"),
        "qualifiedName" => constant!("qualifiedName"),
        "dns1123LabelPrefix" => constant!("dns1123LabelPrefix"),
        "dns1123SubdomainPrefix" => constant!("dns1123SubdomainPrefix"),
        "dns1035LabelPrefix" => constant!("dns1035LabelPrefix"),
        "labelValue" => constant!("labelValue"),
        "uri" => constant!("uri"),
        "uuid" => constant!("uuid"),
        "byte" => constant!("byte"),
        "date" => constant!("date"),
        _ => constant!("datetime"),
    }
}

/// A named format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Format {
    pub(crate) name: &'static str,
}

impl Opaque for Format {
    fn runtime_type_name(&self) -> &str {
        FORMAT_TYPE
    }
}

fn value(name: &'static str) -> Value {
    Value::Opaque(Arc::new(Format { name }))
}

fn named(args: &[Value]) -> Result<Value, ExecutionError> {
    let name = string_arg("format.named", args, 0)?;
    Ok(optional(
        FORMATS.iter().find(|f| **f == name).map(|f| value(f)),
    ))
}

fn validate(args: &[Value]) -> Result<Value, ExecutionError> {
    let format = opaque_arg::<Format>("validate", args, 0)?;
    let text = string_arg("validate", args, 1)?;
    let errors = check(format.name, text);
    Ok(optional((!errors.is_empty()).then(|| {
        Value::List(
            errors
                .into_iter()
                .map(|e| Value::String(e.into()))
                .collect::<Vec<_>>()
                .into(),
        )
    })))
}

/// The failures of `text` against the format `name`.
fn check(name: &str, text: &str) -> Vec<String> {
    let one = |ok: bool, message: &str| {
        if ok {
            Vec::new()
        } else {
            vec![message.to_string()]
        }
    };
    match name {
        "dns1123Label" => validation::name_is_dns_label(text, false),
        "dns1123LabelPrefix" => validation::name_is_dns_label(text, true),
        "dns1123Subdomain" => validation::name_is_dns_subdomain(text, false),
        "dns1123SubdomainPrefix" => validation::name_is_dns_subdomain(text, true),
        "dns1035Label" => validation::name_is_dns1035_label(text, false),
        "dns1035LabelPrefix" => validation::name_is_dns1035_label(text, true),
        "qualifiedName" => validation::is_qualified_name(text),
        "labelValue" => validation::is_valid_label_value(text),
        "uri" => Url::parse(text).err().into_iter().collect(),
        "uuid" => one(is_uuid(text), "does not match the UUID format"),
        "byte" => one(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_ok(),
            "invalid base64",
        ),
        "date" => one(is_date(text), "invalid date"),
        _ => one(text.parse::<jiff::Timestamp>().is_ok(), "invalid datetime"),
    }
}

/// strfmt's UUID: hyphenated 8-4-4-4-12 or 32 hex digits, any case.
fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    match b.len() {
        32 => b.iter().all(u8::is_ascii_hexdigit),
        36 => b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

/// RFC 3339's full-date, `2006-01-02`, a real day.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && s.parse::<jiff::civil::Date>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_true, eval};
    use cel::Value;

    /// Cases of kube's `library/format_test.go`.
    #[test]
    fn kube_format_cases() {
        assert_true(&[
            "format.dns1123Label().validate('my-name') == optional.none()",
            "format.dns1123Label().validate('My-Name').hasValue()",
            "format.dns1123Subdomain().validate('example.com') == optional.none()",
            "format.dns1035Label().validate('1abc').hasValue()",
            "format.dns1035Label().validate('abc') == optional.none()",
            "format.dns1123LabelPrefix().validate('my-name-') == optional.none()",
            "format.qualifiedName().validate('example.com/MyName') == optional.none()",
            "format.labelValue().validate('') == optional.none()",
            "format.labelValue().validate('-a').hasValue()",
            "format.uri().validate('https://example.com/a') == optional.none()",
            "format.uri().validate('example').hasValue()",
            "format.uuid().validate('123e4567-e89b-12d3-a456-426614174000') == optional.none()",
            "format.uuid().validate('123').value() == ['does not match the UUID format']",
            "format.byte().validate('aGVsbG8=') == optional.none()",
            "format.byte().validate('!!').value() == ['invalid base64']",
            "format.date().validate('2024-02-29') == optional.none()",
            "format.date().validate('2023-02-29').value() == ['invalid date']",
            "format.datetime().validate('2024-01-02T03:04:05Z') == optional.none()",
            "format.datetime().validate('yesterday').value() == ['invalid datetime']",
            "format.named('dns1123Label').hasValue()",
            "!format.named('unknown').hasValue()",
            "format.named('dns1123Label').value() == format.dns1123Label()",
            "format.named('uuid').value().validate('x').hasValue()",
        ]);
    }

    #[test]
    fn a_failure_is_worded_as_kube_words_it() {
        let errors = eval("format.dns1123Label().validate('My_Name').value()").unwrap();
        let Value::List(errors) = errors else {
            panic!("{errors:?}")
        };
        assert_eq!(
            errors[0],
            Value::String(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
                 or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                    .to_string()
                    .into()
            )
        );
    }
}
