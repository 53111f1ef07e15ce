//! kube's lists library (`library/lists.go`): `isSorted`, `sum`, `min`, `max`, `indexOf`,
//! `lastIndexOf` on lists of comparable values.

use std::cmp::Ordering;

use cel::common::types::DYN_TYPE;
use cel::common::types::LIST_TYPE;
use cel::{Env, ExecutionError, Value};

use super::{error, list_arg, member, op};

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    member(env, "isSorted", &LIST_TYPE, &[], op!(is_sorted))?;
    member(env, "sum", &LIST_TYPE, &[], op!(sum))?;
    member(env, "min", &LIST_TYPE, &[], op!(min))?;
    member(env, "max", &LIST_TYPE, &[], op!(max))?;
    member(env, "indexOf", &LIST_TYPE, &[DYN_TYPE], op!(index_of))?;
    member(
        env,
        "lastIndexOf",
        &LIST_TYPE,
        &[DYN_TYPE],
        op!(last_index_of),
    )?;
    Ok(())
}

/// CEL's ordering of two values of comparable types (numbers across types, as
/// `CrossTypeNumericComparisons`), or none.
pub(crate) fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::UInt(a), Value::UInt(b)) => Some(a.cmp(b)),
        (Value::Int(a), Value::UInt(b)) => Some(i128::from(*a).cmp(&i128::from(*b))),
        (Value::UInt(a), Value::Int(b)) => Some(i128::from(*a).cmp(&i128::from(*b))),
        (Value::Float(a), Value::Float(b)) => a.partial_cmp(b),
        (Value::Float(a), Value::Int(b)) => a.partial_cmp(&(*b as f64)),
        (Value::Float(a), Value::UInt(b)) => a.partial_cmp(&(*b as f64)),
        (Value::Int(a), Value::Float(b)) => (*a as f64).partial_cmp(b),
        (Value::UInt(a), Value::Float(b)) => (*a as f64).partial_cmp(b),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bytes(a), Value::Bytes(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        (Value::Duration(a), Value::Duration(b)) => Some(a.cmp(b)),
        (Value::Timestamp(a), Value::Timestamp(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

fn ordered(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    compare(a, b).ok_or_else(|| error(function, format!("no such overload: {a:?} < {b:?}")))
}

fn is_sorted(args: &[Value]) -> Result<Value, ExecutionError> {
    let list = list_arg("isSorted", args, 0)?;
    for pair in list.windows(2) {
        if ordered("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

fn sum(args: &[Value]) -> Result<Value, ExecutionError> {
    let list = list_arg("sum", args, 0)?;
    let Some(first) = list.first() else {
        return Ok(Value::Int(0));
    };
    let overflow = || error("sum", "integer overflow");
    let mut total = first.clone();
    for item in &list[1..] {
        total = match (&total, item) {
            (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or_else(overflow)?),
            (Value::UInt(a), Value::UInt(b)) => {
                Value::UInt(a.checked_add(*b).ok_or_else(overflow)?)
            }
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => {
                Value::Duration(a.checked_add(b).ok_or_else(overflow)?)
            }
            (a, b) => return Err(error("sum", format!("no such overload: {a:?} + {b:?}"))),
        };
    }
    match total {
        Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Duration(_) => Ok(total),
        other => Err(error("sum", format!("no such overload: sum of {other:?}"))),
    }
}

fn extreme(name: &str, args: &[Value], keep: Ordering) -> Result<Value, ExecutionError> {
    let list = list_arg(name, args, 0)?;
    let Some(mut best) = list.first() else {
        return Err(error(name, format!("{name} called on empty list")));
    };
    for item in &list[1..] {
        if ordered(name, item, best)? == keep {
            best = item;
        }
    }
    // A one-item list of an uncomparable type is not a `min` either.
    ordered(name, best, best)?;
    Ok(best.clone())
}

fn min(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("min", args, Ordering::Less)
}

fn max(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("max", args, Ordering::Greater)
}

fn index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let list = list_arg("indexOf", args, 0)?;
    let found = list.iter().position(|v| Some(v) == args.get(1));
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn last_index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let list = list_arg("lastIndexOf", args, 0)?;
    let found = list.iter().rposition(|v| Some(v) == args.get(1));
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_errors, assert_true};

    /// Cases of kube's `library/lists_test.go` (`TestLists`).
    #[test]
    fn kube_lists_cases() {
        assert_true(&[
            "[].isSorted()",
            "[1.0].isSorted()",
            "[1, 2, 3].isSorted()",
            "['a', 'b', 'b', 'c'].isSorted()",
            "!['c', 'b', 'a'].isSorted()",
            "[duration('1s'), duration('2s')].isSorted()",
            "[].sum() == 0",
            "[1].sum() == 1",
            "[1.0, 2.0, 3.0].sum() == 6.0",
            "[1u, 2u].sum() == 3u",
            "[duration('1s'), duration('2s')].sum() == duration('3s')",
            "[1, 3, 2].min() == 1",
            "[1, 3, 2].max() == 3",
            "['b', 'a'].min() == 'a'",
            "[1, 2, 3, 2].indexOf(2) == 1",
            "[1, 2, 3, 2].lastIndexOf(2) == 3",
            "[1, 2].indexOf(5) == -1",
            "['a', 'b'].indexOf('b') == 1",
            // the strings extension's indexOf still serves strings
            "'abcb'.lastIndexOf('b') == 3",
        ]);
        assert_errors(&[
            ("[].min() == 1", "min called on empty list"),
            ("[].max() == 1", "max called on empty list"),
        ]);
    }
}
