//! Field selectors (`?fieldSelector=`): `field=value`, `field==value`, `field!=value` terms
//! joined by `,`, values escaped with `\`, parsed and printed as kube's `fields` package;
//! plus reading a field's selector value out of a JSON object.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::SelectorError;

/// How a term compares its field with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field path, e.g. `metadata.name` (taken verbatim: no escaping, no trimming).
    pub field: String,
    /// The comparison.
    pub operator: FieldOperator,
    /// The unescaped value.
    pub value: String,
}

impl FieldRequirement {
    /// Whether a field value matches; an absent field counts as `""`, as in kube.
    pub fn matches(&self, actual: Option<&str>) -> bool {
        let equal = actual.unwrap_or("") == self.value;
        match self.operator {
            FieldOperator::Equals => equal,
            FieldOperator::NotEquals => !equal,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// A parsed field selector: the AND of its terms.
///
/// ```
/// use extension_apiserver_machinery::selector::FieldSelector;
/// let s = FieldSelector::parse("spec.reference==a\\,b,metadata.name!=x").unwrap();
/// assert_eq!(s.to_string(), "metadata.name!=x,spec.reference=a\\,b");
/// assert!(s.validate_fields(&["metadata.name"]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches everything (an empty `fieldSelector`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses the `fieldSelector` syntax with kube's error messages. Terms are kept in
    /// the sorted order of their raw text, as kube does, so equal selectors print alike.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, operator, raw_value)) = split_term(term) else {
                return Err(SelectorError::new(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                )));
            };
            let value = unescape_value(raw_value)?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                operator,
                value,
            });
        }
        Ok(Self { requirements })
    }

    /// Whether this selector lets every object through.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The terms, so a store can see which fields are used.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Refuses a selector that uses a field outside `allowed` (the resource's selectable
    /// fields, typically `metadata.name` and `metadata.namespace` plus its own), with
    /// kube's `field label not supported: <field>`.
    pub fn validate_fields(&self, allowed: &[&str]) -> Result<(), SelectorError> {
        match self
            .requirements
            .iter()
            .find(|r| !allowed.contains(&r.field.as_str()))
        {
            Some(r) => Err(SelectorError::new(format!(
                "field label not supported: {}",
                r.field
            ))),
            None => Ok(()),
        }
    }

    /// If every match must have `field` equal to one value, that value (for a store's
    /// fast path on `metadata.name` or `metadata.namespace`).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }

    /// Whether a set of field values matches.
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(fields.get(&r.field).map(String::as_str)))
    }

    /// Whether the field values behind `get` match.
    pub fn matches_with(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(get(&r.field).as_deref()))
    }

    /// Whether a JSON object matches, reading each field with [`field_value`].
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches_with(|f| field_value(object, f))
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::write_joined(f, &self.requirements)
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Splits on commas that are not escaped; the escapes stay in the terms.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in selector.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits a term at its first operator. The field cannot be escaped, so the first `!=`,
/// `==` or `=` wins; `==` is tried before `=` so it does not leave `=` in the value.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    let ops = [
        ("!=", FieldOperator::NotEquals),
        ("==", FieldOperator::Equals),
        ("=", FieldOperator::Equals),
    ];
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        let (op, kind) = ops.iter().find(|(op, _)| rest.starts_with(op))?;
        Some((&term[..i], *kind, &rest[op.len()..]))
    })
}

/// Escapes `\`, `,` and `=` in a value so it can be put in a selector.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Undoes [`escape_value`]; a bare `,` or `=`, or an unknown or dangling escape, is an
/// error worded as kube's.
pub fn unescape_value(raw: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(invalid_escape(&format!("\\{e}"))),
                None => return Err(invalid_escape("\\")),
            },
            // kube prints the rune as its number (Go's %v of a rune).
            ',' | '=' => {
                return Err(SelectorError::new(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                )));
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

fn invalid_escape(sequence: &str) -> SelectorError {
    SelectorError::new(format!(
        "invalid field selector: invalid escape sequence: {sequence}"
    ))
}

