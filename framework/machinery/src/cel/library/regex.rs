//! kube's regex library (`library/regex.go`): `<string>.find(regex)` and
//! `<string>.findAll(regex[, limit])`; `matches` is CEL's own.

use cel::common::types::{INT_TYPE, STRING_TYPE};
use cel::{Env, ExecutionError, Value};

use super::{error, member, op, string_arg};

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    member(env, "find", &STRING_TYPE, &[STRING_TYPE], op!(find))?;
    member(env, "findAll", &STRING_TYPE, &[STRING_TYPE], op!(find_all))?;
    member(
        env,
        "findAll",
        &STRING_TYPE,
        &[STRING_TYPE, INT_TYPE],
        op!(find_all),
    )?;
    Ok(())
}

/// `regex`, compiled; RE2 and the `regex` crate share the syntax kube's rules use.
fn compile(function: &str, regex: &str) -> Result<::regex::Regex, ExecutionError> {
    ::regex::RegexBuilder::new(regex)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| error(function, format!("Illegal regex: {e}")))
}

fn find(args: &[Value]) -> Result<Value, ExecutionError> {
    let text = string_arg("find", args, 0)?;
    let regex = compile("find", string_arg("find", args, 1)?)?;
    let found = regex.find(text).map_or("", |m| m.as_str());
    Ok(Value::String(found.to_string().into()))
}

fn find_all(args: &[Value]) -> Result<Value, ExecutionError> {
    let text = string_arg("findAll", args, 0)?;
    let regex = compile("findAll", string_arg("findAll", args, 1)?)?;
    // kube: a negative limit is no limit, zero finds nothing.
    let limit = match args.get(2) {
        Some(Value::Int(n)) if *n >= 0 => *n as usize,
        _ => usize::MAX,
    };
    let found: Vec<Value> = regex
        .find_iter(text)
        .take(limit)
        .map(|m| Value::String(m.as_str().to_string().into()))
        .collect();
    Ok(Value::List(found.into()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_errors, assert_true};

    /// Cases of kube's `library/regex_test.go` and `cel_test.go`.
    #[test]
    fn kube_regex_cases() {
        assert_true(&[
            "'abc 123'.find('[0-9]+') == '123'",
            "'abc'.find('[0-9]+') == ''",
            "'123 abc 456'.findAll('[0-9]+') == ['123', '456']",
            "'123 abc 456'.findAll('[0-9]+', 1) == ['123']",
            "'123 abc 456'.findAll('[0-9]+', 0) == []",
            "'123 abc 456'.findAll('[0-9]+', -1) == ['123', '456']",
            "'abc'.findAll('[0-9]+') == []",
            "'abc'.matches('^a.c$')",
        ]);
        assert_errors(&[("'abc'.find('[')", "Illegal regex")]);
    }
}
