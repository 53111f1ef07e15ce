//! Cost, in kube's units (cel-go's `checker/cost.go` and kube's `library/cost.go`): an
//! estimate from the largest sizes the variables may have, checked when an expression is
//! accepted, and a bound of an evaluation's cost from the actual values, charged to a
//! [`Budget`] before it runs.
//!
//! # Approach
//!
//! cel-go counts cost while it evaluates and stops an evaluation that passes its limit.
//! cel-rust's interpreter has no such hook, so the cost here is never counted during an
//! evaluation but bounded before it: [`estimate`] walks the syntax tree with cel-go's
//! formulas (an identifier or a field 1, a call 1 plus its arguments, a list literal 10, a
//! map 30, a comprehension its range's size times the cost of one step, string functions
//! a tenth of the string's length, regexes a quarter of the pattern's length, kube's
//! library functions as kube's `CostEstimator` prices them), taking the sizes of the
//! variables from [`Sizes`]. [`runtime_bound`] is the same walk with the sizes of the
//! actual values of an [`Activation`]: an upper bound of what cel-go would count for that
//! evaluation, since a loop never runs more often than its list is long. Evaluation
//! charges that bound to its [`Budget`] first, so an expression that could exceed the
//! per-call limit with the values at hand is refused ([`EvalError::CostExceeded`]) at
//! once, and never runs long. The bound assumes no short cut (`&&`, `||`, `all`, `exists`
//! stopping early), so it may refuse an evaluation cel-go would have finished under the
//! limit; it never lets through one cel-go would have stopped.
//!
//! Without types, the walk cannot tell a string from a number: a size it does not know
//! counts as the largest a request allows (kube's 3 MiB) where only a string or a list
//! makes sense (a comprehension's range, `matches`, `contains`, …), and as a scalar's
//! where any value does (`==`, `+`, `<`).

use std::cell::RefCell;

use cel::Value;
use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

use super::{Activation, EvalError};

/// The largest sizes values may have, as a schema's `maxItems`, `maxLength` and
/// `maxProperties` bound them.
///
/// To estimate as kube does (`k8s.io/apiserver/pkg/cel/common/schemas.go`), a schema's
/// sizes are given in kube's terms: a string's [`string_size`] of its `maxLength`, and for
/// a list or map without `maxItems` or `maxProperties` the most a request holds
/// ([`max_items_per_request`], [`max_properties_per_request`]). `None` is a value with
/// no bound (sized as a whole request where a size matters) or without a size.
pub trait Sizes {
    /// The largest size of the value at `path` (variable name then fields, `[]` for list
    /// items and for a map's values), if bounded: a string's length, a list's items, a
    /// map's entries.
    fn max_size(&self, path: &[&str]) -> Option<u64>;
}

/// No bound known for any value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unbounded;

impl Sizes for Unbounded {
    fn max_size(&self, _: &[&str]) -> Option<u64> {
        None
    }
}

/// An estimated cost range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostEstimate {
    /// The least cost.
    pub min: u64,
    /// The greatest cost.
    pub max: u64,
}

/// The largest size of a value no bound is known for: a string or list filling a whole
/// request (kube's `DefaultMaxRequestSizeBytes`, 3 MiB, less its quotes or brackets).
pub const UNBOUNDED_SIZE: u64 = 3 * 1024 * 1024 - 2;

/// The size kube gives a string of at most `max_length` characters: four bytes each, as
/// a code point may take (`estimateMaxElementsFromMaxLength`).
pub fn string_size(max_length: u64) -> u64 {
    max_length.saturating_mul(4)
}

/// The most items of at least `min_item_size` serialized bytes a request holds
/// (`estimateMaxArrayItemsFromMinSize`).
pub fn max_items_per_request(min_item_size: u64) -> u64 {
    UNBOUNDED_SIZE / (min_item_size + 1)
}

