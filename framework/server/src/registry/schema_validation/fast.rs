//! Rules simple enough to be decided on the JSON itself, without converting `self` for
//! cel-rust: field selections of `self`, `has()`, string, boolean and integer literals, `==`,
//! `!=`, `!`, `&&` and `||` — the shape of most `x-kubernetes-validations` rules that say
//! which fields go together (wardle's two rules are sample-apiserver's `ValidateFlunderSpec`
//! in this shape).
//!
//! The answer must be cel-rust's, on the value [`cel_view`](super::rules) would have given
//! it: a JSON string, boolean, integer (`as_i64`) or map as CEL's, and at the resource's root
//! a `metadata` holding only `name` and `generateName`. So [`Fast::decide`] gives a boolean
//! only where every step it took is certain: a comparison of two values of one of those
//! kinds, a selection of a field a map has, `&&` and `||` from left to right. Anything else —
//! a missing field, a value of another kind (a double, a list, `null`), a comparison across
//! kinds — leaves the rule undecided, and cel-rust evaluates it as before, with its own
//! error or answer. Only rules whose cost does not depend on the values are taken, so that
//! the budget is charged what cel-rust's evaluation would have charged.

use cel::IdedExpr;
use cel::common::ast::{Expr, LiteralValue, operators};
use serde_json::Value;

/// The deepest rule taken (a recursion of this depth at most, far below the stack's).
const MAX_DEPTH: usize = 32;

/// A rule in the shape [`Fast`] decides.
#[derive(Debug)]
pub(super) struct Fast(Node);

#[derive(Debug)]
enum Node {
    /// `self`.
    This,
    /// `operand.field`.
    Select(Box<Node>, String),
    /// `has(operand.field)`.
    Has(Box<Node>, String),
    String(String),
    Bool(bool),
    Int(i64),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Equal(Box<Node>, Box<Node>),
    NotEqual(Box<Node>, Box<Node>),
}

/// A value met on the way: part of the JSON, or a literal.
#[derive(Clone, Copy)]
enum Seen<'a> {
    /// A part of the object; `meta` when it is the root's `metadata`, of which a rule sees
    /// only `name` and `generateName`.
    Json {
        value: &'a Value,
        meta: bool,
    },
    String(&'a str),
    Bool(bool),
    Int(i64),
}

/// A scalar, as CEL compares it.
#[derive(PartialEq)]
enum Scalar<'a> {
    String(&'a str),
    Bool(bool),
    Int(i64),
}

impl Fast {
    /// `expression` as a fast rule of `self`, if it has the shape.
    pub(super) fn of(expression: &IdedExpr) -> Option<Self> {
        node(expression, 0).map(Self)
    }

    /// The rule's answer on `value`, when it is certain (`root`: the resource itself);
    /// `None` leaves it to cel-rust.
    pub(super) fn decide(&self, value: &Value, root: bool) -> Option<bool> {
        let this = Seen::Json { value, meta: false };
        boolean(evaluate(&self.0, this, root)?)
    }
}

fn node(expression: &IdedExpr, depth: usize) -> Option<Node> {
    if depth > MAX_DEPTH {
        return None;
    }
    let boxed = |e: &IdedExpr| node(e, depth + 1).map(Box::new);
    Some(match &expression.expr {
        Expr::Ident(name) if name == "self" => Node::This,
        Expr::Select(select) if select.test => {
            Node::Has(boxed(&select.operand)?, select.field.clone())
        }
        Expr::Select(select) => Node::Select(boxed(&select.operand)?, select.field.clone()),
        Expr::Literal(LiteralValue::String(s)) => Node::String(s.inner().to_string()),
        Expr::Literal(LiteralValue::Boolean(b)) => Node::Bool(*b.inner()),
        Expr::Literal(LiteralValue::Int(i)) => Node::Int(*i.inner()),
        Expr::Call(call) if call.target.is_none() => {
            match (call.func_name.as_str(), &call.args[..]) {
                (operators::LOGICAL_NOT, [operand]) => Node::Not(boxed(operand)?),
                (operators::LOGICAL_AND, [left, right]) => Node::And(boxed(left)?, boxed(right)?),
                (operators::LOGICAL_OR, [left, right]) => Node::Or(boxed(left)?, boxed(right)?),
                (operators::EQUALS, [left, right]) => Node::Equal(boxed(left)?, boxed(right)?),
                (operators::NOT_EQUALS, [left, right]) => {
                    Node::NotEqual(boxed(left)?, boxed(right)?)
                }
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// `node`'s value, when certain.
fn evaluate<'a>(node: &'a Node, this: Seen<'a>, root: bool) -> Option<Seen<'a>> {
    let bool_of = |node: &'a Node| boolean(evaluate(node, this, root)?);
    Some(match node {
        Node::This => this,
        Node::Select(operand, field) => {
            let (map, meta) = map_of(evaluate(operand, this, root)?)?;
            if meta && !seen_in_metadata(field) {
                return None; // no such key, for cel-rust to say
            }
            Seen::Json {
                value: map.get(field)?,
                meta: root && matches!(**operand, Node::This) && field == "metadata",
            }
        }
        Node::Has(operand, field) => {
            let (map, meta) = map_of(evaluate(operand, this, root)?)?;
            Seen::Bool(map.contains_key(field) && (!meta || seen_in_metadata(field)))
        }
        Node::String(s) => Seen::String(s),
        Node::Bool(b) => Seen::Bool(*b),
        Node::Int(i) => Seen::Int(*i),
        Node::Not(operand) => Seen::Bool(!bool_of(operand)?),
        Node::And(left, right) => Seen::Bool(bool_of(left)? && bool_of(right)?),
        Node::Or(left, right) => Seen::Bool(bool_of(left)? || bool_of(right)?),
        Node::Equal(left, right) => Seen::Bool(equal(left, right, this, root)?),
        Node::NotEqual(left, right) => Seen::Bool(!equal(left, right, this, root)?),
    })
}

/// Whether `left` and `right` are equal, when both are scalars of one kind.
fn equal<'a>(left: &'a Node, right: &'a Node, this: Seen<'a>, root: bool) -> Option<bool> {
    let left = scalar(evaluate(left, this, root)?)?;
    let right = scalar(evaluate(right, this, root)?)?;
    let same_kind = std::mem::discriminant(&left) == std::mem::discriminant(&right);
    same_kind.then(|| left == right)
}

fn boolean(seen: Seen<'_>) -> Option<bool> {
    match scalar(seen)? {
        Scalar::Bool(b) => Some(b),
        _ => None,
    }
}

fn scalar(seen: Seen<'_>) -> Option<Scalar<'_>> {
    Some(match seen {
        Seen::String(s) => Scalar::String(s),
        Seen::Bool(b) => Scalar::Bool(b),
        Seen::Int(i) => Scalar::Int(i),
        Seen::Json { value, .. } => match value {
            Value::String(s) => Scalar::String(s),
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => Scalar::Int(n.as_i64()?),
            _ => return None,
        },
    })
}

fn map_of(seen: Seen<'_>) -> Option<(&serde_json::Map<String, Value>, bool)> {
    match seen {
        Seen::Json {
            value: Value::Object(map),
            meta,
        } => Some((map, meta)),
        _ => None,
    }
}

/// The fields of the root's `metadata` a rule sees (kube's `WithTypeAndObjectMeta`), here and
/// in [`cel_view`](super::rules).
pub(super) fn seen_in_metadata(field: &str) -> bool {
    field == "name" || field == "generateName"
}
