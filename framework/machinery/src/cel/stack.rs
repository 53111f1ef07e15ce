//! Stack for the recursive parts of CEL: cel-rust's parser recurses through a dozen
//! grammar rules a bracket, its evaluator once a node of the tree, and in a debug build a
//! level takes tens of KiB. Each runs through [`grow`], which moves to a fresh stack only
//! when what is left of the current one is short of what the nesting may need.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// What parsing may need: the parser's own limit of 96 nested brackets, at most ~160 KiB a
/// level in a debug build.
pub(super) const PARSE: usize = 16 * 1024 * 1024;

/// What walking or evaluating a tree `depth` deep may need.
pub(super) fn walk(depth: usize) -> usize {
    let per_level = if cfg!(debug_assertions) { 64 } else { 16 } * 1024;
    (depth + 16) * per_level
}

/// Runs `f` with at least `needed` bytes of stack.
pub(super) fn grow<R>(needed: usize, f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(needed, needed * 2, f)
}

/// The depth of `expr`'s tree, counted without recursion (the tree may be deeper than the
/// stack allows before it is refused).
pub(super) fn depth(expr: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(expr, 1)];
    while let Some((node, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        pending.extend(children(node).into_iter().map(|child| (child, depth + 1)));
    }
    deepest
}

/// The nodes right under `node`.
fn children(node: &IdedExpr) -> Vec<&IdedExpr> {
    match &node.expr {
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(comp) => vec![
            &comp.iter_range,
            &comp.accu_init,
            &comp.loop_cond,
            &comp.loop_step,
            &comp.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => map.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Struct(s) => s.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Select(select) => vec![&select.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

fn entry(entry: &EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
    }
}
