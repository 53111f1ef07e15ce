//! cel-go's sets extension (`ext.Sets()`, which kube turns on): `sets.contains`,
//! `sets.equivalent`, `sets.intersects` over lists, with CEL equality.

use cel::common::types::LIST_TYPE;
use cel::{Env, ExecutionError, Value};

use super::{global, list_arg, op};

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    global(env, "sets.contains", &[LIST_TYPE, LIST_TYPE], op!(contains))?;
    global(
        env,
        "sets.equivalent",
        &[LIST_TYPE, LIST_TYPE],
        op!(equivalent),
    )?;
    global(
        env,
        "sets.intersects",
        &[LIST_TYPE, LIST_TYPE],
        op!(intersects),
    )?;
    Ok(())
}

fn holds_all(set: &[Value], items: &[Value]) -> bool {
    items.iter().all(|i| set.contains(i))
}

fn contains(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = (
        list_arg("sets.contains", args, 0)?,
        list_arg("sets.contains", args, 1)?,
    );
    Ok(Value::Bool(holds_all(a, b)))
}

fn equivalent(args: &[Value]) -> Result<Value, ExecutionError> {
    let a = list_arg("sets.equivalent", args, 0)?;
    let b = list_arg("sets.equivalent", args, 1)?;
    Ok(Value::Bool(holds_all(a, b) && holds_all(b, a)))
}

fn intersects(args: &[Value]) -> Result<Value, ExecutionError> {
    let a = list_arg("sets.intersects", args, 0)?;
    let b = list_arg("sets.intersects", args, 1)?;
    Ok(Value::Bool(b.iter().any(|i| a.contains(i))))
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_true;

    /// Cases of cel-go's `ext/sets_test.go`.
    #[test]
    fn cel_go_sets_cases() {
        assert_true(&[
            "sets.contains([], [])",
            "sets.contains([1], [])",
            "sets.contains([1, 2, 3], [3, 2])",
            "!sets.contains([1], [1, 2])",
            "sets.contains([1, 2], [2u, 1.0])",
            "sets.equivalent([], [])",
            "sets.equivalent([1, 2, 2], [2, 1])",
            "!sets.equivalent([1], [1, 2])",
            "sets.intersects([1, 2], [2, 3])",
            "!sets.intersects([], [])",
            "!sets.intersects([1], [2])",
        ]);
    }
}
