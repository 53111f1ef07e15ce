//! Kubernetes naming rules: default plurals and the name formats kube-apiserver enforces.
//!
//! `check.rs` uses the predicates to reject names the API server would refuse at run time;
//! `expand.rs` uses [`plural`] for the default URL segment.

/// The English plural of a lower-case singular kind, as kubebuilder's CRD generator (flect)
/// forms it for the names kinds have, and kube-rs for the regular ones:
///
/// | the singular | its plural | e.g. |
/// |---|---|---|
/// | a few irregular nouns, whole or as the last word | their own | `person` → `people`, `child` → `children`, `datum` → `data`, `index` → `indices` |
/// | ends in `ss`, `us`, `x`, `z`, `ch` or `sh` | `-es` | `ingress` → `ingresses`, `status` → `statuses`, `box` → `boxes` |
/// | ends in `sis` | `-ses` | `analysis` → `analyses` |
/// | ends in any other `s` (already plural, or a name) | itself | `stats` → `stats`, `metrics` → `metrics`, `redis` → `redis` |
/// | a consonant and `y` | `-ies` | `policy` → `policies` (`gateway` → `gateways`) |
/// | anything else | `-s` | `flunder` → `flunders` |
///
/// A kind whose plural is none of these sets `#[resource(plural = "...")]`.
pub fn plural(singular: &str) -> String {
    /// Irregular plurals, matched at the end of the kind (`BackupPerson` → `backuppeople`).
    const IRREGULAR: [(&str, &str); 8] = [
        ("person", "people"),
        ("child", "children"),
        ("datum", "data"),
        ("index", "indices"),
        ("matrix", "matrices"),
        ("vertex", "vertices"),
        ("criterion", "criteria"),
        ("schema", "schemas"),
    ];
    const ADD_ES: [&str; 6] = ["ss", "us", "x", "z", "ch", "sh"];
    if let Some((stem, plural)) = IRREGULAR
        .iter()
        .find_map(|(one, many)| singular.strip_suffix(one).map(|stem| (stem, many)))
    {
        return format!("{stem}{plural}");
    }
    if ADD_ES.iter().any(|end| singular.ends_with(end)) {
        return format!("{singular}es");
    }
    if let Some(stem) = singular.strip_suffix("sis") {
        return format!("{stem}ses");
    }
    if singular.ends_with('s') {
        return singular.to_owned();
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

    /// The rules' table, each row as kubebuilder (flect) pluralises the same kind.
    #[test]
    fn plurals_of_kinds() {
        let cases = [
            ("flunder", "flunders"),
            ("fischer", "fischers"),
            ("status", "statuses"),
            ("backupstats", "backupstats"),
            ("stats", "stats"),
            ("metrics", "metrics"),
            ("redis", "redis"),
            ("ingress", "ingresses"),
            ("class", "classes"),
            ("bus", "buses"),
            ("analysis", "analyses"),
            ("box", "boxes"),
            ("match", "matches"),
            ("mesh", "meshes"),
            ("policy", "policies"),
            ("networkpolicy", "networkpolicies"),
            ("gateway", "gateways"),
            ("key", "keys"),
            ("y", "ys"),
            ("person", "people"),
            ("salesperson", "salespeople"),
            ("child", "children"),
            ("datum", "data"),
            ("schema", "schemas"),
            ("index", "indices"),
            ("endpoint", "endpoints"),
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
