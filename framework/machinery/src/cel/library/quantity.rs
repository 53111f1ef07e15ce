//! kube's quantity library (`library/quantity.go`): `quantity(string)`, `isQuantity` and
//! the arithmetic and comparisons of a `resource.Quantity`.
//!
//! A quantity is held exactly in nano units (as `resource.Quantity` rounds a parsed value
//! up to the nearest nano), in an `i128`: ample for every quantity a cluster uses (up to
//! about 10^29), larger ones saturate.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::types::{INT_TYPE, STRING_TYPE, Type};
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};

use super::{error, global, member, op, opaque_arg, string_arg};

/// The CEL type name of a quantity (kube's `kubernetes.Quantity`).
pub(crate) const QUANTITY_TYPE: &str = "kubernetes.Quantity";

const NANO: i128 = 1_000_000_000;
const CAP: i128 = i128::MAX / 1024;

/// `resource.ErrFormatWrong`'s words.
const FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let q = Type::new_opaque_type(QUANTITY_TYPE);
    global(env, "quantity", &[STRING_TYPE], op!(to_quantity))?;
    global(env, "isQuantity", &[STRING_TYPE], op!(is_quantity))?;
    member(env, "sign", &q, &[], op!(sign))?;
    member(env, "isInteger", &q, &[], op!(is_integer))?;
    member(env, "asInteger", &q, &[], op!(as_integer))?;
    member(
        env,
        "asApproximateFloat",
        &q,
        &[],
        op!(as_approximate_float),
    )?;
    member(env, "add", &q, &[q.to_owned()], op!(add))?;
    member(env, "add", &q, &[INT_TYPE], op!(add))?;
    member(env, "sub", &q, &[q.to_owned()], op!(sub))?;
    member(env, "sub", &q, &[INT_TYPE], op!(sub))?;
    member(env, "compareTo", &q, &[q.to_owned()], op!(compare_to))?;
    member(
        env,
        "isGreaterThan",
        &q,
        &[q.to_owned()],
        op!(is_greater_than),
    )?;
    member(env, "isLessThan", &q, &[q.to_owned()], op!(is_less_than))?;
    Ok(())
}

/// A quantity, in nano units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Quantity {
    nanos: i128,
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        QUANTITY_TYPE
    }
}

impl Quantity {
    /// Parses a quantity as `resource.ParseQuantity` does, or says why not.
    pub(crate) fn parse(source: &str) -> Result<Quantity, &'static str> {
        let (negative, rest) = match source.as_bytes().first() {
            Some(b'-') => (true, &source[1..]),
            Some(b'+') => (false, &source[1..]),
            _ => (false, source),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return Err(FORMAT_WRONG);
        }
        if !suffix
            .trim_start_matches(|c: char| "eEinumkKMGTP".contains(c))
            .trim_start_matches(['+', '-'])
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            return Err(FORMAT_WRONG);
        }
        let (exp10, exp2) = parse_suffix(suffix).ok_or("unable to parse quantity's suffix")?;
        let mut mantissa: i128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .saturating_mul(10)
                .saturating_add(i128::from(digit - b'0'));
        }
        let scale = 9 + exp10 - fraction.len() as i64;
        let mut nanos = mantissa.saturating_mul(1i128 << exp2.min(60)).min(CAP);
        if scale >= 0 {
            for _ in 0..scale.min(40) {
                nanos = nanos.saturating_mul(10).min(CAP);
            }
        } else {
            // Rounded up to the nearest nano, as `resource.Quantity` does.
            let divisor = 10i128.checked_pow((-scale) as u32).unwrap_or(CAP);
            nanos = (nanos + divisor - 1) / divisor;
        }
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
        })
    }

    fn as_int64(&self) -> Option<i64> {
        if self.nanos % NANO != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANO).ok()
    }
}

/// The powers of ten and of two a suffix stands for.
fn parse_suffix(suffix: &str) -> Option<(i64, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.trim_start_matches(['+', '-']);
            if digits.is_empty() || exponent.len() - digits.len() > 1 {
                return None;
            }
            let value: i64 = exponent.parse().ok()?;
            (value.clamp(-60, 60), 0)
        }
    })
}

fn value(q: Quantity) -> Value {
    Value::Opaque(Arc::new(q))
}

