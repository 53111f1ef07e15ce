//! How deeply a request body nests, measured by one linear scan before it is parsed.
//!
//! kube-apiserver's decoders refuse a body nested past 10,000 levels: Go's JSON scanner with
//! `invalid character '{' exceeded max depth`, go-yaml (sigs.k8s.io/yaml) at the 10,001st
//! flow level or indentation level with `yaml: line N: exceeded max depth of 10000`. This
//! server's decoders (serde_json, serde_norway) stop at 127 levels, and parsing a YAML body
//! costs time quadratic in its flow depth (libyaml checks every open flow level at each
//! token), so depth is checked here, in linear time, before a parser sees the body.

use std::fmt;

/// kube-apiserver's limit (Go's `maxNestingDepth`, go-yaml's `max_flow_level` and
/// `max_indents`).
pub const KUBE_MAX_DEPTH: usize = 10_000;

/// The deepest body this server's decoders read: serde_json and serde_norway refuse the
/// 128th level.
pub const MAX_DEPTH: usize = 127;

/// A body nested past a limit: its [`Display`](fmt::Display) is the decoder's error as
/// kube-apiserver's decoders word it, which each verb wraps as kube's handler of that verb
/// does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TooDeep {
    /// JSON: the bracket (`{` or `[`) that went past the limit.
    Json {
        /// `b'{'` or `b'['`.
        bracket: u8,
    },
    /// YAML: where the scanner went past `limit`.
    Yaml {
        /// The line (from 0) of the token that went past the limit.
        line: usize,
        /// [`KUBE_MAX_DEPTH`] when kube-apiserver refuses the body too, else [`MAX_DEPTH`].
        limit: usize,
    },
}

impl fmt::Display for TooDeep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Go's scanner: `"invalid character " + quoteChar(c) + " exceeded max depth"`.
            Self::Json { bracket } => {
                write!(
                    f,
                    "invalid character '{}' exceeded max depth",
                    *bracket as char
                )
            }
            // go-yaml's `parser.fail()`: a line only when the problem is past the first.
            Self::Yaml { line: 0, limit } => write!(f, "yaml: exceeded max depth of {limit}"),
            Self::Yaml { line, limit } => {
                write!(f, "yaml: line {}: exceeded max depth of {limit}", line + 1)
            }
        }
    }
}

impl std::error::Error for TooDeep {}

