//! The warnings of one request, recorded as kube-apiserver's recorder
//! (k8s.io/apiserver/pkg/endpoints/filters/warning.go) records them: each text once, and
//! at most about 4 KiB of text in all, so that no request's warnings grow without bound.
//!
//! Texts are kept whole until their runes would pass [`TOTAL_RUNES`]; from then on every
//! warning, those kept already included, is cut to [`ITEM_RUNES`] runes, and once the total
//! reaches [`TOTAL_RUNES`] again the rest are dropped. A text with a control character
//! cannot be a `Warning` header and is dropped too.

use std::collections::HashSet;
use std::sync::Mutex;

/// kube's `truncateAtTotalRunes`.
pub const TOTAL_RUNES: usize = 4 * 1024;

/// kube's `truncateItemRunes`.
pub const ITEM_RUNES: usize = 256;

/// A deduplicating, bounded list of warnings, shared by the clones of a request's context.
#[derive(Debug, Default)]
pub struct WarningRecorder(Mutex<Recorded>);

#[derive(Debug, Default)]
struct Recorded {
    /// Every text seen (a set, so that each warning costs the same however many came before).
    seen: HashSet<String>,
    /// The texts kept, whole, in order.
    kept: Vec<String>,
    /// Runes of text written so far (after cutting, once cutting).
    written: usize,
    /// Whether the total passed [`TOTAL_RUNES`], so that every text is cut.
    truncating: bool,
}

impl WarningRecorder {
    /// kube's `recorder.AddWarning`.
    pub fn add(&self, text: String) {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if text.is_empty() || (r.truncating && r.written >= TOTAL_RUNES) {
            return;
        }
        if r.seen.contains(&text) {
            return;
        }
        r.seen.insert(text.clone());
        // kube's NewWarningHeader refuses control characters: no header, nothing counted.
        if text.chars().any(char::is_control) {
            return;
        }
        let runes = text.chars().count();
        let shown = if r.truncating {
            runes.min(ITEM_RUNES)
        } else {
            runes
        };
        r.kept.push(text);
        if r.truncating || r.written + shown <= TOTAL_RUNES {
            r.written += shown;
            return;
        }
        // Past the total: every warning, the earlier ones again, is cut.
        r.truncating = true;
        r.written = r
            .kept
            .iter()
            .map(|t| t.chars().count().min(ITEM_RUNES))
            .sum();
    }

    /// The warnings to send, cut when the total passed [`TOTAL_RUNES`].
    pub fn warnings(&self) -> Vec<String> {
        let r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !r.truncating {
            return r.kept.clone();
        }
        r.kept
            .iter()
            .map(|t| t.chars().take(ITEM_RUNES).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(texts: impl IntoIterator<Item = String>) -> Vec<String> {
        let recorder = WarningRecorder::default();
        for text in texts {
            recorder.add(text);
        }
        recorder.warnings()
    }

    #[test]
    fn each_text_is_kept_once_in_order() {
        let got = recorded(["b", "a", "b", "", "c"].map(String::from));
        assert_eq!(got, ["b", "a", "c"]);
    }

    #[test]
    fn control_characters_are_not_headers() {
        assert_eq!(recorded(["a\nb".into(), "ok".into()]), ["ok"]);
    }

    /// kube's own test cases (TestTruncation in warning_test.go): what fits is whole; past
    /// the total every text is cut to 256 runes; past it again the rest are dropped.
    #[test]
    fn the_total_is_bounded_as_kubes() {
        let long = "x".repeat(ITEM_RUNES + 100);
        // 15 texts of 256 runes fit in 4096; the 16th (356) does not: all are cut.
        let mut texts: Vec<String> = (0..15).map(|i| format!("{i:0256}")).collect();
        texts.push(long.clone());
        let got = recorded(texts.clone());
        assert_eq!(got.len(), 16);
        assert!(got.iter().all(|t| t.chars().count() <= ITEM_RUNES));
        assert_eq!(got[15], "x".repeat(ITEM_RUNES));
        // Written: 16 × 256 = 4096, so one more is dropped.
        texts.push("late".into());
        assert_eq!(recorded(texts).len(), 16);
    }

    /// 200,000 warnings cost linear time and leave at most 4096 + 256 runes.
    #[test]
    fn many_warnings_are_bounded() {
        let got = recorded((0..200_000).map(|i| format!("unknown field \"spec.f{i}\"")));
        let runes: usize = got.iter().map(|t| t.chars().count()).sum();
        assert!(runes <= TOTAL_RUNES + ITEM_RUNES, "{runes}");
        assert_eq!(got[0], "unknown field \"spec.f0\"");
    }

    /// Runes, not bytes, are counted and cut.
    #[test]
    fn cuts_fall_between_runes() {
        let wide = "é".repeat(TOTAL_RUNES + 1);
        let got = recorded([wide]);
        assert_eq!(got, ["é".repeat(ITEM_RUNES)]);
    }
}
