//! The checks kube's type checker makes that cel-rust's parser does not: every identifier
//! is a declared variable, a variable a comprehension binds, or a type name, and every
//! function is one the environment knows (`undeclared reference to 'foo'`, cel-go's words).
//! Without types, a function is known by its name, not its overloads: a call with the
//! wrong arguments is refused when evaluated (`no such overload`).

use cel::common::ast::{EntryExpr, Expr, IdedExpr, SourceInfo};

use super::CompileError;

/// CEL's standard functions and operators, as cel-rust names them (the spec's standard
/// definitions, optional types, and the macros' expansions).
const STANDARD_FUNCTIONS: &[&str] = &[
    "_?_:_",
    "_&&_",
    "_||_",
    "!_",
    "_-_",
    "_+_",
    "_*_",
    "_/_",
    "_%_",
    "_==_",
    "_!=_",
    "_>=_",
    "_<=_",
    "_>_",
    "_<_",
    "-_",
    "_[_]",
    "_[?_]",
    "_?._",
    "@in",
    "@not_strictly_false",
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "type",
    "dyn",
    "duration",
    "timestamp",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
];

/// Function names kube's `authorizer` library declares (`library/authz.go`); the
/// admission environment installs it as an extra library.
const AUTHORIZER_FUNCTIONS: &[&str] = &[
    "path",
    "group",
    "serviceAccount",
    "resource",
    "subresource",
    "namespace",
    "name",
    "check",
    "allowed",
    "reason",
    "errored",
    "error",
    "fieldSelector",
    "labelSelector",
];

/// Type names an expression may use as values (`type(x) == int`).
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "optional_type",
];

/// Whether `name` is a function of CEL or of kube's libraries.
pub(crate) fn is_known_function(name: &str) -> bool {
    STANDARD_FUNCTIONS.contains(&name)
        || super::library::FUNCTIONS.contains(&name)
        || AUTHORIZER_FUNCTIONS.contains(&name)
}

/// Checks the identifiers and functions of `expr` against `variables`.
pub(crate) fn references(
    expr: &IdedExpr,
    info: &SourceInfo,
    variables: &[&str],
    functions: &[&str],
) -> Result<(), CompileError> {
    let mut checker = Checker {
        declared: variables,
        functions,
        bound: Vec::new(),
        info,
    };
    checker.walk(expr)
}

struct Checker<'a> {
    declared: &'a [&'a str],
    /// Functions the environment adds to the known ones.
    functions: &'a [&'a str],
    /// Variables of the comprehensions around the current node.
    bound: Vec<&'a str>,
    info: &'a SourceInfo,
}

impl<'a> Checker<'a> {
    fn is_variable(&self, name: &str) -> bool {
        self.declared.contains(&name) || self.bound.contains(&name)
    }

    fn is_function(&self, name: &str) -> bool {
        is_known_function(name) || self.functions.contains(&name)
    }

    fn undeclared(&self, expr: &IdedExpr, name: &str) -> CompileError {
        let (line, column) = self.position(expr.id);
        CompileError::new(format!(
            "ERROR: <input>:{line}:{column}: undeclared reference to '{name}' (in container '')"
        ))
    }

    /// 1-based line and column of node `id`.
    fn position(&self, id: u64) -> (usize, usize) {
        let Some((start, _)) = self.info.offset_for(id) else {
            return (1, 1);
        };
        let before = self.info.source.get(..start as usize).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    fn walk(&mut self, expr: &'a IdedExpr) -> Result<(), CompileError> {
        match &expr.expr {
            Expr::Ident(name) => {
                if !(self.is_variable(name) || TYPE_NAMES.contains(&name.as_str())) {
                    return Err(self.undeclared(expr, name));
                }
            }
            Expr::Select(select) => {
                // `a.b.c` may name a namespaced type or variable: only its root is checked.
                self.walk(&select.operand)?;
            }
            Expr::Call(call) => {
                let namespaced = match call.target.as_deref() {
                    Some(IdedExpr {
                        expr: Expr::Ident(ns),
                        ..
                    }) if !self.is_variable(ns) => {
                        let qualified = format!("{ns}.{}", call.func_name);
                        self.is_function(&qualified).then_some(())
                    }
                    _ => None,
                };
                if namespaced.is_none() {
                    if !self.is_function(&call.func_name) {
                        return Err(self.undeclared(expr, &call.func_name));
                    }
                    if let Some(target) = &call.target {
                        self.walk(target)?;
                    }
                }
                for arg in &call.args {
                    self.walk(arg)?;
                }
            }
            Expr::Comprehension(comp) => {
                self.walk(&comp.iter_range)?;
                self.walk(&comp.accu_init)?;
                let depth = self.bound.len();
                self.bound.push(&comp.iter_var);
                if let Some(second) = &comp.iter_var2 {
                    self.bound.push(second);
                }
                self.bound.push(&comp.accu_var);
                let body = self
                    .walk(&comp.loop_cond)
                    .and_then(|()| self.walk(&comp.loop_step))
                    .and_then(|()| self.walk(&comp.result));
                self.bound.truncate(depth);
                body?;
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element)?;
                }
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    self.walk_entry(&entry.expr)?;
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    self.walk_entry(&entry.expr)?;
                }
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
        Ok(())
    }

    fn walk_entry(&mut self, entry: &'a EntryExpr) -> Result<(), CompileError> {
        match entry {
            EntryExpr::StructField(field) => self.walk(&field.value),
            EntryExpr::MapEntry(entry) => {
                self.walk(&entry.key)?;
                self.walk(&entry.value)
            }
        }
    }
}
