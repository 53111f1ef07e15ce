//! The Prometheus text exposition format (version 0.0.4), what both the kubelet's
//! `/metrics/resource` and the `--scrape-url` endpoints answer: `# HELP` / `# TYPE` lines and
//! samples `name{label="value",...} value [timestamp_ms]`.
//!
//! A parser of our own, strict as Prometheus' `textparse` is: one malformed line makes the
//! whole scrape bad (metrics-server drops such a batch too), so half a page never passes for
//! the truth.

use std::collections::BTreeMap;
use std::fmt;

/// One sample of a series.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value (`NaN`, `+Inf` and `-Inf` included).
    pub value: f64,
    /// When it was measured, in milliseconds since the epoch, if the endpoint said.
    pub timestamp_ms: Option<i64>,
}

/// Why a page is not the text format: the line (from 1) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// The line, counted from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses a whole page; the first malformed line fails it.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let fail = |message: String| ParseError {
            line: i + 1,
            message,
        };
        let line = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            comment_line(comment).map_err(fail)?;
            continue;
        }
        samples.push(sample_line(line).map_err(fail)?);
    }
    Ok(samples)
}

/// `# HELP name text`, `# TYPE name type`, or any other comment (ignored).
fn comment_line(comment: &str) -> Result<(), String> {
    let mut words = comment.split_whitespace();
    match words.next() {
        Some("TYPE") => {
            let name = words.next().ok_or("TYPE without a metric name")?;
            check_metric_name(name)?;
            match words.next() {
                Some("counter" | "gauge" | "histogram" | "summary" | "untyped") => Ok(()),
                Some(other) => Err(format!("unknown metric type {other:?}")),
                None => Err("TYPE without a type".into()),
            }
        }
        Some("HELP") => {
            let name = words.next().ok_or("HELP without a metric name")?;
            check_metric_name(name)
        }
        _ => Ok(()),
    }
}

fn sample_line(line: &str) -> Result<Sample, String> {
    let name_len = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_len];
    check_metric_name(name)?;
    let mut rest = &line[name_len..];
    let mut labels = BTreeMap::new();
    // Blanks may stand between the name and its labels.
    if let Some(after) = rest.trim_start_matches([' ', '\t']).strip_prefix('{') {
        rest = label_set(after, &mut labels)?;
    }
    let mut fields = rest.split([' ', '\t']).filter(|f| !f.is_empty());
    if !rest.starts_with([' ', '\t']) {
        return Err(format!("expected a space before the value of {name}"));
    }
    let value = fields
        .next()
        .ok_or_else(|| format!("{name} has no value"))?;
    let value = parse_value(value).ok_or_else(|| format!("invalid value {value:?}"))?;
    let timestamp_ms = match fields.next() {
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| format!("invalid timestamp {t:?}"))?,
        ),
        None => None,
    };
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the timestamp"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
        timestamp_ms,
    })
}

/// Reads `label="value",...}` into `labels`; returns what follows the `}`.
fn label_set<'a>(
    mut rest: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("invalid label name at {rest:?}"));
        }
        rest = rest[name_len..].trim_start_matches([' ', '\t']);
        rest = rest
            .strip_prefix('=')
            .ok_or_else(|| format!("expected '=' after label {name}"))?
            .trim_start_matches([' ', '\t']);
        rest = rest
            .strip_prefix('"')
            .ok_or_else(|| format!("expected a quoted value for label {name}"))?;
        let (value, after) = label_value(rest)?;
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} given twice"));
        }
        rest = after.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(format!("expected ',' or '}}' after label {name}"));
        }
    }
}

/// A label value up to its closing quote, with the format's three escapes (`\\`, `\"`, `\n`).
fn label_value(rest: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &rest[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => value.push('\\'),
                Some((_, '"')) => value.push('"'),
                Some((_, 'n')) => value.push('\n'),
                Some((_, other)) => {
                    return Err(format!("invalid escape \\{other} in a label value"));
                }
                None => break,
            },
            other => value.push(other),
        }
    }
    Err("unterminated label value".into())
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if valid {
        Ok(())
    } else {
        Err(format!("invalid metric name {name:?}"))
    }
}

