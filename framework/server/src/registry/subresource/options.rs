//! Query parameters to typed options, as kube's parameter codec converts a query into
//! `PodLogOptions`: booleans (`true`/`false`/`1`/`0`, Go's `strconv.ParseBool`), integers,
//! strings, repeated parameters for lists; unknown parameters ignored; a bad value 400.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Options of a subresource that takes none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoOptions {}

/// Decodes `O` from query parameters `pairs` (decoded, in order): what no parameter names
/// keeps `O::default()`'s value. A value that does not convert to its field's type is 400
/// `BadRequest`, as kube answers `?tailLines=abc`.
///
/// ```
/// use extension_apiserver::registry::subresource::decode_options;
/// #[derive(Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// #[serde(rename_all = "camelCase")]
/// struct LogOptions { follow: bool, tail_lines: Option<i64>, container: Option<String> }
/// let pairs = [("follow".to_string(), "1".to_string()), ("tailLines".into(), "10".into())];
/// let o: LogOptions = decode_options(&pairs).unwrap();
/// assert!(o.follow);
/// assert_eq!(o.tail_lines, Some(10));
/// let bad = [("tailLines".to_string(), "ten".to_string())];
/// assert!(decode_options::<LogOptions>(&bad).is_err());
/// ```
pub fn decode_options<O>(pairs: &[(String, String)]) -> Result<O>
where
    O: DeserializeOwned + Default + Serialize + JsonSchema,
{
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<O>();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut object = match serde_json::to_value(O::default()) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    for (name, property) in &properties {
        let values: Vec<&str> = pairs
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect();
        if values.is_empty() {
            continue;
        }
        object.insert(name.clone(), convert(property, &values)?);
    }
    serde_json::from_value(Value::Object(object)).map_err(|e| Error::bad_request(e.to_string()))
}

/// The JSON types a property's schema allows, `null` aside.
fn types(property: &Value) -> Vec<&str> {
    match property.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .filter(|t| *t != "null")
    .collect()
}

/// One property from its values, as kube's `Convert_Slice_string_To_*`: scalars take the
/// first value, lists every one.
fn convert(property: &Value, values: &[&str]) -> Result<Value> {
    let types = types(property);
    if types.contains(&"array") {
        let items = property.get("items").cloned().unwrap_or(Value::Null);
        let converted = values
            .iter()
            .map(|v| scalar(&items, v))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Value::Array(converted));
    }
    scalar(property, values[0])
}

fn scalar(property: &Value, value: &str) -> Result<Value> {
    let types = types(property);
    if types.contains(&"boolean") {
        // Only `0` and `false` (any case) are false; anything else, empty included, is true.
        return Ok(Value::Bool(
            !(value == "0" || value.eq_ignore_ascii_case("false")),
        ));
    }
    if types.contains(&"integer") {
        return value.parse::<i64>().map(Value::from).map_err(|_| {
            Error::bad_request(format!(
                "strconv.ParseInt: parsing {value:?}: invalid syntax"
            ))
        });
    }
    if types.contains(&"number") {
        return value
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| {
                Error::bad_request(format!(
                    "strconv.ParseFloat: parsing {value:?}: invalid syntax"
                ))
            });
    }
    Ok(Value::String(value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct LogOptions {
        follow: bool,
        timestamps: Option<bool>,
        tail_lines: Option<i64>,
        limit_bytes: i64,
        container: Option<String>,
        command: Vec<String>,
    }

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn converts_as_kube() {
        let o: LogOptions = decode_options(&pairs(&[
            ("follow", "TRUE"),
            ("timestamps", ""),
            ("tailLines", "-3"),
            ("container", "c"),
            ("command", "sh"),
            ("command", "-c"),
            ("unknown", "x"),
        ]))
        .unwrap();
        assert!(o.follow);
        assert_eq!(o.timestamps, Some(true));
        assert_eq!(o.tail_lines, Some(-3));
        assert_eq!(o.container.as_deref(), Some("c"));
        assert_eq!(o.command, ["sh", "-c"]);
        let o: LogOptions =
            decode_options(&pairs(&[("follow", "0"), ("timestamps", "False")])).unwrap();
        assert!(!o.follow);
        assert_eq!(o.timestamps, Some(false));
        assert_eq!(
            decode_options::<LogOptions>(&[]).unwrap(),
            LogOptions::default()
        );
    }

    #[test]
    fn a_bad_integer_is_400() {
        let e = decode_options::<LogOptions>(&pairs(&[("tailLines", "ten")])).unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(
            e.to_string().contains(r#"parsing "ten": invalid syntax"#),
            "{e}"
        );
    }
}
