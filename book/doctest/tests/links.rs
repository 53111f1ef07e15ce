//! What mdBook does not check: every chapter is in `SUMMARY.md` (mdBook only renders those),
//! and every link between chapters names an existing chapter and, after `#`, an existing
//! heading of it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../src")
}

/// Every chapter's text, by file name.
fn chapters() -> BTreeMap<String, String> {
    std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The text outside fenced code blocks and inline code spans, where links are links.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            let without_code: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            out.push_str(&without_code);
            out.push('\n');
        }
    }
    out
}

/// The targets of the markdown links `[text](target)` of `text`.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    prose
        .match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &prose[i + 2..];
            rest.find(')').map(|end| rest[..end].to_string())
        })
        .collect()
}

/// mdBook's anchor for a heading: lower case, letters, digits, `-` and `_`, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_chapter_is_in_the_summary() {
    let chapters = chapters();
    let summary: BTreeSet<_> = links(&chapters["SUMMARY.md"]).into_iter().collect();
    for name in chapters.keys().filter(|n| *n != "SUMMARY.md") {
        assert!(summary.contains(name), "{name} is not in SUMMARY.md");
    }
    for target in &summary {
        assert!(
            chapters.contains_key(target),
            "SUMMARY.md lists {target}, which does not exist"
        );
    }
}

#[test]
fn links_between_chapters_resolve() {
    let chapters = chapters();
    let mut broken = Vec::new();
    for (name, text) in &chapters {
        for target in links(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let file = if file.is_empty() { name.as_str() } else { file };
            let Some(linked) = chapters.get(file) else {
                broken.push(format!("{name}: {target} (no such chapter)"));
                continue;
            };
            if let Some(fragment) = fragment
                && !anchors(linked).contains(fragment)
            {
                broken.push(format!("{name}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_mdbooks() {
    assert_eq!(
        anchor(" Delegated authentication and authorization"),
        "delegated-authentication-and-authorization"
    );
    assert_eq!(anchor(" `manifests`"), "manifests");
    assert_eq!(anchor(" TLS"), "tls");
}

/// rustdoc compiles a block without an info string as Rust and mdBook highlights nothing: every
/// block names its language (`rust`, `toml`, `sh`, `yaml`, `text`...).
#[test]
fn every_code_block_names_its_language() {
    let mut bare = Vec::new();
    for (name, text) in chapters() {
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if let Some(info) = line.strip_prefix("```") {
                if !fenced && info.trim().is_empty() {
                    bare.push(format!("{name}:{}", i + 1));
                }
                fenced = !fenced;
            }
        }
    }
    assert!(bare.is_empty(), "code blocks without a language: {bare:?}");
}