/// The most properties with values of at least `min_value_size` serialized bytes a
/// request holds (`estimateMaxAdditionalPropertiesFromMinSize`).
pub fn max_properties_per_request(min_value_size: u64) -> u64 {
    UNBOUNDED_SIZE / (min_value_size + 6)
}

/// cel-go's `StringTraversalCostFactor`.
const STRING_TRAVERSAL: f64 = 0.1;
/// cel-go's `RegexStringLengthCostFactor`.
const REGEX_LENGTH: f64 = 0.25;
/// The cost of an authorization check (kube's `library/cost.go`): two a call at most.
const AUTHZ_CHECK: u64 = 350_000;
/// The largest list `lists.range` makes (cel-rust's, cel-go's default).
const MAX_RANGE: u64 = 1_000_000;

/// The estimated cost of `expression`.
pub fn estimate(expression: &cel::IdedExpr, sizes: &dyn Sizes) -> CostEstimate {
    let mut estimator = Estimator {
        sizes,
        locals: Vec::new(),
    };
    let node = estimator.cost(expression);
    CostEstimate {
        min: node.cost.min,
        max: node.cost.max,
    }
}

/// A bound of the cost of evaluating `expression` with `activation`: the estimate with
/// the sizes of the actual values.
pub fn runtime_bound(expression: &cel::IdedExpr, activation: &Activation) -> u64 {
    let sizes = ActualSizes {
        activation,
        cache: RefCell::default(),
    };
    estimate(expression, &sizes).max
}

/// The cost [`runtime_bound`] gives `expression` whatever the values, when it gives the
/// same for every size: the bound with every value empty and with every value as large
/// as can be. Every formula of the walk grows with the sizes it reads (or ignores them),
/// so equal bounds at both ends are the bound of any values in between, unknown sizes
/// (a scalar's 1, an unbounded string's) included.
pub fn constant(expression: &cel::IdedExpr) -> Option<u64> {
    let least = estimate(expression, &Everywhere(0)).max;
    let most = estimate(expression, &Everywhere(u64::MAX)).max;
    let unknown = estimate(expression, &Unbounded).max;
    (least == most && most == unknown).then_some(most)
}

/// The same size for every value.
struct Everywhere(u64);

impl Sizes for Everywhere {
    fn max_size(&self, _: &[&str]) -> Option<u64> {
        Some(self.0)
    }
}

/// A range of sizes or costs, with cel-go's saturating arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Range {
    min: u64,
    max: u64,
}

impl Range {
    const fn fixed(n: u64) -> Self {
        Range { min: n, max: n }
    }

    fn add(self, other: Range) -> Range {
        Range {
            min: self.min.saturating_add(other.min),
            max: self.max.saturating_add(other.max),
        }
    }

    fn multiply(self, other: Range) -> Range {
        Range {
            min: self.min.saturating_mul(other.min),
            max: self.max.saturating_mul(other.max),
        }
    }

    /// cel-go's `MultiplyByCostFactor`: rounded up.
    fn factor(self, factor: f64) -> Range {
        let scale = |n: u64| {
            let scaled = (n as f64 * factor).ceil();
            if scaled >= u64::MAX as f64 {
                u64::MAX
            } else {
                scaled as u64
            }
        };
        Range {
            min: scale(self.min),
            max: scale(self.max),
        }
    }

    fn union(self, other: Range) -> Range {
        Range {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }
}

/// What the walk knows of a node: its cost, the size of its value when known, and where
/// the value comes from (for the sizes of its items).
#[derive(Debug, Clone, Default)]
struct Node {
    cost: Range,
    size: Option<Range>,
    path: Option<Vec<String>>,
}

impl Node {
    fn cost(cost: Range) -> Node {
        Node {
            cost,
            ..Node::default()
        }
    }

    fn sized(mut self, size: Range) -> Node {
        self.size = Some(size);
        self
    }

