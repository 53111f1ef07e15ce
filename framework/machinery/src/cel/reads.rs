//! What an expression reads of its variables, found in its syntax tree once, when it is
//! compiled: a rule that reads `self.spec.reference` needs of `self` only that field, so
//! a caller converts only that much of a JSON object to CEL for each evaluation
//! ([`from_json_read`]) instead of the whole object.
//!
//! A variable used in any other way than a chain of field selections (`self == oldSelf`,
//! `self.all(…)`, `self[k]`, `self.?a`, `size(self.spec)`) is read whole from the end of
//! that chain: what the expression does with a value it sees whole is the same as with
//! the whole object, and the maps on the way hold every field selected through them.

use std::collections::BTreeMap;

use cel::Value;
use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use super::Expression;
use super::convert::{from_json, string_map};

/// What an expression reads of a value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Reads {
    /// Nothing: the value is not used.
    #[default]
    Nothing,
    /// The whole value.
    Whole,
    /// Only these fields of a map (and of each what is read of it).
    Fields(BTreeMap<String, Reads>),
}

impl Reads {
    /// What `expression` reads of `variable`.
    ///
    /// ```
    /// use extension_apiserver_machinery::cel::{Environment, reads::Reads};
    ///
    /// let env = Environment::new(&["self", "oldSelf"]);
    /// let rule = env.compile("!has(self.spec.a) || self.spec.b != ''").unwrap();
    /// let reads = Reads::of(&rule, "self");
    /// assert_eq!(reads.field("spec").and_then(|s| s.field("b")), Some(&Reads::Whole));
    /// assert_eq!(reads.field("status"), None);
    /// let rule = env.compile("self == oldSelf").unwrap();
    /// assert_eq!(Reads::of(&rule, "oldSelf"), Reads::Whole);
    /// ```
    pub fn of(expression: &Expression, variable: &str) -> Reads {
        let mut reads = Reads::Nothing;
        let mut walk = Walk {
            variable,
            shadowed: 0,
            reads: &mut reads,
        };
        walk.expr(expression.ided());
        reads
    }

    /// What `self` or `other` reads.
    pub fn merge(&mut self, other: Reads) {
        match (&mut *self, other) {
            (Reads::Whole, _) | (_, Reads::Nothing) => {}
            (_, Reads::Whole) => *self = Reads::Whole,
            (Reads::Nothing, other) => *self = other,
            (Reads::Fields(mine), Reads::Fields(theirs)) => {
                for (name, reads) in theirs {
                    mine.entry(name).or_default().merge(reads);
                }
            }
        }
    }

    /// What is read of field `name` of a map read as `self`: `None` when nothing is.
    pub fn field(&self, name: &str) -> Option<&Reads> {
        match self {
            Reads::Nothing => None,
            Reads::Whole => Some(&Reads::Whole),
            Reads::Fields(fields) => fields.get(name),
        }
    }

    /// Adds the read of the value at `path` (whole).
    fn add(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            *self = Reads::Whole;
            return;
        };
        match self {
            Reads::Whole => {}
            Reads::Nothing => {
                *self = Reads::Fields(BTreeMap::new());
                self.add(path);
            }
            Reads::Fields(fields) => fields.entry(first.to_string()).or_default().add(rest),
        }
    }
}

/// The CEL value of as much of `value` as `reads` says is read: the same as
/// [`from_json`] for every expression `reads` was found of. What is not read is left out
/// of maps (and a value not read at all is `null`).
pub fn from_json_read(value: &serde_json::Value, reads: &Reads) -> Value {
    match (reads, value) {
        (Reads::Nothing, _) => Value::Null,
        (Reads::Fields(fields), serde_json::Value::Object(map)) => {
            string_map(fields.iter().filter_map(|(name, reads)| {
                let value = map.get(name)?;
                Some((name.clone(), from_json_read(value, reads)))
            }))
        }
        // A field selected of what is no map fails as on the whole value.
        _ => from_json(value),
    }
}

/// One walk of a syntax tree for the reads of one variable.
struct Walk<'a> {
    variable: &'a str,
    /// How many comprehensions in scope name a variable as `variable`.
    shadowed: usize,
    reads: &'a mut Reads,
}