/// The value a field selector sees for `path` (dotted, e.g. `metadata.name`,
/// `spec.reference`) in a JSON object: strings as they are, booleans `true` / `false`,
/// numbers as Go prints them. Absent, null, arrays and objects give `None`, which
/// selectors treat as `""` (kube only lets scalar fields be selectable).
pub fn field_value(object: &Value, path: &str) -> Option<String> {
    let value = path.split('.').try_fold(object, |v, key| v.get(key))?;
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(crate::runtime::jsonpath::go_number_text(n)),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_prints() {
        for (input, printed) in [
            ("", ""),
            ("a=b", "a=b"),
            ("a==b", "a=b"),
            ("a!=b", "a!=b"),
            ("b=c,a=b", "a=b,b=c"),
            ("a=", "a="),
            (",a=b,,", "a=b"),
            ("x=a\\,b", "x=a\\,b"),
            ("x=a\\=b\\\\", "x=a\\=b\\\\"),
            (
                "metadata.name=foo,metadata.namespace!=bar",
                "metadata.name=foo,metadata.namespace!=bar",
            ),
        ] {
            assert_eq!(parse(input).to_string(), printed, "{input:?}");
        }
    }

    #[test]
    fn splits_terms_and_values() {
        let s = parse("x=a\\,b,y!=c\\=d,z==\\\\");
        let got: Vec<(&str, FieldOperator, &str)> = s
            .requirements()
            .iter()
            .map(|r| (r.field.as_str(), r.operator, r.value.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("x", FieldOperator::Equals, "a,b"),
                ("y", FieldOperator::NotEquals, "c=d"),
                ("z", FieldOperator::Equals, "\\"),
            ]
        );
        // Spaces are data, not separators.
        assert_eq!(parse(" a = b ").requirements()[0].field, " a ");
        // The first operator wins, since the field cannot be escaped.
        let s = parse("a=!b");
        let r = &s.requirements()[0];
        assert_eq!(
            (r.field.as_str(), r.operator, r.value.as_str()),
            ("a", FieldOperator::Equals, "!b")
        );
        assert!(FieldSelector::parse("a!==b").is_err());
    }

    #[test]
    fn errors_are_kubes() {
        let e = |s: &str| FieldSelector::parse(s).unwrap_err().to_string();
        assert_eq!(e("a"), "invalid selector: 'a'; can't understand 'a'");
        assert_eq!(
            e("x=y,b"),
            "invalid selector: 'x=y,b'; can't understand 'b'"
        );
        assert_eq!(
            e("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            e("a=b\\c"),
            "invalid field selector: invalid escape sequence: \\c"
        );
        assert_eq!(
            e("a=b\\"),
            "invalid field selector: invalid escape sequence: \\"
        );
    }

    #[test]
    fn escape_round_trip() {
        for v in ["", "plain", "a,b", "a=b", "a\\b", "\\,=\\"] {
            assert_eq!(unescape_value(&escape_value(v)).unwrap(), v);
        }
        assert_eq!(escape_value("a,b=c\\"), "a\\,b\\=c\\\\");
    }

    #[test]
    fn matching() {
        let f = fields(&[("metadata.name", "foo"), ("spec.x", "")]);
        assert!(parse("").matches(&f));
        assert!(parse("metadata.name=foo").matches(&f));
        assert!(parse("metadata.name==foo,spec.x=").matches(&f));
        assert!(parse("metadata.name!=bar").matches(&f));
        assert!(!parse("metadata.name!=foo").matches(&f));
        assert!(!parse("metadata.name=bar").matches(&f));
        // An absent field is "".
        assert!(parse("spec.missing=").matches(&f));
        assert!(parse("spec.missing!=x").matches(&f));
        assert!(!parse("spec.missing=x").matches(&f));
    }

    #[test]
    fn field_support_check() {
        let s = parse("metadata.name=a,spec.foo=b");
        assert_eq!(
            s.validate_fields(&["metadata.name", "metadata.namespace"])
                .unwrap_err()
                .to_string(),
            "field label not supported: spec.foo"
        );
        assert!(s.validate_fields(&["metadata.name", "spec.foo"]).is_ok());
        assert!(FieldSelector::everything().validate_fields(&[]).is_ok());
    }

    #[test]
    fn exact_match_introspection() {
        let s = parse("metadata.namespace=ns,metadata.name!=x");
        assert_eq!(s.requires_exact_match("metadata.namespace"), Some("ns"));
        assert_eq!(s.requires_exact_match("metadata.name"), None);
    }

    #[test]
    fn values_from_json() {
        let obj = json!({"metadata": {"name": "n"}, "spec": {"reference": "r", "on": true, "off": false,
            "count": 3, "neg": -7, "ratio": 0.5, "big": 1.5e7, "nil": null, "list": [1], "obj": {}}});
        assert_eq!(field_value(&obj, "metadata.name").as_deref(), Some("n"));
        assert_eq!(field_value(&obj, "spec.reference").as_deref(), Some("r"));
        assert_eq!(field_value(&obj, "spec.on").as_deref(), Some("true"));
        assert_eq!(field_value(&obj, "spec.off").as_deref(), Some("false"));
        assert_eq!(field_value(&obj, "spec.count").as_deref(), Some("3"));
        assert_eq!(field_value(&obj, "spec.neg").as_deref(), Some("-7"));
        assert_eq!(field_value(&obj, "spec.ratio").as_deref(), Some("0.5"));
        assert_eq!(field_value(&obj, "spec.big").as_deref(), Some("1.5e+07"));
        for absent in [
            "spec.nil",
            "spec.list",
            "spec.obj",
            "spec.missing",
            "status.x",
            "metadata.name.x",
        ] {
            assert_eq!(field_value(&obj, absent), None, "{absent}");
        }
        assert!(parse("spec.on=true,spec.count=3,spec.nil=").matches_object(&obj));
        assert!(!parse("spec.on=false").matches_object(&obj));
    }
}