/// Whether JSON `text` nests past [`MAX_DEPTH`]. Only brackets outside strings count;
/// whether the rest is well-formed is the parser's to say.
pub fn check_json(text: &[u8]) -> Result<(), TooDeep> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(TooDeep::Json { bracket: b });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Whether YAML `text` nests past [`MAX_DEPTH`] (flow levels and indentation levels
/// together, as the decoder counts them), with kube's limit and line when it nests past
/// [`KUBE_MAX_DEPTH`] flow levels or indentation levels (as go-yaml counts each).
///
/// The scan follows libyaml's tokens far enough to know where collections open: quoted,
/// plain and block scalars (whose brackets do not count), comments, flow collections, block
/// entries (`- `), keys (`k: `) and the indentation stack. A document it misreads is one the
/// parser refuses anyway.
pub fn check_yaml(text: &[u8]) -> Result<(), TooDeep> {
    let mut scan = YamlScan::default();
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    for (number, line) in text.split(|&b| b == b'\n').enumerate() {
        scan.line = number;
        scan.scan_line(line.strip_suffix(b"\r").unwrap_or(line));
        if scan.kube_line.is_some() {
            break;
        }
    }
    match (scan.kube_line, scan.deep_line) {
        (Some(line), _) => Err(TooDeep::Yaml {
            line,
            limit: KUBE_MAX_DEPTH,
        }),
        (None, Some(line)) => Err(TooDeep::Yaml {
            line,
            limit: MAX_DEPTH,
        }),
        (None, None) => Ok(()),
    }
}

/// The state of [`check_yaml`] between lines.
struct YamlScan {
    line: usize,
    /// Open flow collections.
    flow: usize,
    /// libyaml's indentation stack (`parser.indents`) and current indentation.
    indents: Vec<isize>,
    indent: isize,
    /// An open quoted scalar (its quote) continuing on the next line.
    quote: Option<u8>,
    /// A block scalar whose lines are those indented past this column (or blank).
    block_scalar: Option<isize>,
    /// A plain scalar in block context, which lines indented past `indent` continue.
    plain: bool,
    /// The first line past [`MAX_DEPTH`] levels in all, and past kube's limit.
    deep_line: Option<usize>,
    kube_line: Option<usize>,
}

impl Default for YamlScan {
    fn default() -> Self {
        Self {
            line: 0,
            flow: 0,
            indents: Vec::new(),
            indent: -1,
            quote: None,
            block_scalar: None,
            plain: false,
            deep_line: None,
            kube_line: None,
        }
    }
}

fn is_blank(b: Option<&u8>) -> bool {
    matches!(b, None | Some(b' ' | b'\t'))
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

impl YamlScan {
    fn scan_line(&mut self, line: &[u8]) {
        if let Some(quote) = self.quote {
            if let Some(end) = closing_quote(line, 0, quote) {
                self.quote = None;
                self.tokens(line, end);
            }
            return;
        }
        let column = line.iter().take_while(|&&b| b == b' ').count();
        let content = line[column..].iter().any(|&b| !matches!(b, b' ' | b'\t'));
        if let Some(parent) = self.block_scalar {
            if !content || column as isize > parent {
                return;
            }
            self.block_scalar = None;
        }
        if self.flow > 0 {
            self.tokens(line, 0);
            return;
        }
        if !content {
            return;
        }
        if self.plain {
            self.plain = false;
            if column as isize > self.indent && line[column] != b'#' {
                // The plain scalar goes on; its brackets are text.
                self.plain = true;
                return;
            }
        }
        if column == 0 && line.first() == Some(&b'%') {
            return; // a directive
        }
        if column == 0
            && (line.starts_with(b"---") || line.starts_with(b"..."))
            && is_blank(line.get(3))
        {
            // A document's start or end: libyaml unrolls every indentation level.
            self.indents.clear();
            self.indent = -1;
            self.tokens(line, 3);
            return;
        }
        while self.indent > column as isize {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
        self.tokens(line, column);
    }

    /// The tokens of `line` from `at`, at the start of a token.
    fn tokens(&mut self, line: &[u8], mut at: usize) {
        loop {
            while matches!(line.get(at), Some(b' ' | b'\t')) {
                at += 1;
            }
            let Some(&b) = line.get(at) else { return };
            let next_blank = is_blank(line.get(at + 1));
            match b {
                b'#' => return,
                b'[' | b'{' => {
                    self.flow += 1;
                    self.check();
                    at += 1;
                }
                b']' | b'}' => {
                    self.flow = self.flow.saturating_sub(1);
                    at += 1;
                }
                b',' if self.flow > 0 => at += 1,
                b'-' | b'?' if self.flow == 0 && next_blank => {
                    self.roll(at);
                    at += 1;
                }
                b'?' if next_blank => at += 1,
                b':' if next_blank
                    || (self.flow > 0
                        && line.get(at + 1).is_some_and(|&c| is_flow_indicator(c))) =>
                {
                    at += 1;
                }
                b'"' | b'\'' => {
                    let Some(end) = closing_quote(line, at + 1, b) else {
                        self.quote = Some(b);
                        return;
                    };
                    at = self.after_quoted(line, at, end);
                }
                b'|' | b'>' if self.flow == 0 => {
                    self.block_scalar = Some(self.indent);
                    return;
                }
                b'&' | b'!' => {
                    // An anchor or a tag: the node follows.
                    while line.get(at).is_some_and(|&c| !matches!(c, b' ' | b'\t'))
                        && !(self.flow > 0 && is_flow_indicator(line[at]))
                    {
                        at += 1;
                    }
                }
                _ => match self.plain_scalar(line, at) {
                    Some(end) => at = end,
                    None => return,
                },
            }
        }
    }

    /// A plain scalar starting at `start`: where the tokens after it start, `None` when it
    /// runs to the end of the line.
    fn plain_scalar(&mut self, line: &[u8], start: usize) -> Option<usize> {
        let mut at = start;
        loop {
            let Some(&b) = line.get(at) else {
                self.plain = self.flow == 0;
                return None;
            };
            let next = line.get(at + 1);
            match b {
                b':' if is_blank(next)
                    || (self.flow > 0 && next.is_some_and(|&c| is_flow_indicator(c))) =>
                {
                    self.roll(start);
                    return Some(at + 1);
                }
                b'#' if at > start && matches!(line[at - 1], b' ' | b'\t') => return None,
                _ if self.flow > 0 && is_flow_indicator(b) => return Some(at),
                _ => at += 1,
            }
        }
    }

    /// After a quoted scalar from `start` to `end`: a key when a `:` follows (its block
    /// mapping opens at `start`); where the next token starts.
    fn after_quoted(&mut self, line: &[u8], start: usize, end: usize) -> usize {
        let mut at = end;
        while matches!(line.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        let next = line.get(at + 1);
        let value =
            is_blank(next) || (self.flow > 0 && next.is_some_and(|&c| is_flow_indicator(c)));
        if line.get(at) == Some(&b':') && value {
            self.roll(start);
            return at + 1;
        }
        at
    }

    /// libyaml's `roll_indent`: a block collection opens at `column` when it is past the
    /// current indentation.
    fn roll(&mut self, column: usize) {
        if self.flow == 0 && self.indent < column as isize {
            self.indents.push(self.indent);
            self.indent = column as isize;
            self.check();
        }
    }

    fn check(&mut self) {
        if self.flow > KUBE_MAX_DEPTH || self.indents.len() > KUBE_MAX_DEPTH {
            self.kube_line.get_or_insert(self.line);
        }
        if self.flow + self.indents.len() > MAX_DEPTH {
            self.deep_line.get_or_insert(self.line);
        }
    }
}

/// Where a quoted scalar opened before `from` ends (after its closing quote) on `line`.
fn closing_quote(line: &[u8], from: usize, quote: u8) -> Option<usize> {
    let mut at = from;
    while let Some(&b) = line.get(at) {
        match b {
            b'\\' if quote == b'"' => at += 2,
            b'\'' if quote == b'\'' && line.get(at + 1) == Some(&b'\'') => at += 2,
            _ if b == quote => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn nested_json(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        assert_eq!(check_json(nested_json(MAX_DEPTH).as_bytes()), Ok(()));
        let e = check_json(nested_json(MAX_DEPTH + 1).as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "invalid character '[' exceeded max depth");
        let text = format!(r#"{{"a":"{}","b":"\"[[["}}"#, "[".repeat(500));
        assert_eq!(check_json(text.as_bytes()), Ok(()));
        let e = check_json(r#"{"a":{"a":{"#.repeat(100).as_bytes()).unwrap_err();
        assert_eq!(e, TooDeep::Json { bracket: b'{' });
    }

    /// serde_json refuses exactly what the scan refuses.
    #[test]
    fn json_limit_is_the_decoders() {
        let ok = nested_json(MAX_DEPTH);
        assert!(serde_json::from_str::<Value>(&ok).is_ok());
        let deep = nested_json(MAX_DEPTH + 1);
        assert!(serde_json::from_str::<Value>(&deep).is_err());
    }

    #[test]
    fn yaml_flow_nesting_is_refused_with_kubes_message() {
        let deep = nested_json(100_000);
        let e = check_yaml(deep.as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "yaml: exceeded max depth of 10000");
        let deep = format!("metadata:\n  name: x\nspec: {}", "{a: ".repeat(20_000));
        let e = check_yaml(deep.as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "yaml: line 3: exceeded max depth of 10000");
        let e = check_yaml(nested_json(MAX_DEPTH + 1).as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "yaml: exceeded max depth of 127");
    }

    #[test]
    fn yaml_block_nesting_is_counted() {
        // `- - - x` opens a sequence per dash, on one line.
        let e = check_yaml("- ".repeat(20_000).as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "yaml: exceeded max depth of 10000");
        // One key per line, each indented one more.
        let lines: String = (0..10_001)
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .collect();
        let e = check_yaml(lines.as_bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "yaml: line 10001: exceeded max depth of 10000"
        );
        let lines: String = (0..200).map(|i| format!("{}a:\n", " ".repeat(i))).collect();
        let e = check_yaml(lines.as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "yaml: line 128: exceeded max depth of 127");
    }

    /// Brackets in scalars and comments open nothing.
    #[test]
    fn yaml_scalars_and_comments_do_not_count() {
        let many = "[".repeat(300);
        let docs = [
            format!("a: '{many}'\nb: \"{many}\\\"\"\n"),
            format!("a: x{many}\n  {many}\nb: 1\n"),
            format!("a: |\n  {many}\n  {many}\n\n  more\nb: >-\n   {many}\nc: 1\n"),
            format!("# {many}\na: 1 # {many}\n"),
            format!("a: \"multi\n  line {many}\n  end\"\nb: 'x\n {many}'\n"),
            format!("- |+\n  {many}\n- x\n"),
        ];
        for doc in docs {
            assert_eq!(check_yaml(doc.as_bytes()), Ok(()), "{doc}");
            serde_norway::from_str::<Value>(&doc).unwrap();
        }
    }

    /// The scan never counts more levels than the document has, so nothing the decoder
    /// reads is refused: documents as serde_norway writes them, block and flow.
    #[test]
    fn yaml_scan_agrees_with_the_decoder() {
        fn nest(depth: usize, leaf: Value) -> Value {
            (0..depth).fold(leaf, |v, i| {
                if i % 2 == 0 {
                    serde_json::json!({"k": v, "s": "x: [y", "n": [1, "- z"]})
                } else {
                    serde_json::json!([v, {"a": "b"}, "multi\nline [ text"])
                }
            })
        }
        for depth in [1, 10, 60, 120] {
            let value = nest(depth, serde_json::json!("leaf"));
            let block = serde_norway::to_string(&value).unwrap();
            assert_eq!(check_yaml(block.as_bytes()), Ok(()), "{block}");
            let flow = serde_json::to_string(&value).unwrap();
            assert_eq!(check_yaml(flow.as_bytes()), Ok(()), "{flow}");
            assert_eq!(check_json(flow.as_bytes()), Ok(()));
        }
    }
}
