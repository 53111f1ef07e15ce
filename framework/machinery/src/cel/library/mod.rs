//! The functions Kubernetes adds to CEL's standard library
//! (`k8s.io/apiserver/pkg/cel/library` and the cel-go extensions
//! `environment/base.go` turns on): strings and lists (cel-rust's own extensions), kube's
//! lists, regex, URLs, IP and CIDR, quantity, format, sets.
//!
//! Each function is written over [`Value`]s and bridged to cel-rust's overload table by
//! `call`; kube's own types (URL, IP, CIDR, Quantity, Format) are opaque values
//! ([`Value::Opaque`]) whose CEL type names are kube's (`kubernetes.URL`, `net.IP`, …).

mod format;
mod lists;
mod net;
mod quantity;
mod regex;
mod sets;
mod urls;

pub(crate) use self::format::max_regex_size as format_max_regex_size;

use cel::common::types::Type;
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value};

/// A library function over values: its arguments (the receiver first for a member call).
type Imp = fn(&[Value]) -> Result<Value, ExecutionError>;

/// The names of the functions [`install`] adds, kube's libraries and the cel-go extensions
/// it turns on, for [`super::Environment::compile`]'s check of unknown functions.
pub(crate) const FUNCTIONS: &[&str] = &[
    // ext.Strings (cel-rust's strings extension)
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "format",
    "strings.quote",
    "reverse",
    // ext.Lists (cel-rust's lists extension)
    "slice",
    "flatten",
    "distinct",
    "sort",
    "lists.range",
    "@sortByAssociatedKeys",
    // kube's lists
    "isSorted",
    "sum",
    "min",
    "max",
    // regex
    "find",
    "findAll",
    // urls
    "url",
    "isURL",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    // ip and cidr
    "ip",
    "isIP",
    "ip.isCanonical",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "cidr",
    "isCIDR",
    "containsIP",
    "containsCIDR",
    "prefixLength",
    "masked",
    // quantity
    "quantity",
    "isQuantity",
    "sign",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "add",
    "sub",
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    // format
    "format.named",
    "format.dns1123Label",
    "format.dns1123Subdomain",
    "format.dns1035Label",
    "format.qualifiedName",
    "format.dns1123LabelPrefix",
    "format.dns1123SubdomainPrefix",
    "format.dns1035LabelPrefix",
    "format.labelValue",
    "format.uri",
    "format.uuid",
    "format.byte",
    "format.date",
    "format.datetime",
    "validate",
    // sets
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
];

/// Adds kube's libraries to `env`.
pub fn install(env: &mut cel::Env) {
    // Each library registers distinct names and signatures: a failure is a bug here,
    // caught by every test that builds an environment.
    let installed = env
        .add_extension(cel::extensions::strings)
        .and_then(|()| env.add_extension(cel::extensions::lists))
        .and_then(|()| lists::install(env))
        .and_then(|()| regex::install(env))
        .and_then(|()| sets::install(env))
        .and_then(|()| urls::install(env))
        .and_then(|()| net::install(env))
        .and_then(|()| quantity::install(env))
        .and_then(|()| format::install(env));
    if let Err(e) = installed {
        panic!("kube's CEL libraries conflict with the environment: {e}");
    }
}

/// Runs `imp` over the arguments as [`Value`]s, and hands its result back to the
/// interpreter.
pub(crate) fn call<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    imp: Imp,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let values = args
        .iter()
        .map(|a| Value::try_from(&**a))
        .collect::<Result<Vec<_>, _>>()?;
    let result: Box<dyn Val> = imp(&values)?.try_into()?;
    Ok(CowVal::from(result as Box<dyn Val + 'v>))
}

/// Registers a global overload of `name` taking `args`.
fn global(
    env: &mut Env,
    name: &str,
    args: &[Type],
    op: cel::common::functions::Function,
) -> Result<(), cel::DeclarationError> {
    env.add_overload(name, &overload_id(name, None, args), owned(args), op)
}

/// Registers a member overload of `name` on `target` taking `args`.
fn member(
    env: &mut Env,
    name: &str,
    target: &Type,
    args: &[Type],
    op: cel::common::functions::Function,
) -> Result<(), cel::DeclarationError> {
    env.add_member_overload(
        name,
        &overload_id(name, Some(target), args),
        target.to_owned(),
        owned(args),
        op,
    )
}

fn owned(types: &[Type]) -> Vec<Type> {
    types.iter().map(Type::to_owned).collect()
}

fn overload_id(name: &str, target: Option<&Type>, args: &[Type]) -> String {
    let mut id = String::from("k8s_");
    if let Some(target) = target {
        id.push_str(target.name());
        id.push('_');
    }
    id.push_str(name);
    for arg in args {
        id.push('_');
        id.push_str(arg.name());
    }
    id
}

/// Bridges a [`Value`] function to an overload: `op!(path)`.
macro_rules! op {
    ($imp:expr) => {
        |args| $crate::cel::library::call(args, $imp)
    };
}
pub(crate) use op;

/// An error of a library function, as kube words it (`types.NewErr`).
fn error(function: &str, message: impl std::fmt::Display) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// The string argument at `i`.
pub(crate) fn string_arg<'a>(
    function: &str,
    args: &'a [Value],
    i: usize,
) -> Result<&'a str, ExecutionError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.as_str()),
        other => Err(error(function, format!("expected a string, got {other:?}"))),
    }
}

