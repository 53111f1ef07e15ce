//! Which keys an attribute accepts: unknown keys get a suggestion, and a key that may appear
//! once is reported when it appears again, at the repeat.

use std::collections::HashSet;

use quote::ToTokens;
use syn::{Meta, Path};

use crate::ctxt::Ctxt;

/// The keys of one attribute (`#[resource(...)]` or `printcolumn(...)`) and those seen so far.
pub struct Keys {
    /// Where the keys are written, for messages, e.g. `#[resource(...)]`.
    context: &'static str,
    known: &'static [&'static str],
    repeatable: &'static [&'static str],
    seen: HashSet<String>,
    /// Known keys suggested for misspelt ones: not reported missing on top of the typo.
    suggested: HashSet<String>,
}

impl Keys {
    /// Accepts `known` keys in `context`; only those in `repeatable` may appear more than once.
    pub fn new(
        context: &'static str,
        known: &'static [&'static str],
        repeatable: &'static [&'static str],
    ) -> Self {
        Self {
            context,
            known,
            repeatable,
            seen: HashSet::new(),
            suggested: HashSet::new(),
        }
    }

    /// The key of `item` when it is known and not a forbidden repeat; otherwise reports why.
    pub fn accept(&mut self, cx: &Ctxt, item: &Meta) -> Option<String> {
        let key = name(item.path());
        if !self.known.contains(&key.as_str()) {
            cx.error_spanned_by(item.path(), self.unknown(&key));
            return None;
        }
        if !self.seen.insert(key.clone()) && !self.repeatable.contains(&key.as_str()) {
            let msg = format!(
                "duplicate key `{key}` in {}: it may be given once",
                self.context
            );
            cx.error_spanned_by(item, msg);
            return None;
        }
        Some(key)
    }

    /// The known keys that appeared, well-formed, malformed or misspelt: those mistakes are
    /// reported where they are, so the key must not be reported missing as well.
    pub fn into_given(self) -> HashSet<String> {
        self.seen.into_iter().chain(self.suggested).collect()
    }

    fn unknown(&mut self, key: &str) -> String {
        let hint = match closest(key, self.known) {
            Some(known) => {
                self.suggested.insert(known.to_owned());
                format!("did you mean `{known}`?")
            }
            None => format!("expected one of: {}", self.known.join(", ")),
        };
        format!("unknown key `{key}` in {}; {hint}", self.context)
    }
}

/// A key as written: `group`, `crate`.
pub fn name(path: &Path) -> String {
    match path.get_ident() {
        Some(ident) => ident.to_string(),
        None => path.to_token_stream().to_string().replace(' ', ""),
    }
}

/// The known key nearest to a misspelt one, when it is near enough to be a likely typo.
fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let (best, distance) = known
        .iter()
        .map(|k| (*k, edit_distance(key, k)))
        .min_by_key(|(_, d)| *d)?;
    (distance <= 2.max(key.len() / 3)).then_some(best)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("group", "group"), 0);
        assert_eq!(edit_distance("grup", "group"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn suggests_only_near_keys() {
        let known = ["group", "version", "shortnames"];
        assert_eq!(closest("grop", &known), Some("group"));
        assert_eq!(closest("shortname", &known), Some("shortnames"));
        assert_eq!(closest("zzz", &known), None);
    }
}