    /// The size of a string or list: unbounded when not known.
    fn size_or_unbounded(&self) -> Range {
        self.size.unwrap_or(Range {
            min: 0,
            max: UNBOUNDED_SIZE,
        })
    }

    /// The size of a value that may be a scalar: 1 when not known.
    fn size_or_scalar(&self) -> Range {
        self.size.unwrap_or(Range::fixed(1))
    }
}

struct Estimator<'a> {
    sizes: &'a dyn Sizes,
    /// Comprehension variables in scope: name, and the path of their values.
    locals: Vec<(String, Option<Vec<String>>)>,
}

impl Estimator<'_> {
    fn size_at(&self, path: &Option<Vec<String>>) -> Option<Range> {
        let path = path.as_ref()?;
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        self.sizes.max_size(&parts).map(|max| Range { min: 0, max })
    }

    fn at_path(&self, cost: Range, path: Option<Vec<String>>) -> Node {
        Node {
            cost,
            size: self.size_at(&path),
            path,
        }
    }

    fn cost(&mut self, expr: &IdedExpr) -> Node {
        match &expr.expr {
            Expr::Literal(literal) => {
                let size = match literal {
                    LiteralValue::String(s) => Some(s.chars().count() as u64),
                    LiteralValue::Bytes(b) => Some(b.len() as u64),
                    _ => None,
                };
                let node = Node::cost(Range::default());
                match size {
                    Some(n) => node.sized(Range::fixed(n)),
                    None => node,
                }
            }
            Expr::Ident(name) => {
                let path = match self.locals.iter().rev().find(|(n, _)| n == name) {
                    Some((_, path)) => path.clone(),
                    None => Some(vec![name.clone()]),
                };
                self.at_path(Range::fixed(1), path)
            }
            Expr::Select(select) => {
                let operand = self.cost(&select.operand);
                if select.test {
                    // `has()`: kube turns presence-test cost off.
                    return Node::cost(operand.cost);
                }
                let path = operand.path.map(|mut p| {
                    p.push(select.field.clone());
                    p
                });
                self.at_path(operand.cost.add(Range::fixed(1)), path)
            }
            Expr::Call(call) => self.call(&call.func_name, call.target.as_deref(), &call.args),
            Expr::List(list) => {
                let mut cost = Range::fixed(10);
                for element in &list.elements {
                    cost = cost.add(self.cost(element).cost);
                }
                Node::cost(cost).sized(Range::fixed(list.elements.len() as u64))
            }
            Expr::Map(map) => {
                let mut cost = Range::fixed(30);
                for entry in &map.entries {
                    cost = cost.add(self.entry(&entry.expr));
                }
                Node::cost(cost).sized(Range::fixed(map.entries.len() as u64))
            }
            Expr::Struct(s) => {
                let mut cost = Range::fixed(40);
                for entry in &s.entries {
                    cost = cost.add(self.entry(&entry.expr));
                }
                Node::cost(cost)
            }
            Expr::Comprehension(comp) => self.comprehension(comp),
            Expr::Unspecified => Node::default(),
        }
    }

    fn entry(&mut self, entry: &EntryExpr) -> Range {
        match entry {
            EntryExpr::StructField(field) => self.cost(&field.value).cost,
            EntryExpr::MapEntry(entry) => {
                self.cost(&entry.key).cost.add(self.cost(&entry.value).cost)
            }
        }
    }

    fn comprehension(&mut self, comp: &ComprehensionExpr) -> Node {
        let range = self.cost(&comp.iter_range);
        let init = self.cost(&comp.accu_init);
        let item_path = range.path.clone().map(|mut p| {
            p.push("[]".to_string());
            p
        });
        let depth = self.locals.len();
        match &comp.iter_var2 {
            // Two variables: an index or key, then the item.
            Some(second) => {
                self.locals.push((comp.iter_var.clone(), None));
                self.locals.push((second.clone(), item_path));
            }
            None => self.locals.push((comp.iter_var.clone(), item_path)),
        }
        self.locals.push((comp.accu_var.clone(), None));
        let step = self
            .cost(&comp.loop_cond)
            .cost
            .add(self.cost(&comp.loop_step).cost);
        // The accumulator stays in scope for the result, the iteration variables do not.
        self.locals.truncate(depth);
        self.locals.push((comp.accu_var.clone(), None));
        let result = self.cost(&comp.result);
        self.locals.truncate(depth);

        let count = range.size_or_unbounded();
        let cost = range
            .cost
            .add(init.cost)
            .add(result.cost)
            .add(count.multiply(step));
        let node = Node::cost(cost);
        match &comp.accu_init.expr {
            // `map` and `filter` build a list as long as the range at most.
            Expr::List(_) | Expr::Map(_) => node.sized(count),
            _ => match init.size {
                Some(size) => node.sized(size),
                None => node,
            },
        }
    }

    fn call(&mut self, function: &str, target: Option<&IdedExpr>, args: &[IdedExpr]) -> Node {
        let format = target.and_then(format_name);
        let range = match args.first().map(|a| &a.expr) {
            Some(Expr::Literal(LiteralValue::Int(n))) => {
                Range::fixed((i64::from(*n).max(0) as u64).min(MAX_RANGE))
            }
            _ => Range {
                min: 0,
                max: MAX_RANGE,
            },
        };
        let target = target.map(|t| self.cost(t));
        let args: Vec<Node> = args.iter().map(|a| self.cost(a)).collect();
        let args_cost = args.iter().fold(Range::default(), |sum, a| sum.add(a.cost));
        let target_cost = target.as_ref().map_or(Range::default(), |t| t.cost);
        let base = target_cost.add(args_cost);
        // The string, list or value a function works on: its receiver, or first argument.
        let subject = target.as_ref().or(args.first());
        let subject_size = subject.map_or(Range::fixed(1), Node::size_or_unbounded);
        let traversal = subject_size.factor(STRING_TRAVERSAL);
        let fixed = |n: u64| Node::cost(base.add(Range::fixed(n)));

        match function {
            "_&&_" | "_||_" if args.len() == 2 => {
                let (lhs, rhs) = (args[0].cost, args[1].cost);
                Node::cost(Range {
                    min: lhs.min,
                    max: lhs.max.saturating_add(rhs.max),
                })
            }
            "_?_:_" if args.len() == 3 => {
                let size = match (args[1].size, args[2].size) {
                    (Some(a), Some(b)) => Some(a.union(b)),
                    _ => None,
                };
                let node = Node::cost(args[0].cost.add(args[1].cost.union(args[2].cost)));
                match size {
                    Some(s) => node.sized(s),
                    None => node,
                }
            }
            "dyn" => Node {
                cost: base.add(Range::fixed(1)),
                ..args.first().cloned().unwrap_or_default()
            },
            "_[_]" | "_[?_]" => {
                let path = args.first().and_then(|a| a.path.clone()).map(|mut p| {
                    p.push("[]".to_string());
                    p
                });
                self.at_path(base.add(Range::fixed(1)), path)
            }
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" if args.len() == 2 => {
                let smallest = args[0]
                    .size_or_scalar()
                    .max
                    .min(args[1].size_or_scalar().max);
                let compare = Range {
                    min: u64::from(smallest > 0),
                    max: smallest,
                }
                .factor(STRING_TRAVERSAL);
                Node::cost(base.add(compare))
            }
            "_+_" if args.len() == 2 => match (args[0].size, args[1].size) {
                (Some(a), Some(b)) => {
                    let size = a.add(b);
                    Node::cost(base.add(size.factor(STRING_TRAVERSAL))).sized(size)
                }
                _ => fixed(1),
            },
            "@in" if args.len() == 2 => Node::cost(base.add(args[1].size_or_unbounded())),
            "matches" | "find" | "findAll" => {
                let text = subject_size.add(Range::fixed(1)).factor(STRING_TRAVERSAL);
                let pattern = self
                    .pattern_size(target.is_some(), &args)
                    .factor(REGEX_LENGTH);
                let node = Node::cost(base.add(text.multiply(pattern)));
                if function == "find" {
                    node.sized(subject_size)
                } else {
                    node
                }
            }
            "contains" if target.is_some() && !args.is_empty() => {
                let needle = args[0].size_or_unbounded().factor(STRING_TRAVERSAL);
                Node::cost(base.add(traversal.multiply(needle)))
            }
            "startsWith" | "endsWith" if !args.is_empty() => {
                Node::cost(base.add(args[0].size_or_unbounded().factor(STRING_TRAVERSAL)))
            }
            "lowerAscii" | "upperAscii" | "trim" | "substring" | "url" | "strings.quote" => {
                Node::cost(base.add(traversal)).sized(subject_size)
            }
            "format" | "bytes" | "string" | "cidr" | "isIP" | "isCIDR" | "quantity"
            | "isQuantity" | "isURL" => Node::cost(base.add(traversal)),
            "ip" if target.is_none() => Node::cost(base.add(traversal)),
            "ip.isCanonical" => Node::cost(base.add(subject_size.factor(2.0 * STRING_TRAVERSAL))),
            "replace" if args.len() >= 2 => {
                let size = replaced_size(
                    subject_size,
                    args[0].size_or_unbounded(),
                    args[1].size_or_unbounded(),
                );
                Node::cost(base.add(subject_size.factor(2.0 * STRING_TRAVERSAL))).sized(size)
            }
            "split" => Node::cost(base.add(subject_size.factor(2.0 * STRING_TRAVERSAL)))
                .sized(subject_size),
            "join" => {
                let items = subject_size;
                let item = self.item_size(subject).unwrap_or(Range::fixed(1));
                let separator = args.first().map_or(Range::default(), Node::size_or_scalar);
                let size = items.multiply(item).add(items.multiply(separator));
                Node::cost(base.add(size.factor(2.0 * STRING_TRAVERSAL))).sized(size)
            }
            "isSorted" | "sum" | "min" | "max" | "indexOf" | "lastIndexOf" => {
                // One comparison an item, plus reading the item when it has a size.
                let item = self.item_size(subject).map_or(Range::fixed(1), |s| {
                    Range::fixed(1).add(s.factor(STRING_TRAVERSAL))
                });
                Node::cost(base.add(subject_size.multiply(item)))
            }
            "validate" if !args.is_empty() => {
                let text = args[0]
                    .size_or_unbounded()
                    .add(Range::fixed(1))
                    .factor(STRING_TRAVERSAL);
                let regex =
                    Range::fixed(format.map_or(2083, super::library::format_max_regex_size))
                        .factor(REGEX_LENGTH);
                Node::cost(base.add(text.multiply(regex)))
            }
            "lists.range" => Node::cost(base.add(range)).sized(range),
            // cel-go's lists extension: a pass over the list, `sort` n·log n, `distinct`
            // a comparison of every pair (cel-rust's is quadratic).
            "reverse" | "slice" | "flatten" => Node::cost(base.add(subject_size)),
            "sort" | "@sortByAssociatedKeys" => {
                let log = u64::from(u64::BITS - subject_size.max.leading_zeros()).max(1);
                Node::cost(base.add(subject_size.multiply(Range::fixed(log)))).sized(subject_size)
            }
            "distinct" => {
                Node::cost(base.add(subject_size.multiply(subject_size))).sized(subject_size)
            }
            "sets.contains" | "sets.equivalent" | "sets.intersects" if args.len() == 2 => {
                let pairs = args[0]
                    .size_or_unbounded()
                    .multiply(args[1].size_or_unbounded());
                Node::cost(base.add(pairs))
            }
            "check" => fixed(AUTHZ_CHECK),
            _ => fixed(1),
        }
    }

    /// The size of a regex argument: the receiver's first argument, or the second of a
    /// global call.
    fn pattern_size(&self, member: bool, args: &[Node]) -> Range {
        let pattern = if member { args.first() } else { args.get(1) };
        pattern.map_or(Range::fixed(1), Node::size_or_unbounded)
    }

    /// The size of the items of a list node, when known.
    fn item_size(&self, list: Option<&Node>) -> Option<Range> {
        let path = list?.path.clone().map(|mut p| {
            p.push("[]".to_string());
            p
        });
        self.size_at(&path)
    }
}