/// The list argument at `i`.
fn list_arg<'a>(
    function: &str,
    args: &'a [Value],
    i: usize,
) -> Result<&'a [Value], ExecutionError> {
    match args.get(i) {
        Some(Value::List(l)) => Ok(l.as_slice()),
        other => Err(error(function, format!("expected a list, got {other:?}"))),
    }
}

/// The opaque value of type `T` at `i`.
fn opaque_arg<'a, T: 'static>(
    function: &str,
    args: &'a [Value],
    i: usize,
) -> Result<&'a T, ExecutionError> {
    match args.get(i) {
        Some(Value::Opaque(o)) => o
            .downcast_ref::<T>()
            .ok_or_else(|| error(function, format!("unexpected {}", o.runtime_type_name()))),
        other => Err(error(function, format!("unexpected argument {other:?}"))),
    }
}

/// An optional holding `value`, or none.
fn optional(value: Option<Value>) -> Value {
    let optional = match value {
        Some(v) => cel::objects::OptionalValue::of(v),
        None => cel::objects::OptionalValue::none(),
    };
    Value::Opaque(std::sync::Arc::new(optional))
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::cel::{Activation, Budget, Environment, Value};

    /// Evaluates `source` in an environment with no variables.
    pub(crate) fn eval(source: &str) -> Result<Value, String> {
        let env = Environment::new(&[]);
        let expression = env.compile(source).map_err(|e| e.to_string())?;
        expression
            .evaluate(&Activation::new(), &mut Budget::admission())
            .map_err(|e| e.to_string())
    }

    /// Asserts every expression evaluates to `true`.
    pub(crate) fn assert_true(sources: &[&str]) {
        for source in sources {
            assert_eq!(eval(source), Ok(Value::Bool(true)), "{source}");
        }
    }

    /// Asserts every expression fails with an error containing its text.
    pub(crate) fn assert_errors(cases: &[(&str, &str)]) {
        for (source, wanted) in cases {
            match eval(source) {
                Err(e) => assert!(e.contains(wanted), "{source}: {e} lacks {wanted}"),
                Ok(v) => panic!("{source}: {v:?}, wanted an error with {wanted}"),
            }
        }
    }

    #[test]
    fn cel_go_strings_extension_is_on() {
        assert_true(&[
            "'hello'.charAt(1) == 'e'",
            "'hello'.indexOf('l') == 2",
            "'hello'.lastIndexOf('l') == 3",
            "'TacoCat'.lowerAscii() == 'tacocat'",
            "'TacoCat'.upperAscii() == 'TACOCAT'",
            "'a-b-c'.replace('-', '') == 'abc'",
            "'a,b'.split(',') == ['a', 'b']",
            "'hello'.substring(1, 3) == 'el'",
            "'  x '.trim() == 'x'",
            "['a', 'b'].join('-') == 'a-b'",
            "strings.quote('a\"b') == '\"a\\\\\"b\"'",
            "'%d items'.format([3]) == '3 items'",
        ]);
    }

    #[test]
    fn cel_go_lists_extension_is_on() {
        assert_true(&[
            "[1, 2, 3].slice(1, 2) == [2]",
            "[[1], [2]].flatten() == [1, 2]",
            "[3, 1, 2].sort() == [1, 2, 3]",
            "lists.range(3) == [0, 1, 2]",
        ]);
    }
}