fn arg(function: &str, args: &[Value], i: usize) -> Result<Quantity, ExecutionError> {
    match args.get(i) {
        Some(Value::Int(n)) => Ok(Quantity {
            nanos: i128::from(*n) * NANO,
        }),
        _ => opaque_arg::<Quantity>(function, args, i).copied(),
    }
}

fn to_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = Quantity::parse(string_arg("quantity", args, 0)?).map_err(|e| error("quantity", e))?;
    Ok(value(q))
}

fn is_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        Quantity::parse(string_arg("isQuantity", args, 0)?).is_ok(),
    ))
}

fn sign(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(arg("sign", args, 0)?.nanos.signum() as i64))
}

fn is_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(arg("isInteger", args, 0)?.as_int64().is_some()))
}

fn as_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = arg("asInteger", args, 0)?;
    q.as_int64()
        .map(Value::Int)
        .ok_or_else(|| error("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Float(
        arg("asApproximateFloat", args, 0)?.nanos as f64 / NANO as f64,
    ))
}

fn add(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = (arg("add", args, 0)?, arg("add", args, 1)?);
    Ok(value(Quantity {
        nanos: a.nanos.saturating_add(b.nanos),
    }))
}

fn sub(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = (arg("sub", args, 0)?, arg("sub", args, 1)?);
    Ok(value(Quantity {
        nanos: a.nanos.saturating_sub(b.nanos),
    }))
}

fn compare(function: &str, args: &[Value]) -> Result<Ordering, ExecutionError> {
    Ok(arg(function, args, 0)?.cmp(&arg(function, args, 1)?))
}

fn compare_to(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(compare("compareTo", args)? as i64))
}

fn is_greater_than(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        compare("isGreaterThan", args)? == Ordering::Greater,
    ))
}

fn is_less_than(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(compare("isLessThan", args)? == Ordering::Less))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_errors, assert_true};

    /// Cases of kube's `library/quantity_test.go`.
    #[test]
    fn kube_quantity_cases() {
        assert_true(&[
            "isQuantity('20')",
            "isQuantity('20M')",
            "isQuantity('20Mi')",
            "isQuantity('1.5k')",
            "isQuantity('-1e3')",
            "!isQuantity('')",
            "!isQuantity('200Mib')",
            "!isQuantity('10Gi10')",
            "quantity('20') == quantity('20')",
            "quantity('200M') == quantity('0.2G')",
            "quantity('2M') == quantity('0.002G')",
            "quantity('1Ki') == quantity('1024')",
            "quantity('1e3') == quantity('1k')",
            "quantity('1.5') != quantity('1.6')",
            "quantity('50M').isGreaterThan(quantity('50Mi')) == false",
            "quantity('50Mi').isGreaterThan(quantity('50M'))",
            "quantity('50M').isLessThan(quantity('50Mi'))",
            "quantity('200M').compareTo(quantity('0.2G')) == 0",
            "quantity('50M').compareTo(quantity('50Mi')) == -1",
            "quantity('50Mi').compareTo(quantity('50M')) == 1",
            "quantity('50k').add(quantity('20')) == quantity('50.02k')",
            "quantity('50k').add(20) == quantity('50020')",
            "quantity('50k').sub(quantity('20')) == quantity('49.98k')",
            "quantity('50k').sub(20) == quantity('49980')",
            "quantity('50').sub(quantity('100')).sign() == -1",
            "quantity('0').sign() == 0",
            "quantity('50Mi').sign() == 1",
            "quantity('50k').isInteger()",
            "!quantity('9999999999999999999999999999999999999G').isInteger()",
            "!quantity('50m').isInteger()",
            "quantity('50k').asInteger() == 50000",
            "quantity('50k').asApproximateFloat() == 50000.0",
            "quantity('1n').add(quantity('1n')) == quantity('2n')",
        ]);
        assert_errors(&[
            (
                "quantity('Mi')",
                "quantities must match the regular expression",
            ),
            (
                "quantity('50m').asInteger()",
                "cannot convert value to integer",
            ),
            (
                "quantity('9999999999999999999999999999999999999G').asInteger()",
                "cannot convert value to integer",
            ),
        ]);
    }
}