impl Walk<'_> {
    fn expr(&mut self, expr: &IdedExpr) {
        match &expr.expr {
            Expr::Ident(name) => {
                if self.is_variable(name) {
                    *self.reads = Reads::Whole;
                }
            }
            Expr::Select(select) => match self.chain(expr) {
                Some(path) => self.reads.add(&path),
                None => self.expr(&select.operand),
            },
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.expr(target);
                }
                call.args.iter().for_each(|a| self.expr(a));
            }
            Expr::List(list) => list.elements.iter().for_each(|e| self.expr(e)),
            Expr::Map(map) => map.entries.iter().for_each(|e| self.entry(&e.expr)),
            Expr::Struct(s) => s.entries.iter().for_each(|e| self.entry(&e.expr)),
            Expr::Comprehension(comp) => {
                self.expr(&comp.iter_range);
                self.expr(&comp.accu_init);
                let names = [
                    Some(&comp.iter_var),
                    comp.iter_var2.as_ref(),
                    Some(&comp.accu_var),
                ];
                let shadows = names
                    .iter()
                    .flatten()
                    .filter(|n| n.as_str() == self.variable)
                    .count();
                self.shadowed += shadows;
                self.expr(&comp.loop_cond);
                self.expr(&comp.loop_step);
                self.expr(&comp.result);
                self.shadowed -= shadows;
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entry(&mut self, entry: &EntryExpr) {
        match entry {
            EntryExpr::StructField(field) => self.expr(&field.value),
            EntryExpr::MapEntry(entry) => {
                self.expr(&entry.key);
                self.expr(&entry.value);
            }
        }
    }

    fn is_variable(&self, name: &str) -> bool {
        self.shadowed == 0 && name == self.variable
    }

    /// The fields of a chain of selections from the variable (`self.spec.a`, or
    /// `has(self.spec.a)`), outermost last.
    fn chain<'e>(&self, expr: &'e IdedExpr) -> Option<Vec<&'e str>> {
        let mut fields = Vec::new();
        let mut at = expr;
        loop {
            match &at.expr {
                Expr::Select(select) => {
                    fields.push(select.field.as_str());
                    at = &select.operand;
                }
                Expr::Ident(name) if self.is_variable(name) => {
                    fields.reverse();
                    return Some(fields);
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{Activation, Environment, cost::Budget};
    use serde_json::json;

    fn reads(source: &str) -> Reads {
        let env = Environment::new(&["self", "oldSelf"]);
        let expression = env.compile(source).unwrap();
        let mut reads = Reads::of(&expression, "self");
        reads.merge(Reads::of(&expression, "oldSelf"));
        reads
    }

    fn fields(pairs: &[(&str, Reads)]) -> Reads {
        Reads::Fields(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn chains_of_fields_are_read_alone() {
        assert_eq!(
            reads("!has(self.spec.a) || (self.spec.b != '' && self.status.c > 1)"),
            fields(&[
                ("spec", fields(&[("a", Reads::Whole), ("b", Reads::Whole)])),
                ("status", fields(&[("c", Reads::Whole)])),
            ])
        );
        assert_eq!(reads("1 == 1"), Reads::Nothing);
    }

    #[test]
    fn any_other_use_reads_the_whole_value_there() {
        let whole = |field: &str| fields(&[(field, Reads::Whole)]);
        let cases = [
            ("self.spec == oldSelf.spec", whole("spec")),
            ("self.spec.a == 1 && size(self.spec) > 0", whole("spec")),
            ("self.?spec.orValue(1) == 1", Reads::Whole),
            ("self['spec'] == 1", Reads::Whole),
            ("self.items.all(i, i.x > 0)", whole("items")),
            ("self.a.all(i, i > 0) && self.a.b == 1", whole("a")),
            // A comprehension's own `self` is not the variable.
            ("[1].all(self, self > 0)", Reads::Nothing),
        ];
        for (source, want) in cases {
            assert_eq!(reads(source), want, "{source}");
        }
    }

    /// Evaluating on what is read gives what evaluating on the whole value gives.
    #[test]
    fn the_values_read_evaluate_as_the_whole() {
        let env = Environment::new(&["self", "oldSelf"]);
        let object = json!({
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"a": 1, "b": "", "list": [1, 2, 3], "map": {"k": "v"}},
            "status": "no map",
        });
        for source in [
            "!has(self.spec.a) || self.spec.b != ''",
            "has(self.spec.c) || self.spec.list.all(i, i > 0)",
            "self.spec.map == {'k': 'v'} && self.spec.map.k == 'v'",
            "self.status.x == 1",
            "size(self.spec) == 4",
            "self.spec == oldSelf.spec && self.metadata.name == 'a'",
            "has(self.nope) || self.nope.x == 1",
        ] {
            let expression = env.compile(source).unwrap();
            let mut read = Reads::of(&expression, "self");
            read.merge(Reads::of(&expression, "oldSelf"));
            let run = |value: Value| {
                let activation = Activation::new()
                    .with("self", value.clone())
                    .with("oldSelf", value);
                expression
                    .evaluate(&activation, &mut Budget::admission())
                    .map_err(|e| e.to_string())
            };
            assert_eq!(
                run(from_json_read(&object, &read)),
                run(from_json(&object)),
                "{source}"
            );
        }
    }
}
