//! Kubernetes naming rules: default plurals and the name formats kube-apiserver enforces.
//!
//! `check.rs` uses the predicates to reject names the API server would refuse at run time;
//! `expand.rs` uses [`plural`] for the default URL segment.

/// The English plural of a lower-case singular, by the rules of kube-derive and
/// `k8s.io/gengo/namer`: `-es` after s, x, z, ch and sh; `y` → `ies` after a consonant;
/// `-s` otherwise.
pub fn plural(singular: &str) -> String {
    const SIBILANTS: [&str; 5] = ["s", "x", "z", "ch", "sh"];
    if SIBILANTS.iter().any(|end| singular.ends_with(end)) {
        return format!("{singular}es");
    }
    if let Some(stem) = singular.strip_suffix('y') {
        if stem.ends_with(|c: char| !"aeiou".contains(c)) {
            return format!("{stem}ies");
        }
    }
    format!("{singular}s")
}

/// `IsDNS1123Label`: at most 63 lower-case letters, digits and `-`, starting and ending
/// with a letter or digit.
pub fn is_dns1123_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.len() <= 63
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || c == '-')
}

/// `IsDNS1123Subdomain`: at most 253 characters of dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A Kubernetes API version: `v1`, `v1alpha1`, `v2beta3` (no leading zeros).
pub fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let (major, level) = split_digits(rest);
    if !is_positive(major) {
        return false;
    }
    match level
        .strip_prefix("alpha")
        .or_else(|| level.strip_prefix("beta"))
    {
        Some(n) => is_positive(n),
        None => level.is_empty(),
    }
}

/// UpperCamelCase as Kubernetes kinds are written (`Flunder`, `APIService`): an upper-case
/// ASCII letter, then ASCII letters and digits.
pub fn is_kind(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase()) && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Splits `s` after its leading ASCII digits.
fn split_digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Digits of a positive number without a leading zero.
fn is_positive(digits: &str) -> bool {
    !digits.is_empty() && !digits.starts_with('0') && digits.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_follow_gengo() {
        let cases = [
            ("flunder", "flunders"),
            ("fischer", "fischers"),
            ("status", "statuses"),
            ("box", "boxes"),
            ("quiz", "quizes"),
            ("match", "matches"),
            ("mesh", "meshes"),
            ("policy", "policies"),
            ("gateway", "gateways"),
            ("key", "keys"),
            ("y", "ys"),
        ];
        for (singular, expected) in cases {
            assert_eq!(plural(singular), expected, "plural of {singular}");
        }
    }

    #[test]
    fn labels() {
        assert!(is_dns1123_label("fl"));
        assert!(is_dns1123_label("a-1"));
        assert!(is_dns1123_label(&"a".repeat(63)));
        for bad in ["", "-a", "a-", "Fl", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad:?} is not a label");
        }
    }

    #[test]
    fn subdomains() {
        assert!(is_dns1123_subdomain("wardle.example.com"));
        assert!(is_dns1123_subdomain("metrics"));
        for bad in [
            "",
            "Wardle.example.com",
            "wardle..com",
            ".wardle",
            "wardle.",
            "a_b.com",
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?} is not a subdomain");
        }
    }

    #[test]
    fn versions() {
        for good in ["v1", "v12", "v1alpha1", "v2beta3", "v1beta10"] {
            assert!(is_version(good), "{good:?} is a version");
        }
        for bad in [
            "", "v", "1", "v0", "v01", "V1", "v1alpha", "v1gamma1", "v1alpha0", "v1-beta1",
        ] {
            assert!(!is_version(bad), "{bad:?} is not a version");
        }
    }

    #[test]
    fn kinds() {
        for good in ["Flunder", "APIService", "V1Thing"] {
            assert!(is_kind(good), "{good:?} is a kind");
        }
        for bad in ["", "flunder", "Flun_der", "Flun-der", "1Flunder", "Flündér"] {
            assert!(!is_kind(bad), "{bad:?} is not a kind");
        }
    }
}
