//! What CEL needs for MutatingAdmissionPolicy beyond the admission environment (kube's
//! `mutation/dynamic` object types and `library.JSONPatch`): the struct literals `Object{…}`,
//! `Object.spec{…}` (any path below `Object`) and `JSONPatch{op:, path:, value:, from:}`, and
//! `jsonpatch.escapeKey`.
//!
//! kube types `Object.<path>` from the matched type's schema; here a literal of one of these
//! types makes a plain CEL map of its fields (what the patch needs: its JSON), so the names
//! are declared by scanning the expression for them ([`struct_type_names`]).

use std::collections::{BTreeMap, HashMap};

use cel::common::types::{STRING_TYPE, Type};
use cel::common::value::{CowVal, Val};
use cel::objects::Key;
use cel::{ExecutionError, StructType, Value};

use super::library::{op, string_arg};

/// The functions this module adds, for the compile-time check of unknown functions.
pub const FUNCTIONS: &[&str] = &["jsonpatch.escapeKey"];

/// A struct type of the mutation environment: a literal makes a map of its fields.
struct ObjectType(Type);

impl StructType for ObjectType {
    fn get_type(&self) -> &Type {
        &self.0
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut map: HashMap<Key, Value> = HashMap::with_capacity(fields.len());
        for (name, value) in fields {
            map.insert(Key::from(name), Value::try_from(value.as_ref())?);
        }
        let value: Box<dyn Val> = Value::from(map).try_into()?;
        Ok(value)
    }
}

/// The struct type names `source` may construct: `JSONPatch`, `Object`, and each
/// `Object.a.b` followed by `{` (a mention inside a string literal only declares one more).
pub fn struct_type_names(source: &str) -> Vec<String> {
    let mut names = vec!["JSONPatch".to_string(), "Object".to_string()];
    let bytes = source.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    for (at, _) in source.match_indices("Object.") {
        if at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b'.') {
            continue;
        }
        let mut end = at + "Object".len();
        while end < bytes.len() && bytes[end] == b'.' {
            let start = end + 1;
            let mut stop = start;
            while stop < bytes.len() && ident(bytes[stop]) {
                stop += 1;
            }
            if stop == start {
                break;
            }
            end = stop;
        }
        let rest = source[end..].trim_start();
        let name = &source[at..end];
        if rest.starts_with('{') && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// Declares the struct types `names` and `jsonpatch.escapeKey` in `env`.
pub fn install(env: &mut cel::Env, names: &[String]) {
    for name in names {
        // A name that is not a qualified identifier was not found by the scan.
        env.add_type(ObjectType(Type::new_struct(name.clone())))
            .ok();
    }
    let escape: cel::common::functions::Function = op!(escape_key);
    env.add_overload(
        "jsonpatch.escapeKey",
        "k8s_jsonpatch_escapeKey_string",
        vec![STRING_TYPE],
        escape,
    )
    .expect("jsonpatch.escapeKey is declared once");
}

/// kube's `jsonpatch.escapeKey`: a map key as one JSON pointer token (RFC 6901).
fn escape_key(args: &[Value]) -> Result<Value, ExecutionError> {
    let key = string_arg("jsonpatch.escapeKey", args, 0)?;
    Ok(Value::String(
        key.replace('~', "~0").replace('/', "~1").into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::convert::to_json;
    use crate::cel::cost::Budget;
    use crate::cel::{Activation, Environment};
    use serde_json::json;

    fn evaluate(source: &str) -> serde_json::Value {
        let env = Environment::for_mutation(&["object"], source, |_| {});
        let expression = env.compile(source).unwrap();
        let activation = Activation::new().with_json("object", &json!({"spec": {"n": 1}}));
        let value = expression
            .evaluate(&activation, &mut Budget::admission())
            .unwrap();
        to_json(&value).unwrap()
    }

    #[test]
    fn object_literals_are_maps() {
        let source = "Object{spec: Object.spec{n: object.spec.n + 1, tags: ['a']}}";
        assert_eq!(
            struct_type_names(source),
            ["JSONPatch", "Object", "Object.spec"]
        );
        assert_eq!(evaluate(source), json!({"spec": {"n": 2, "tags": ["a"]}}));
    }

    #[test]
    fn json_patches_and_escaped_keys() {
        let source = "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b~c'), value: 'x'}]";
        assert_eq!(
            evaluate(source),
            json!([{"op": "add", "path": "/metadata/labels/a~1b~0c", "value": "x"}])
        );
    }
}
