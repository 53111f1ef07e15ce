//! Quantities written in the canonical form Go's `resource.Quantity` gives them, so answers
//! read as metrics-server's and the Go adapters' do (`250m`, `2`, `1500k`, `64Mi`).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A decimal quantity of `nanos` billionths (CPU in nanocores, as metrics-server's
/// `NewScaledQuantity(v, -9)`): the largest of `n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`, `E`
/// that keeps it whole, as Go's `DecimalSI` canonical form.
pub fn decimal_nanos(nanos: i128) -> Quantity {
    const SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    if nanos == 0 {
        return Quantity("0".into());
    }
    let (mut mantissa, mut step) = (nanos, 0);
    while step + 1 < SUFFIXES.len() && mantissa % 1000 == 0 {
        mantissa /= 1000;
        step += 1;
    }
    Quantity(format!("{mantissa}{}", SUFFIXES[step]))
}

/// A metric's value as the Go adapters write it (`resource.NewMilliQuantity(v*1000,
/// DecimalSI)`): to the thousandth. `None` for `NaN` and the infinities, which no quantity
/// holds.
pub fn decimal_value(value: f64) -> Option<Quantity> {
    if !value.is_finite() {
        return None;
    }
    let millis = (value * 1000.0).round() as i128;
    Some(decimal_nanos(millis * 1_000_000))
}

/// `bytes` in Go's `BinarySI` canonical form: `Ki`, `Mi`, ... while it divides by 1024,
/// plain when it does not, and as a decimal quantity below 1024 (`1k` for 1000).
pub fn binary_bytes(bytes: u64) -> Quantity {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return decimal_nanos(i128::from(bytes) * 1_000_000_000);
    }
    let (mut mantissa, mut step) = (bytes, 0);
    while step + 1 < SUFFIXES.len() && mantissa % 1024 == 0 {
        mantissa /= 1024;
        step += 1;
    }
    Quantity(format!("{mantissa}{}", SUFFIXES[step]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_as_go_writes_them() {
        let d = |n| decimal_nanos(n).0;
        assert_eq!(d(0), "0");
        assert_eq!(d(250_000_000), "250m");
        assert_eq!(d(123_456_789), "123456789n");
        assert_eq!(d(2_000_000_000), "2");
        assert_eq!(d(1_500_000_000_000_000), "1500k");
        assert_eq!(d(1_500), "1500n");
        let v = |x| decimal_value(x).map(|q| q.0);
        assert_eq!(v(12.5).as_deref(), Some("12500m"));
        assert_eq!(v(3.0).as_deref(), Some("3"));
        assert_eq!(v(-0.25).as_deref(), Some("-250m"));
        assert_eq!(v(f64::NAN), None);
        assert_eq!(v(f64::INFINITY), None);
        let b = |n| binary_bytes(n).0;
        assert_eq!(b(0), "0");
        // Below 1024 Go writes it as a decimal quantity.
        assert_eq!(b(1000), "1k");
        assert_eq!(b(64 << 20), "64Mi");
        assert_eq!(b(1536), "1536");
        assert_eq!(b(3 << 10), "3Ki");
        assert_eq!(b(1_500_000), "1500000");
    }
}