/// A value as Go's `strconv.ParseFloat` reads it, which the format names: decimals and
/// exponents, `NaN`, `+Inf`, `-Inf` (and `Inf`).
fn parse_value(value: &str) -> Option<f64> {
    match value {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        // Rust also reads `inf`, `infinity` and `nan` in any case; the format does not.
        v if v
            .chars()
            .any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') =>
        {
            None
        }
        v => v.parse().ok(),
    }
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            write!(f, "{{{}}}", labels.join(","))?;
        }
        write!(f, " {}", self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_the_kubelets_resource_page() {
        let page = "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web-1\"} 12.5 1700000000123
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.073741824e+09 1700000000456
";
        let samples = parse(page).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].name, "container_cpu_usage_seconds_total");
        assert_eq!(
            samples[0].labels,
            labels(&[
                ("container", "app"),
                ("namespace", "default"),
                ("pod", "web-1")
            ])
        );
        assert_eq!(samples[0].value, 12.5);
        assert_eq!(samples[0].timestamp_ms, Some(1_700_000_000_123));
        assert_eq!(samples[1].value, 1_073_741_824.0);
        assert!(samples[1].labels.is_empty());
    }

    #[test]
    fn escapes_special_values_and_spacing() {
        let page = "queue_depth{path=\"C:\\\\tmp\",msg=\"say \\\"hi\\\"\\n\",} NaN\n\
                    a:b_c { x = \"1\" }\t+Inf\n\
                    neg -Inf 5\n\
                    exp 1.5E3\n";
        let samples = parse(page).unwrap();
        assert_eq!(
            samples[0].labels,
            labels(&[("path", "C:\\tmp"), ("msg", "say \"hi\"\n")])
        );
        assert!(samples[0].value.is_nan());
        assert_eq!(samples[1].name, "a:b_c");
        assert_eq!(samples[1].value, f64::INFINITY);
        assert_eq!(samples[2].value, f64::NEG_INFINITY);
        assert_eq!(samples[2].timestamp_ms, Some(5));
        assert_eq!(samples[3].value, 1500.0);
    }

    #[test]
    fn a_malformed_line_fails_the_page_with_its_number() {
        let bad = [
            ("ok 1\n<html>\n", 2),
            ("x{a=\"1\" 1\n", 1),
            ("x{a=\"1} 1\n", 1),
            ("x{a=1} 1\n", 1),
            ("x{a=\"\\t\"} 1\n", 1),
            ("x{a=\"1\",a=\"2\"} 1\n", 1),
            ("x one\n", 1),
            ("x 1 2 3\n", 1),
            ("x 1 1.5\n", 1),
            ("x\n", 1),
            ("x{}1\n", 1),
            ("9x 1\n", 1),
            ("x inf\n", 1),
            ("# TYPE x cheese\n", 1),
            ("# TYPE\n", 1),
        ];
        for (page, line) in bad {
            let err = parse(page).expect_err(page);
            assert_eq!(err.line, line, "{page:?}: {err}");
        }
        // Other comments and blank lines are fine.
        assert_eq!(parse("# just a note\n\n# EOF\n").unwrap(), vec![]);
    }
}

/// The fuzz target `prometheus_text` (fuzz/): a scraped page, whatever its bytes, parses or
/// is refused, and what parses decodes as a kubelet's page; nothing panics.
#[cfg(any(fuzzing, test))]
pub fn fuzz_page(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(samples) = parse(text) {
        crate::kubelet::decode(&samples, std::time::SystemTime::UNIX_EPOCH);
    }
}

#[cfg(test)]
mod fuzz_regressions {
    /// The target over its seeds and the inputs that once failed (fuzz/corpus,
    /// fuzz/regressions), in the normal suite.
    #[test]
    fn the_fuzz_target_holds_on_its_seeds_and_past_failures() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let mut inputs = 0;
        for folder in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(folder).join("prometheus_text")) else {
                continue;
            };
            for entry in entries {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                super::fuzz_page(&data);
                inputs += 1;
            }
        }
        assert!(inputs > 0, "fuzz/corpus/prometheus_text has seeds");
    }
}
