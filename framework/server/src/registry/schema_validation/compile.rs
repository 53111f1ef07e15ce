//! A JSON schema (schemars', 2020-12, `$ref`s into its `$defs`) to the tree of
//! [`Node`](super::Node)s that have something to check, once per type at start.

use serde_json::{Map, Value};

use super::error::SchemaError;
use super::rules::{self, Rule};
use super::{Node, join};

/// Deepest nesting of schemas followed; a type that contains itself stops there.
const MAX_DEPTH: usize = 48;

pub(super) fn compile(document: &Value) -> Result<Node, SchemaError> {
    let mut compiler = Compiler {
        document,
        stack: Vec::new(),
        total_cost: 0,
    };
    let mut root = Node::default();
    compiler.merge(&mut root, document, "", 0, false)?;
    // kube's structural schema keeps of `metadata` at the root only name and generateName,
    // which ObjectMeta's own validation checks: the type's schema of it is not enforced.
    root.properties.retain(|(k, _)| k != "metadata");
    Ok(root)
}

struct Compiler<'a> {
    document: &'a Value,
    /// The `$ref`s being followed, to stop at a type that contains itself.
    stack: Vec<&'a str>,
    /// The estimated cost of every rule so far (kube's per-CRD limit).
    total_cost: u64,
}

impl<'a> Compiler<'a> {
    /// Adds what `schema` checks at `path` to `node`; `named`: the schema is a definition
    /// (a Rust type of its own) reached through a `$ref`.
    fn merge(
        &mut self,
        node: &mut Node,
        schema: &'a Value,
        path: &str,
        depth: usize,
        named: bool,
    ) -> Result<(), SchemaError> {
        let Some(object) = schema.as_object() else {
            return Ok(());
        };
        if depth > MAX_DEPTH {
            return Ok(());
        }
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            if let Some(target) = self.target(reference) {
                self.stack.push(reference);
                self.merge(node, target, path, depth + 1, true)?;
                self.stack.pop();
            }
        }
        for branch in array(object, "allOf") {
            self.merge(node, branch, path, depth + 1, named)?;
        }
        // schemars writes `Option<T>` as `anyOf: [T, null]`: T is the schema of the value.
        for key in ["anyOf", "oneOf"] {
            let branches: Vec<&Value> = array(object, key).filter(|b| !self.only_null(b)).collect();
            if let [branch] = branches[..] {
                self.merge(node, branch, path, depth + 1, named)?;
            }
        }
        if node.type_.is_empty() {
            node.type_ = type_of(object);
        }
        node.limits.merge(object, !named, path)?;
        for (i, rule) in array(object, "x-kubernetes-validations").enumerate() {
            let rule = Rule::compile(rule, i, path, &self.sizes(schema))?;
            self.total_cost = self.total_cost.saturating_add(rule.estimated_cost());
            if self.total_cost > rules::TOTAL_COST_LIMIT {
                return Err(SchemaError::new(
                    path,
                    rules::total_cost_message(self.total_cost),
                ));
            }
            node.reads.merge(rule.reads().clone());
            node.rules.push(rule);
        }
        if let Some(properties) = object.get("properties").and_then(Value::as_object) {
            for (key, member) in properties {
                let child = self.child(member, &join(path, key), depth)?;
                if !child.is_empty() {
                    node.properties.push((key.clone(), child));
                }
            }
        }
        if let Some(additional) = object.get("additionalProperties").filter(|a| a.is_object()) {
            let child = self.child(additional, &join(path, "*"), depth)?;
            node.additional = (!child.is_empty()).then(|| Box::new(child));
        }
        if let Some(items) = object.get("items").filter(|i| i.is_object()) {
            let child = self.child(items, &format!("{path}[*]"), depth)?;
            node.items = (!child.is_empty()).then(|| Box::new(child));
        }
        Ok(())
    }

    fn child(&mut self, schema: &'a Value, path: &str, depth: usize) -> Result<Node, SchemaError> {
        let mut node = Node::default();
        self.merge(&mut node, schema, path, depth + 1, false)?;
        Ok(node)
    }

    /// The definition `reference` names, unless it is being followed already.
    fn target(&self, reference: &'a str) -> Option<&'a Value> {
        if self.stack.contains(&reference) {
            return None;
        }
        self.document.pointer(reference.strip_prefix('#')?)
    }

    fn only_null(&self, schema: &Value) -> bool {
        resolve(self.document, schema)
            .get("type")
            .and_then(Value::as_str)
            == Some("null")
    }

    fn sizes(&self, schema: &'a Value) -> SchemaSizes<'a> {
        SchemaSizes {
            document: self.document,
            schema,
        }
    }
}

/// The largest sizes a schema allows (`maxLength`, `maxItems`, `maxProperties`), for the
/// estimated cost of the rules on its node.
pub(super) struct SchemaSizes<'a> {
    document: &'a Value,
    schema: &'a Value,
}

impl extension_apiserver_machinery::cel::cost::Sizes for SchemaSizes<'_> {
    fn max_size(&self, path: &[&str]) -> Option<u64> {
        let mut at = resolve(self.document, self.schema);
        for segment in path.iter().skip(1) {
            // `[]` is a list's items or a map's values.
            let next = if *segment == "[]" {
                at.get("items").or_else(|| at.get("additionalProperties"))
            } else {
                at.get("properties")
                    .and_then(|p| p.get(*segment))
                    .or_else(|| at.get("additionalProperties"))
            };
            at = resolve(self.document, next?);
        }
        // A string's size is its bytes: up to four per character of `maxLength`, as kube
        // sizes it.
        if let Some(length) = at.get("maxLength").and_then(Value::as_u64) {
            return Some(extension_apiserver_machinery::cel::cost::string_size(
                length,
            ));
        }
        ["maxItems", "maxProperties"]
            .iter()
            .find_map(|k| at.get(*k).and_then(Value::as_u64))
    }
}

/// `schema` with its `$ref` followed and `Option`'s `anyOf` unwrapped.
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..MAX_DEPTH {
        if let Some(target) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|p| document.pointer(p))
        {
            schema = target;
            continue;
        }
        let branch = ["anyOf", "oneOf"].iter().find_map(|key| {
            let branches = schema.get(*key)?.as_array()?;
            let mut real = branches
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"));
            let first = real.next()?;
            real.next().is_none().then_some(first)
        });
        match branch {
            Some(branch) => schema = branch,
            None => break,
        }
    }
    schema
}

fn array<'a>(object: &'a Map<String, Value>, key: &str) -> impl Iterator<Item = &'a Value> {
    object
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The schema's type, as rule errors name it (`type: [integer, null]` is `integer`).
fn type_of(object: &Map<String, Value>) -> &'static str {
    let name = match object.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    };
    match name {
        Some("object") => "object",
        Some("array") => "array",
        Some("string") => "string",
        Some("integer") => "integer",
        Some("number") => "number",
        Some("boolean") => "boolean",
        _ => "",
    }
}