/// The largest string `replace` makes (kube's formula): an empty needle puts the
/// replacement around every character, a shorter one replaces as often as it fits.
fn replaced_size(text: Range, needle: Range, with: Range) -> Range {
    let (count, retained) = if needle.min == 0 {
        (text.max.saturating_add(1), text.max)
    } else if with.max <= needle.min {
        (0, text.max)
    } else {
        (text.max.div_ceil(needle.min), 0)
    };
    Range {
        min: 0,
        max: count.saturating_mul(with.max).saturating_add(retained),
    }
}

/// The name of the format an expression written `format.<name>()` makes.
fn format_name(expr: &IdedExpr) -> Option<&str> {
    match &expr.expr {
        Expr::Call(call) if call.args.is_empty() => match call.target.as_deref()?.expr {
            Expr::Ident(ref ns) if ns == "format" => Some(call.func_name.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// The sizes of an activation's values.
struct ActualSizes<'a> {
    activation: &'a Activation,
    /// The sizes found so far, by path: an expression asks of a few paths, many times, so a
    /// list scanned without a key to allocate beats a map.
    cache: RefCell<Vec<(Vec<String>, Option<u64>)>>,
}

impl Sizes for ActualSizes<'_> {
    fn max_size(&self, path: &[&str]) -> Option<u64> {
        let same =
            |key: &[String]| key.len() == path.len() && key.iter().zip(path).all(|(k, p)| k == p);
        if let Some((_, cached)) = self.cache.borrow().iter().find(|(key, _)| same(key)) {
            return *cached;
        }
        let size = path
            .split_first()
            .and_then(|(name, rest)| max_size_at(self.activation.get(name)?, rest));
        let key = path.iter().map(|p| p.to_string()).collect();
        self.cache.borrow_mut().push((key, size));
        size
    }
}

/// The largest size of the values at `path` under `value`.
fn max_size_at(value: &Value, path: &[&str]) -> Option<u64> {
    let Some((first, rest)) = path.split_first() else {
        return size_of(value);
    };
    match (value, *first) {
        (Value::List(items), "[]") => items.iter().filter_map(|v| max_size_at(v, rest)).max(),
        (Value::Map(map), "[]") => map.map.values().filter_map(|v| max_size_at(v, rest)).max(),
        (Value::Map(map), field) => {
            let key = cel::objects::Key::String(field.to_string().into());
            max_size_at(map.map.get(&key)?, rest)
        }
        _ => None,
    }
}

/// The size CEL gives a value (`size()`): a string's characters, bytes, items, entries.
fn size_of(value: &Value) -> Option<u64> {
    match value {
        Value::String(s) => Some(s.chars().count() as u64),
        Value::Bytes(b) => Some(b.len() as u64),
        Value::List(l) => Some(l.len() as u64),
        Value::Map(m) => Some(m.map.len() as u64),
        _ => None,
    }
}

/// What evaluations may still cost: per call and in total (per request).
#[derive(Debug, Clone)]
pub struct Budget {
    per_call: u64,
    remaining: u64,
}

impl Budget {
    /// A budget of `total`, each evaluation at most `per_call`.
    pub fn new(per_call: u64, total: u64) -> Self {
        Self {
            per_call,
            remaining: total,
        }
    }

    /// Admission's: [`super::PER_CALL_LIMIT`] per call, [`super::RUNTIME_COST_BUDGET`] per request.
    pub fn admission() -> Self {
        Self::new(super::PER_CALL_LIMIT, super::RUNTIME_COST_BUDGET)
    }

    /// What is left.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Takes `cost` from the budget, or refuses when it exceeds the per-call limit or what
    /// is left.
    pub fn charge(&mut self, cost: u64) -> Result<(), EvalError> {
        if cost > self.per_call || cost > self.remaining {
            return Err(EvalError::CostExceeded);
        }
        self.remaining -= cost;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::cel::{Environment, STATIC_ESTIMATED_COST_LIMIT};

    /// Sizes from a table of paths.
    struct Table(&'static [(&'static str, u64)]);

    impl Sizes for Table {
        fn max_size(&self, path: &[&str]) -> Option<u64> {
            let path = path.join(".");
            self.0.iter().find(|(p, _)| *p == path).map(|(_, n)| *n)
        }
    }

    fn estimate_of(source: &str, sizes: &dyn Sizes) -> CostEstimate {
        Environment::new(&["self"])
            .compile(source)
            .unwrap()
            .estimated_cost(sizes)
    }

    /// kube's figure, by cel-go's formulas: `self` 1, the accumulator's init 0, the result
    /// 1; a step `@not_strictly_false(@result)` 2 and `@result && x.size() < 10` 1 to 4
    /// (`x` 1, `size` 1, `<` 1), times 0 to 10 items: 2 to 62.
    #[test]
    fn estimate_of_all_over_a_bounded_list_is_kubes() {
        let sizes = Table(&[("self", 10), ("self.[]", 5)]);
        assert_eq!(
            estimate_of("self.all(x, x.size() < 10)", &sizes),
            CostEstimate { min: 2, max: 62 }
        );
    }

    /// String functions cost a tenth of the string's length, rounded up.
    #[test]
    fn string_functions_cost_by_length() {
        let sizes = Table(&[("self.name", 100)]);
        // `self` 1, `.name` 1, lowerAscii 10 (kube prices it by length alone), `==`
        // against a 1-character literal 1.
        assert_eq!(estimate_of("self.name.lowerAscii() == 'x'", &sizes).max, 13);
        let unbounded = estimate_of("self.name.lowerAscii() == 'x'", &Unbounded).max;
        assert!(unbounded > 300_000, "{unbounded}");
    }

    const NESTED: &str = "self.a.all(x, self.b.all(y, self.c.all(z, x + y + z > 0)))";

    #[test]
    fn a_rule_nested_over_three_large_lists_is_refused_at_estimate() {
        let sizes = Table(&[("self.a", 1000), ("self.b", 1000), ("self.c", 1000)]);
        let cost = estimate_of(NESTED, &sizes);
        assert!(cost.max > STATIC_ESTIMATED_COST_LIMIT, "{cost:?}");
        let unbounded = estimate_of("self.a.all(x, self.b.all(y, true))", &Unbounded);
        assert!(unbounded.max > STATIC_ESTIMATED_COST_LIMIT, "{unbounded:?}");
    }

    #[test]
    fn a_rule_nested_over_three_large_lists_is_refused_at_runtime_without_running() {
        let items: Vec<i64> = (0..1000).collect();
        let activation =
            Activation::new().with_json("self", &json!({"a": items, "b": items, "c": items}));
        let expression = Environment::new(&["self"]).compile(NESTED).unwrap();
        let started = Instant::now();
        let mut budget = Budget::admission();
        assert_eq!(
            expression.evaluate(&activation, &mut budget),
            Err(EvalError::CostExceeded)
        );
        // Refused before it ran: nothing taken from the budget, and no time spent.
        assert_eq!(budget.remaining(), crate::cel::RUNTIME_COST_BUDGET);
        assert!(started.elapsed() < Duration::from_secs(10), "stalled");
    }

    #[test]
    fn a_cheap_rule_passes_and_is_charged_its_bound() {
        let activation =
            Activation::new().with_json("self", &json!({"a": [1, 2, 3], "name": "xyz"}));
        let expression = Environment::new(&["self"])
            .compile("self.a.all(x, x > 0) && self.name.startsWith('x')")
            .unwrap();
        let mut budget = Budget::admission();
        assert_eq!(
            expression.evaluate(&activation, &mut budget),
            Ok(Value::Bool(true))
        );
        let charged = crate::cel::RUNTIME_COST_BUDGET - budget.remaining();
        assert!((1..100).contains(&charged), "{charged}");
    }

    /// The bound follows the actual sizes: the same rule over a small list is cheap, over
    /// a list of 1,000 lists of 1,000 it is refused.
    #[test]
    fn the_runtime_bound_uses_the_actual_sizes() {
        let expression = Environment::new(&["self"])
            .compile("self.all(row, row.all(x, x.size() < 10))")
            .unwrap();
        let small = Activation::new().with_json("self", &json!([["a"], ["b", "c"]]));
        assert!(runtime_bound(expression_ast(&expression), &small) < 100);
        let row: Vec<&str> = vec!["abc"; 1000];
        let rows: Vec<_> = vec![row; 1000];
        let large = Activation::new().with_json("self", &json!(rows));
        assert!(runtime_bound(expression_ast(&expression), &large) > crate::cel::PER_CALL_LIMIT);
    }

    /// A cost no size changes is found once, and is what the bound of any values says.
    #[test]
    fn a_cost_independent_of_sizes_is_constant() {
        let env = Environment::new(&["self"]);
        let constant = |source: &str| constant(expression_ast(&env.compile(source).unwrap()));
        for source in [
            "!has(self.spec.a) || (has(self.spec.b) && self.spec.b != '')",
            "has(self.spec.a) && '' != self.spec.b",
        ] {
            let found = constant(source).expect(source);
            for value in [
                json!({}),
                json!({"spec": {"a": "x".repeat(5000), "b": "", "replicas": 3}}),
            ] {
                let activation = Activation::new().with_json("self", &value);
                let expression = env.compile(source).unwrap();
                assert_eq!(
                    runtime_bound(expression_ast(&expression), &activation),
                    found,
                    "{source}"
                );
            }
        }
        for source in [
            "self.all(x, x > 0)",
            "self.s.contains('a')",
            "self.a == self.b",
            "self.n > 1",
        ] {
            assert_eq!(constant(source), None, "{source}");
        }
    }

    /// A string grown by `replace` over and over is priced by the size it may reach, so
    /// the chain is refused before it fills memory.
    #[test]
    fn replace_chains_are_priced_by_what_they_make() {
        let source = format!("'a'{}.size() > 0", ".replace('', 'aaaaaaaa')".repeat(12));
        let expression = Environment::new(&["self"]).compile(&source).unwrap();
        assert_eq!(
            expression.evaluate(&Activation::new(), &mut Budget::admission()),
            Err(EvalError::CostExceeded)
        );
    }

    /// cel-rust's `distinct` compares every pair: priced so, a long list is refused.
    #[test]
    fn quadratic_list_functions_are_priced_so() {
        let expression = Environment::new(&["self"])
            .compile("lists.range(100000).distinct().size() > 0")
            .unwrap();
        assert_eq!(
            expression.evaluate(&Activation::new(), &mut Budget::admission()),
            Err(EvalError::CostExceeded)
        );
        let small = Environment::new(&["self"])
            .compile("[1, 1, 2].distinct() == [1, 2] && [2, 1].sort() == [1, 2]")
            .unwrap();
        assert_eq!(
            small.evaluate(&Activation::new(), &mut Budget::admission()),
            Ok(Value::Bool(true))
        );
    }

    fn expression_ast(expression: &crate::cel::Expression) -> &cel::IdedExpr {
        expression.ided()
    }
}
