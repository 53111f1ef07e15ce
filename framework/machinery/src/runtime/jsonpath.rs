//! The JSONPath dialect of kubectl and CRD `additionalPrinterColumns` (client-go's
//! `util/jsonpath`, missing keys allowed), and printer-column cells rendered as
//! kube-apiserver's CRD table convertor renders them.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use jiff::Timestamp;
use serde_json::{Number, Value};

use super::duration::human_age;
use super::resource::ColumnType;

/// A parsed JSONPath expression such as `.status.conditions[?(@.type=="Ready")].status`.
///
/// Supported: `.field` (backslash escapes a `.`), `['key.with.dots']` (one key),
/// `.*` and `[*]`, indexes and slices `[0]`, `[-1]`, `[1:3]`, `[::2]`, unions `[0,2]`,
/// recursive descent `..name`, filters `[?(@.a == "x")]` with `== != < > <= >=` or bare
/// existence `[?(@.a)]`, literals, and an optional surrounding `{}`. Not supported:
/// several `{}` actions with text between them, and `range` / `end`.
///
/// ```
/// use extension_apiserver_machinery::runtime::jsonpath::JsonPath;
/// let path = JsonPath::parse(r#"{.status.conditions[?(@.type=="Ready")].status}"#).unwrap();
/// let obj = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
/// assert_eq!(path.evaluate(&obj)[0].as_str(), Some("True"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

/// One step of a path, applied to every value the previous step produced.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// A map key; `""` (from a lone `.`) keeps the current values.
    Field(String),
    /// Every element of an array, every value of a map (in key order).
    Wildcard,
    /// `[i]`, `[a:b:c]`, `[*]`: arrays only.
    Slice(Slice),
    /// `[?(...)]`.
    Filter(Box<Filter>),
    /// `..`: every non-empty array or map below (and including) the current values.
    Recursive,
    /// `[a,b]`: each alternative's results, concatenated.
    Union(Vec<Vec<Step>>),
    /// A quoted string, number or boolean; numbers are floats, as kube compares them.
    Literal(Value),
}

/// Slice bounds as written; `derived_end` marks the end implied by a single index, which
/// kube wraps around for `[-1]`.
#[derive(Clone, Debug, PartialEq)]
struct Slice {
    start: Option<i64>,
    end: Option<i64>,
    derived_end: bool,
    step: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    left: Vec<Step>,
    op: FilterOp,
    right: Vec<Step>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum FilterOp {
    Exists,
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

type Node<'a> = Cow<'a, Value>;

/// Why a JSONPath expression could not be used, in the words of kube's `jsonpath` package.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonPathError {
    /// The expression does not parse.
    #[error("{0}")]
    Parse(String),
    /// The expression parses but cannot be applied to this value (an index out of bounds,
    /// indexing a non-array, comparing several values at once).
    #[error("{0}")]
    Eval(String),
}

impl JsonPath {
    /// Parses an expression, with or without the surrounding `{}`.
    pub fn parse(text: &str) -> Result<Self, JsonPathError> {
        let trimmed = text.trim();
        let inner = match trimmed.strip_prefix('{') {
            Some(rest) => rest
                .strip_suffix('}')
                .ok_or_else(|| JsonPathError::Parse("unclosed action".to_string()))?,
            None => trimmed,
        };
        let steps = parse_steps(inner)?;
        Ok(Self {
            text: text.to_string(),
            steps,
        })
    }

    /// All values the path selects, or kube's error (an index out of bounds, indexing a
    /// non-array, comparing several values at once). Missing keys are not errors.
    pub fn find<'a>(&self, root: &'a Value) -> Result<Vec<Cow<'a, Value>>, JsonPathError> {
        eval(&self.steps, vec![Cow::Borrowed(root)])
    }

    /// All values the path selects; nothing on error.
    pub fn evaluate<'a>(&self, root: &'a Value) -> Vec<Cow<'a, Value>> {
        self.find(root).unwrap_or_default()
    }

    /// A printer-column cell for `object`, as kube-apiserver's CRD table convertor: the
    /// first match (none, or an error → `null`, which kubectl prints `<none>`), then by
    /// column `type`: `string` → the text kubectl's JSONPath prints (arrays and objects
    /// as JSON), `integer` / `number` / `boolean` → that JSON type or `null`, `date` → the
    /// age (`5m`), `<invalid>` or `<unknown>`.
    pub fn cell_value(&self, object: &Value, column_type: ColumnType) -> Value {
        self.cell_value_at(object, column_type, Timestamp::now())
    }

    /// [`JsonPath::cell_value`] with `date` ages measured at `now`.
    pub fn cell_value_at(&self, object: &Value, column_type: ColumnType, now: Timestamp) -> Value {
        let Some(first) = self.find(object).ok().and_then(|r| r.into_iter().next()) else {
            return Value::Null;
        };
        typed_cell(column_type, &first, now)
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for JsonPath {
    type Err = JsonPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// What kube's jsonpath printer shows for one value in a `string` column. A JSON null
/// reaches it as Go's invalid reflect value, which prints `<no value>`.
fn print_text(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number_text(n),
        Value::Array(_) | Value::Object(_) => go_json(v),
    }
}

/// kube's `cellForJSONValue`: the value if it has the column's type, else null.
fn typed_cell(column_type: ColumnType, v: &Value, now: Timestamp) -> Value {
    match (column_type, v) {
        (ColumnType::String, v) => Value::String(print_text(v)),
        // Go converts a float to int64 by truncation.
        (ColumnType::Integer, Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0) as i64),
        },
        (ColumnType::Number, Value::Number(n)) => {
            n.as_f64().map(Value::from).unwrap_or(Value::Null)
        }
        (ColumnType::Boolean, Value::Bool(b)) => Value::Bool(*b),
        (ColumnType::Date, Value::String(s)) => Value::String(human_age(s, now)),
        _ => Value::Null,
    }
}

// ---------------------------------------------------------------------------------------
// Parsing

/// Characters that end a field name or identifier.
fn is_terminator(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

/// A recursive-descent reader over one action's text.
struct Reader<'s> {
    src: &'s str,
    pos: usize,
}

fn parse_steps(src: &str) -> Result<Vec<Step>, JsonPathError> {
    let mut reader = Reader { src, pos: 0 };
    let mut steps = Vec::new();
    while let Some(step) = reader.next_step(steps.last())? {
        steps.extend(step);
    }
    Ok(steps)
}

impl<'s> Reader<'s> {
    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    fn bump(&mut self, c: char) {
        self.pos += c.len_utf8();
    }

    /// The next step, `Some(None)` for input that adds none (`@`, `$`, spaces), `None` at
    /// the end.
    fn next_step(&mut self, last: Option<&Step>) -> Result<Option<Option<Step>>, JsonPathError> {
        let rest = self.rest();
        if rest.starts_with("[?(") {
            return self.filter().map(|f| Some(Some(f)));
        }
        if let Some(after) = rest.strip_prefix("..") {
            if last == Some(&Step::Recursive) {
                return Err(JsonPathError::Parse(
                    "invalid multiple recursive descent".into(),
                ));
            }
            // Before a name the second dot stays, to be read as the start of a field.
            let name_follows = after.starts_with(|c: char| c == '_' || c.is_alphanumeric());
            self.pos += if name_follows { 1 } else { 2 };
            return Ok(Some(Some(Step::Recursive)));
        }
        let Some(c) = rest.chars().next() else {
            return Ok(None);
        };
        let step = match c {
            ' ' | '@' | '$' => {
                self.bump(c);
                None
            }
            '\r' | '\n' => return Err(JsonPathError::Parse("unclosed action".into())),
            '[' => Some(self.bracket()?),
            '"' | '\'' => Some(Step::Literal(Value::String(self.quoted(c)?))),
            '.' => Some(self.field()),
            '+' | '-' | '0'..='9' => Some(self.number()?),
            c if c == '_' || c.is_alphanumeric() => Some(self.identifier()?),
            c => {
                return Err(JsonPathError::Parse(format!(
                    "unrecognized character in action: U+{:04X} '{c}'",
                    u32::from(c)
                )));
            }
        };
        Ok(Some(step))
    }

    /// `.name` up to a terminator; `\` escapes the next character and is dropped.
    fn field(&mut self) -> Step {
        self.pos += 1;
        let mut name = String::new();
        let mut chars = self.rest().chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                self.bump(c);
                if let Some(escaped) = chars.next() {
                    self.bump(escaped);
                    name.push(escaped);
                }
                continue;
            }
            if is_terminator(c) {
                break;
            }
            self.bump(c);
            name.push(c);
        }
        if name == "*" {
            return Step::Wildcard;
        }
        Step::Field(name)
    }

    fn number(&mut self) -> Result<Step, JsonPathError> {
        let rest = self.rest();
        let sign = usize::from(rest.starts_with(['+', '-']));
        let len = sign
            + rest[sign..]
                .find(|c: char| c != '.' && !c.is_ascii_digit())
                .unwrap_or(rest.len() - sign);
        let text = &rest[..len];
        self.pos += len;
        let value = text
            .parse::<i64>()
            .map(|i| i as f64)
            .or_else(|_| text.parse::<f64>());
        let value =
            value.map_err(|_| JsonPathError::Parse(format!("cannot parse number {text}")))?;
        Ok(Step::Literal(Value::from(value)))
    }

    fn identifier(&mut self) -> Result<Step, JsonPathError> {
        let rest = self.rest();
        let len = rest.find(is_terminator).unwrap_or(rest.len());
        self.pos += len;
        match &rest[..len] {
            "true" => Ok(Step::Literal(Value::Bool(true))),
            "false" => Ok(Step::Literal(Value::Bool(false))),
            other => Err(JsonPathError::Parse(format!(
                "unrecognized identifier {other}"
            ))),
        }
    }

    /// A quoted string with Go's escapes; the quote may be escaped inside.
    fn quoted(&mut self, quote: char) -> Result<String, JsonPathError> {
        let rest = self.rest();
        let mut escaped = false;
        let end = rest.char_indices().skip(1).find(|&(_, c)| {
            let closes = c == quote && !escaped;
            escaped = c == '\\' && !escaped;
            closes
        });
        let Some((end, _)) = end else {
            return Err(JsonPathError::Parse("unterminated quoted string".into()));
        };
        let raw = &rest[..=end];
        if raw.contains('\n') {
            return Err(JsonPathError::Parse("unterminated quoted string".into()));
        }
        self.pos += end + 1;
        unquote(&raw[1..end], quote).ok_or_else(|| {
            JsonPathError::Parse(format!("unquote string {raw} error invalid syntax"))
        })
    }

    /// `[...]`: `*`, a union, a quoted key, or a slice.
    fn bracket(&mut self) -> Result<Step, JsonPathError> {
        let rest = self.rest();
        let Some(close) = rest
            .find([']', '\n'])
            .filter(|&i| rest.as_bytes()[i] == b']')
        else {
            return Err(JsonPathError::Parse("unterminated array".into()));
        };
        self.pos += close + 1;
        let inner = &rest[1..close];
        let inner = if inner == "*" { ":" } else { inner };
        if inner.contains(',') {
            let alternatives = inner
                .split(',')
                .map(|part| parse_steps(&format!("[{}]", part.trim_matches(' '))));
            return Ok(Step::Union(alternatives.collect::<Result<_, _>>()?));
        }
        if let Some(key) = inner.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')) {
            // kube re-reads the key as `.key` and so splits it at dots; we take it whole,
            // which is what `['a.b']` is written for.
            if !key.contains('\'') {
                return Ok(Step::Field(key.to_string()));
            }
        }
        parse_slice(inner).map(Step::Slice)
    }

    /// `[?( left op right )]` or `[?( path )]`.
    fn filter(&mut self) -> Result<Step, JsonPathError> {
        self.pos += 3;
        let rest = self.rest();
        let close = filter_end(rest)?;
        if !rest[close + 1..].starts_with(']') {
            return Err(JsonPathError::Parse("unclosed array expect ]".into()));
        }
        self.pos += close + 2;
        parse_filter(&rest[..close]).map(|f| Step::Filter(Box::new(f)))
    }
}

/// Where the `)` closing a filter is: the first one outside a quoted string.
fn filter_end(rest: &str) -> Result<usize, JsonPathError> {
    let (mut open, mut closed, mut pair) = (false, false, '"');
    let mut prev = '\0';
    for (i, c) in rest.char_indices() {
        match c {
            '\n' => break,
            '"' | '\'' if !open => (open, pair) = (true, c),
            '"' | '\'' if prev != '\\' && c == pair => closed = true,
            ')' if open == closed => return Ok(i),
            _ => {}
        }
        prev = c;
    }
    Err(JsonPathError::Parse("unterminated filter".into()))
}

fn is_op_char(c: char) -> bool {
    matches!(c, '!' | '<' | '>' | '=')
}

fn parse_filter(text: &str) -> Result<Filter, JsonPathError> {
    let split = text.find(is_op_char).filter(|&i| i > 0);
    let Some(op_start) = split else {
        return Ok(Filter {
            left: parse_steps(text)?,
            op: FilterOp::Exists,
            right: Vec::new(),
        });
    };
    let op_len = text[op_start..]
        .find(|c| !is_op_char(c))
        .unwrap_or(text.len() - op_start);
    let (left, op, right) = (
        &text[..op_start],
        &text[op_start..op_start + op_len],
        &text[op_start + op_len..],
    );
    if right.is_empty() {
        return Ok(Filter {
            left: parse_steps(text)?,
            op: FilterOp::Exists,
            right: Vec::new(),
        });
    }
    let op = match op {
        "==" => FilterOp::Eq,
        "!=" => FilterOp::Ne,
        "<" => FilterOp::Lt,
        ">" => FilterOp::Gt,
        "<=" => FilterOp::Le,
        ">=" => FilterOp::Ge,
        other => {
            return Err(JsonPathError::Parse(format!(
                "unrecognized filter operator {other}"
            )));
        }
    };
    Ok(Filter {
        left: parse_steps(left)?,
        op,
        right: parse_steps(right)?,
    })
}

/// `start[:end[:step]]`, each part an optional signed integer.
fn parse_slice(text: &str) -> Result<Slice, JsonPathError> {
    let parts: Vec<&str> = text.split(':').collect();
    let well_formed = parts.len() <= 3
        && parts.iter().all(|p| {
            let digits = p.strip_prefix('-').unwrap_or(p);
            digits.bytes().all(|b| b.is_ascii_digit())
        });
    if !well_formed {
        return Err(JsonPathError::Parse(format!("invalid array index {text}")));
    }
    let number = |p: &str| -> Result<Option<i64>, JsonPathError> {
        match p {
            "" => Ok(None),
            p => p
                .parse()
                .map(Some)
                .map_err(|_| JsonPathError::Parse(format!("array index {p} is not a number"))),
        }
    };
    let start = number(parts[0])?;
    let (end, derived_end) = match parts.get(1) {
        // A single index means one element: the end is derived from the start.
        None => (Some(start.unwrap_or(0) + 1), true),
        Some(p) => (number(p)?, false),
    };
    let step = parts.get(2).map(|p| number(p)).transpose()?.flatten();
    Ok(Slice {
        start,
        end,
        derived_end,
        step,
    })
}

/// Go's `strconv.UnquoteChar` escapes for the inside of a quoted string.
fn unquote(s: &str, quote: char) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' => Some('\\'),
            '\'' | '"' if e == quote => Some(e),
            _ => None,
        };
        let decoded = match (simple, e) {
            (Some(d), _) => d,
            (None, 'x') => hex_char(&mut chars, 2)?,
            (None, 'u') => hex_char(&mut chars, 4)?,
            (None, 'U') => hex_char(&mut chars, 8)?,
            _ => return None,
        };
        out.push(decoded);
    }
    Some(out)
}

fn hex_char(chars: &mut std::str::Chars<'_>, digits: usize) -> Option<char> {
    let hex: String = chars.by_ref().take(digits).collect();
    if hex.len() != digits {
        return None;
    }
    char::from_u32(u32::from_str_radix(&hex, 16).ok()?)
}

// ---------------------------------------------------------------------------------------
// Evaluation

fn eval<'a>(steps: &[Step], mut nodes: Vec<Node<'a>>) -> Result<Vec<Node<'a>>, JsonPathError> {
    for step in steps {
        nodes = apply(step, nodes)?;
    }
    Ok(nodes)
}

fn apply<'a>(step: &Step, input: Vec<Node<'a>>) -> Result<Vec<Node<'a>>, JsonPathError> {
    match step {
        Step::Field(name) if name.is_empty() => Ok(input),
        Step::Field(name) => Ok(input.into_iter().flat_map(|n| field(n, name)).collect()),
        Step::Wildcard => Ok(input
            .into_iter()
            .flat_map(|n| children(n).unwrap_or_default())
            .collect()),
        Step::Slice(s) => slice_all(s, input),
        Step::Filter(f) => filter_all(f, input),
        Step::Recursive => Ok(input.into_iter().flat_map(descendants).collect()),
        Step::Union(alternatives) => {
            let mut out = Vec::new();
            for alternative in alternatives {
                out.extend(eval(alternative, input.clone())?);
            }
            Ok(out)
        }
        Step::Literal(v @ Value::String(_)) => Ok(vec![Cow::Owned(v.clone())]),
        Step::Literal(v) => Ok(input.iter().map(|_| Cow::Owned(v.clone())).collect()),
    }
}

/// Applies `f` to a node's value, keeping borrows borrowed and copying out of owned ones.
fn project<'a>(node: Node<'a>, f: impl for<'b> Fn(&'b Value) -> Vec<&'b Value>) -> Vec<Node<'a>> {
    match node {
        Cow::Borrowed(v) => f(v).into_iter().map(Cow::Borrowed).collect(),
        Cow::Owned(v) => f(&v).into_iter().map(|c| Cow::Owned(c.clone())).collect(),
    }
}

/// A map's value for `name` (null included); anything else yields nothing.
fn field<'a>(node: Node<'a>, name: &str) -> Vec<Node<'a>> {
    project(node, |v| {
        v.as_object()
            .and_then(|m| m.get(name))
            .into_iter()
            .collect()
    })
}

/// Array elements or map values in key order (kube sorts map keys); `None` for scalars.
fn children(node: Node<'_>) -> Option<Vec<Node<'_>>> {
    if !matches!(*node, Value::Array(_) | Value::Object(_)) {
        return None;
    }
    Some(project(node, |v| match v {
        Value::Array(items) => items.iter().collect(),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            entries.into_iter().map(|(_, v)| v).collect()
        }
        _ => Vec::new(),
    }))
}

/// The node and, depth first, every array or map under it; empty containers and
/// scalars are left out, as in kube.
fn descendants(node: Node<'_>) -> Vec<Node<'_>> {
    let kids = children(node.clone()).unwrap_or_default();
    if kids.is_empty() {
        return Vec::new();
    }
    let mut out = vec![node];
    out.extend(kids.into_iter().flat_map(descendants));
    out
}

/// How kube names a JSON value's Go type in its error messages.
fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn slice_all<'a>(s: &Slice, input: Vec<Node<'a>>) -> Result<Vec<Node<'a>>, JsonPathError> {
    let mut out = Vec::new();
    for node in input {
        match &*node {
            Value::Null => continue,
            Value::Array(items) => {
                let indexes = slice_indexes(s, items.len() as i64)?;
                let mut kids: Vec<Option<Node<'a>>> = children(node)
                    .unwrap_or_default()
                    .into_iter()
                    .map(Some)
                    .collect();
                // Indexes are distinct and in bounds, so each element is taken once.
                out.extend(indexes.into_iter().filter_map(|i| kids[i].take()));
            }
            other => {
                return Err(JsonPathError::Eval(format!(
                    "{} is not array or slice",
                    go_type_name(other)
                )));
            }
        }
    }
    Ok(out)
}

/// The indexes a slice selects in an array of `len`, with kube's bounds errors.
fn slice_indexes(s: &Slice, len: i64) -> Result<Vec<usize>, JsonPathError> {
    let start = s.start.map_or(0, |i| if i < 0 { i + len } else { i });
    let mut end = s.end.unwrap_or(len);
    if end < 0 || (end == 0 && s.derived_end) {
        end += len;
    }
    if start == end {
        return Ok(Vec::new());
    }
    if start >= len || start < 0 {
        return Err(JsonPathError::Eval(format!(
            "array index out of bounds: index {start}, length {len}"
        )));
    }
    if end > len || end < 0 {
        return Err(JsonPathError::Eval(format!(
            "array index out of bounds: index {}, length {len}",
            end - 1
        )));
    }
    if start > end {
        return Err(JsonPathError::Eval(format!(
            "starting index {start} is greater than ending index {end}"
        )));
    }
    let step = match s.step {
        Some(step) if step <= 0 => return Err(JsonPathError::Eval("step must be > 0".into())),
        Some(step) => step as usize,
        None => 1,
    };
    Ok((start as usize..end as usize).step_by(step).collect())
}

fn filter_all<'a>(f: &Filter, input: Vec<Node<'a>>) -> Result<Vec<Node<'a>>, JsonPathError> {
    let mut out = Vec::new();
    for node in input {
        // kube filters arrays and maps by element, and anything else as itself.
        let candidates = children(node.clone()).unwrap_or_else(|| vec![node]);
        for candidate in candidates {
            if keep(f, &candidate)? {
                out.push(candidate);
            }
        }
    }
    Ok(out)
}

fn keep(f: &Filter, candidate: &Node<'_>) -> Result<bool, JsonPathError> {
    let one = || vec![Cow::Borrowed(&**candidate)];
    // A left side that fails is "missing", as kube allows missing keys here.
    let lefts = eval(&f.left, one()).unwrap_or_default();
    let rights = eval(&f.right, one())?;
    let too_many = || {
        Err(JsonPathError::Eval(
            "can only compare one element at a time".into(),
        ))
    };
    match (lefts.as_slice(), f.op, rights.as_slice()) {
        ([], _, _) => Ok(false),
        ([_, _, ..], _, _) => too_many(),
        ([_], FilterOp::Exists, _) => Ok(true),
        (_, _, []) => Ok(false),
        (_, _, [_, _, ..]) => too_many(),
        ([left], op, [right]) => Ok(compare(op, left, right)),
    }
}

/// A value as kube's comparison helpers classify it.
#[derive(PartialEq, PartialOrd)]
enum Scalar<'v> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'v str),
}

fn scalar(v: &Value) -> Option<Scalar<'_>> {
    match v {
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::Number(n) if n.is_i64() => n.as_i64().map(Scalar::Int),
        Value::Number(n) if n.is_u64() => n.as_u64().map(Scalar::Uint),
        Value::Number(n) => n.as_f64().map(Scalar::Float),
        Value::String(s) => Some(Scalar::Str(s)),
        _ => None,
    }
}

/// `a == b` as Go's template `eq`; `None` when the types cannot be compared.
fn equal(a: &Scalar<'_>, b: &Scalar<'_>) -> Option<bool> {
    match (a, b) {
        (Scalar::Int(i), Scalar::Uint(u)) | (Scalar::Uint(u), Scalar::Int(i)) => {
            Some(u64::try_from(*i).is_ok_and(|i| i == *u))
        }
        (Scalar::Bool(_), Scalar::Bool(_))
        | (Scalar::Int(_), Scalar::Int(_))
        | (Scalar::Uint(_), Scalar::Uint(_))
        | (Scalar::Float(_), Scalar::Float(_))
        | (Scalar::Str(_), Scalar::Str(_)) => Some(a == b),
        _ => None,
    }
}

/// `a < b` as Go's template `lt`; `None` for booleans and mixed types.
fn less(a: &Scalar<'_>, b: &Scalar<'_>) -> Option<bool> {
    match (a, b) {
        (Scalar::Int(i), Scalar::Uint(u)) => Some(u64::try_from(*i).map_or(true, |i| i < *u)),
        (Scalar::Uint(u), Scalar::Int(i)) => Some(u64::try_from(*i).is_ok_and(|i| *u < i)),
        (Scalar::Int(_), Scalar::Int(_))
        | (Scalar::Uint(_), Scalar::Uint(_))
        | (Scalar::Float(_), Scalar::Float(_))
        | (Scalar::Str(_), Scalar::Str(_)) => Some(a < b),
        _ => None,
    }
}

/// A filter comparison. kube turns comparison errors into "no match", except that `!=`
/// of incomparable values is true; and since it compares number literals as floats, an
/// integer field never equals `1` (only `1.0`-style floats do). We keep both quirks so a
/// column shows what kube would show.
fn compare(op: FilterOp, left: &Value, right: &Value) -> bool {
    let (Some(a), Some(b)) = (scalar(left), scalar(right)) else {
        return op == FilterOp::Ne;
    };
    let less_or_equal = || match less(&a, &b)? {
        true => Some(true),
        false => equal(&a, &b),
    };
    match op {
        FilterOp::Exists => true,
        FilterOp::Eq => equal(&a, &b).unwrap_or(false),
        FilterOp::Ne => !equal(&a, &b).unwrap_or(false),
        FilterOp::Lt => less(&a, &b).unwrap_or(false),
        FilterOp::Le => less_or_equal().unwrap_or(false),
        FilterOp::Gt => less_or_equal().is_some_and(|le| !le),
        FilterOp::Ge => less(&a, &b).is_some_and(|lt| !lt),
    }
}

// ---------------------------------------------------------------------------------------
// Go's text forms of JSON values

/// A JSON number as Go's `fmt.Print` shows the value kube decoded it to: integers as
/// they are, floats in `%v` form (`0.5`, `1.5e+07`).
pub(crate) fn go_number_text(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() => go_float_text(f, 6, true),
        _ => n.to_string(),
    }
}

/// Shortest round-trip digits of `f` and its decimal exponent (`d.ddd × 10^exp`).
fn shortest_digits(f: f64) -> (bool, String, i32) {
    let text = format!("{:e}", f.abs());
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    (
        f.is_sign_negative(),
        mantissa.replace('.', ""),
        exp.parse().unwrap_or(0),
    )
}

/// Go's shortest float formatting: exponent form when the exponent is below -4 (or -7
/// for JSON) or at least `max_exp`; `pad_exp` pads the exponent to two digits (`%v`
/// always, JSON only when positive).
fn go_float_text(f: f64, max_exp: i32, pad_exp: bool) -> String {
    let (negative, digits, exp) = shortest_digits(f);
    let sign = if negative { "-" } else { "" };
    let min_exp = if pad_exp { -4 } else { -6 };
    if f != 0.0 && (exp < min_exp || exp >= max_exp) {
        let mantissa = match digits.split_at(1) {
            (first, "") => first.to_string(),
            (first, rest) => format!("{first}.{rest}"),
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        let width = if pad_exp || exp > 0 { 2 } else { 1 };
        return format!("{sign}{mantissa}e{exp_sign}{:0width$}", exp.abs());
    }
    format!("{sign}{}", fixed_digits(&digits, exp))
}

/// Places the decimal point in `digits` for exponent `exp`, without trailing zeros.
fn fixed_digits(digits: &str, exp: i32) -> String {
    if exp < 0 {
        return format!("0.{}{digits}", "0".repeat((-exp - 1) as usize));
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        return format!("{digits}{}", "0".repeat(int_len - digits.len()));
    }
    format!("{}.{}", &digits[..int_len], &digits[int_len..])
}

/// A value as Go's `encoding/json` writes it: compact, map keys sorted, `<`, `>`, `&`,
/// U+2028 and U+2029 escaped, floats in ES6 form.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(&mut out, v);
    out
}

/// A decoded JSON value as Go's `fmt` prints it with `%v` (`map[a:1 b:[x y]]`): maps with
/// their keys sorted, strings bare, `<nil>` for null, numbers as kube's strict decoder
/// reads them (integers as `int64`, others as `float64`).
pub fn go_print(v: &Value) -> String {
    let mut out = String::new();
    write_go_print(&mut out, v);
    out
}

fn write_go_print(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&go_float_text(n.as_f64().unwrap_or(0.0), 6, true)),
        },
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_go_print(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push_str("map[");
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_go_print(out, item);
            }
            out.push(']');
        }
    }
}

fn write_go_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_f64() => {
            out.push_str(&go_float_text(n.as_f64().unwrap_or(0.0), 21, false))
        }
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_go_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, k);
                out.push(':');
                write_go_json(out, item);
            }
            out.push('}');
        }
    }
}

fn write_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            // Go escapes these so its JSON can sit inside HTML and JavaScript.
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store() -> Value {
        json!({
            "kind": "List",
            "metadata": {"name": "demo", "labels": {"app": "web", "app.kubernetes.io/name": "api"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": 3, "ratio": 0.25, "paused": false, "reference": "ref-1",
                     "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
                     "empty": [], "nothing": null, "big": 12345678.5},
            "status": {"conditions": [
                {"type": "Available", "status": "False"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-03-01T11:00:00Z"}
            ]}
        })
    }

    fn eval_ok(path: &str, data: &Value) -> Vec<Value> {
        let p = JsonPath::parse(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        p.find(data)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .into_iter()
            .map(Cow::into_owned)
            .collect()
    }

    fn eval_err(path: &str, data: &Value) -> String {
        JsonPath::parse(path)
            .unwrap()
            .find(data)
            .expect_err(path)
            .to_string()
    }

    #[test]
    fn fields_and_indexes() {
        let d = store();
        assert_eq!(eval_ok(".metadata.name", &d), vec![json!("demo")]);
        assert_eq!(eval_ok("{.metadata.name}", &d), vec![json!("demo")]);
        assert_eq!(eval_ok("$.metadata.name", &d), vec![json!("demo")]);
        assert_eq!(eval_ok(".metadata.labels.app", &d), vec![json!("web")]);
        assert_eq!(eval_ok(".spec.ports[0].port", &d), vec![json!(80)]);
        assert_eq!(eval_ok(".spec.ports[-1].name", &d), vec![json!("https")]);
        assert_eq!(
            eval_ok(".spec.ports[*].name", &d),
            vec![json!("http"), json!("https")]
        );
        assert_eq!(
            eval_ok(".spec.ports.*.port", &d),
            vec![json!(80), json!(443)]
        );
        assert_eq!(eval_ok(".spec.ports[0:1].port", &d), vec![json!(80)]);
        assert_eq!(eval_ok(".spec.ports[::2].port", &d), vec![json!(80)]);
        assert_eq!(
            eval_ok(".spec.ports[0,1].port", &d),
            vec![json!(80), json!(443)]
        );
        assert_eq!(eval_ok(".spec.nothing", &d), vec![Value::Null]);
        assert_eq!(eval_ok("{.}", &d), vec![d.clone()]);
    }

    #[test]
    fn keys_with_dots() {
        let d = store();
        assert_eq!(
            eval_ok(".metadata.labels['app.kubernetes.io/name']", &d),
            vec![json!("api")]
        );
        assert_eq!(
            eval_ok(r".metadata.labels.app\.kubernetes\.io/name", &d),
            vec![json!("api")]
        );
        assert_eq!(
            eval_ok(
                ".metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']",
                &d
            ),
            vec![json!("{}")]
        );
        assert_eq!(eval_ok("['metadata']['name']", &d), vec![json!("demo")]);
    }

    #[test]
    fn missing_keys_are_empty_not_errors() {
        let d = store();
        for path in [
            ".missing",
            ".metadata.missing.deeper",
            ".spec.replicas.x",
            ".spec.ports.name",
            ".spec.nothing.x",
        ] {
            assert!(eval_ok(path, &d).is_empty(), "{path}");
        }
        assert!(eval_ok(".spec.nothing[0]", &d).is_empty());
        assert!(eval_ok(".spec.empty[*]", &d).is_empty());
    }

    #[test]
    fn filters() {
        let d = store();
        assert_eq!(
            eval_ok(r#".status.conditions[?(@.type=="Ready")].status"#, &d),
            vec![json!("True")]
        );
        assert_eq!(
            eval_ok(r#"{.status.conditions[?(@.type == 'Ready')].status}"#, &d),
            vec![json!("True")]
        );
        assert_eq!(
            eval_ok(r#".status.conditions[?(@.type!="Ready")].type"#, &d),
            vec![json!("Available")]
        );
        assert_eq!(
            eval_ok(".status.conditions[?(@.lastTransitionTime)].type", &d),
            vec![json!("Ready")]
        );
        // kube compares number literals as floats, so integer fields never pass.
        assert!(eval_ok(".spec.ports[?(@.port>100)].name", &d).is_empty());
        let floats = json!({"items": [{"f": 0.5}, {"f": 2.5}]});
        assert_eq!(eval_ok(".items[?(@.f>1)].f", &floats), vec![json!(2.5)]);
        assert_eq!(eval_ok(".items[?(@.f<=0.5)].f", &floats), vec![json!(0.5)]);
        assert_eq!(eval_ok(".items[?(@.f>=2.5)].f", &floats), vec![json!(2.5)]);
        assert_eq!(
            eval_ok(r#".spec.ports[?(@.name=="h)ttp")].port"#, &d),
            Vec::<Value>::new()
        );
        // Maps are filtered by value, scalars as themselves.
        assert_eq!(
            eval_ok(r#".metadata.labels[?(@ == "web")]"#, &d),
            vec![json!("web")]
        );
        assert_eq!(
            eval_ok(r#".metadata.name[?(@ == "demo")]"#, &d),
            vec![json!("demo")]
        );
        assert!(eval_ok(r#".metadata[?(@.name == "demo")]"#, &d).is_empty());
    }

    #[test]
    fn filter_comparison_quirks_match_kube() {
        let d = json!({"items": [{"n": 1}, {"n": 1.0}, {"n": "1"}, {"n": true}]});
        // Number literals compare as floats: only the float 1.0 equals 1.
        assert_eq!(eval_ok(".items[?(@.n==1)].n", &d), vec![json!(1.0)]);
        // Incomparable values are never equal, and always unequal.
        assert_eq!(
            eval_ok(".items[?(@.n!=1)].n", &d),
            vec![json!(1), json!("1"), json!(true)]
        );
        assert_eq!(eval_ok(".items[?(@.n==true)].n", &d), vec![json!(true)]);
        assert!(eval_ok(".items[?(@.n>true)].n", &d).is_empty());
        assert_eq!(eval_ok(r#".items[?(@.n<"2")].n"#, &d), vec![json!("1")]);
        let e = eval_err(".items[?(@.n==@.*)]", &json!({"items": [{"n": 1, "m": 2}]}));
        assert_eq!(e, "can only compare one element at a time");
    }

    #[test]
    fn recursive_descent() {
        let d = store();
        assert_eq!(eval_ok("..port", &d), vec![json!(80), json!(443)]);
        assert_eq!(
            eval_ok("$..status", &d),
            vec![d["status"].clone(), json!("False"), json!("True")]
        );
        assert_eq!(
            eval_ok(".spec..name", &d),
            vec![json!("http"), json!("https")]
        );
        assert!(JsonPath::parse("{.a.....b}").is_err());
    }

    #[test]
    fn index_errors_are_kubes() {
        let d = store();
        assert_eq!(
            eval_err(".spec.ports[5]", &d),
            "array index out of bounds: index 5, length 2"
        );
        assert_eq!(
            eval_err(".spec.ports[0:3]", &d),
            "array index out of bounds: index 2, length 2"
        );
        assert_eq!(
            eval_err(".spec.ports[1:0]", &d),
            "starting index 1 is greater than ending index 0"
        );
        assert_eq!(eval_err(".spec.ports[0:2:0]", &d), "step must be > 0");
        assert_eq!(
            eval_err(".metadata[0]", &d),
            "map[string]interface {} is not array or slice"
        );
        assert_eq!(
            eval_err(".metadata[*]", &d),
            "map[string]interface {} is not array or slice"
        );
        assert_eq!(
            eval_err(".spec.replicas[0]", &d),
            "int64 is not array or slice"
        );
        assert!(eval_ok(".spec.ports[1:1]", &d).is_empty());
    }

    #[test]
    fn parse_errors() {
        let e = |p: &str| JsonPath::parse(p).expect_err(p).to_string();
        assert_eq!(e("{.a"), "unclosed action");
        assert_eq!(e(".a[0"), "unterminated array");
        assert_eq!(e(".a[x]"), "invalid array index x");
        assert_eq!(e(".a[1:2:3:4]"), "invalid array index 1:2:3:4");
        assert_eq!(e(".a[-]"), "array index - is not a number");
        assert_eq!(e(".a[?(@.b == 1"), "unterminated filter");
        assert_eq!(e(".a[?(@.b == 1)"), "unclosed array expect ]");
        assert_eq!(e(".a[?(@.b =< 1)]"), "unrecognized filter operator =<");
        assert_eq!(e(".a[?(@.b =~ 1)]"), "unrecognized filter operator =");
        assert_eq!(e(".a #"), "unrecognized character in action: U+0023 '#'");
        assert_eq!(e("range .items"), "unrecognized identifier range");
        assert_eq!(
            e(r#".a[?(@.b == "x\q")]"#),
            r#"unquote string "x\q" error invalid syntax"#
        );
        assert_eq!(e("'abc"), "unterminated quoted string");
        assert_eq!(e(".a\n.b"), "unclosed action");
    }

    #[test]
    fn literals_and_escapes() {
        let d = json!({"a": [{"s": "it's \"q\"\n"}]});
        assert_eq!(eval_ok(r#".a[?(@.s == "it's \"q\"\n")].s"#, &d).len(), 1);
        assert_eq!(eval_ok(r#".a[?(@.s == 'it\'s "q"\x0a')].s"#, &d).len(), 1);
        assert_eq!(eval_ok(r#"{"text"}"#, &d), vec![json!("text")]);
    }

    #[test]
    fn display_keeps_the_source() {
        let p: JsonPath = ".spec.reference".parse().unwrap();
        assert_eq!(p.to_string(), ".spec.reference");
    }

    fn now() -> Timestamp {
        "2024-03-01T12:00:00Z".parse().unwrap()
    }

    fn cell(path: &str, ty: &str) -> Value {
        JsonPath::parse(path).unwrap().cell_value_at(
            &store(),
            ColumnType::from_name(ty).unwrap(),
            now(),
        )
    }

    #[test]
    fn string_cells() {
        assert_eq!(cell(".spec.reference", "string"), json!("ref-1"));
        assert_eq!(cell(".spec.replicas", "string"), json!("3"));
        assert_eq!(cell(".spec.ratio", "string"), json!("0.25"));
        assert_eq!(cell(".spec.big", "string"), json!("1.23456785e+07"));
        assert_eq!(cell(".spec.paused", "string"), json!("false"));
        assert_eq!(cell(".spec.nothing", "string"), json!("<no value>"));
        assert_eq!(
            cell(".spec.ports[0]", "string"),
            json!(r#"{"name":"http","port":80}"#)
        );
        assert_eq!(cell(".spec.ports[*].port", "string"), json!("80"));
        assert_eq!(
            cell(".metadata.labels", "string"),
            json!(r#"{"app":"web","app.kubernetes.io/name":"api"}"#)
        );
        assert_eq!(cell(".spec.empty", "string"), json!("[]"));
        assert_eq!(cell(".spec.missing", "string"), Value::Null);
        assert_eq!(cell(".spec.ports[9]", "string"), Value::Null);
    }

    #[test]
    fn typed_cells() {
        assert_eq!(cell(".spec.replicas", "integer"), json!(3));
        assert_eq!(cell(".spec.big", "integer"), json!(12345678));
        assert_eq!(cell(".spec.reference", "integer"), Value::Null);
        assert_eq!(cell(".spec.replicas", "number"), json!(3.0));
        assert_eq!(cell(".spec.ratio", "number"), json!(0.25));
        assert_eq!(cell(".spec.paused", "boolean"), json!(false));
        assert_eq!(cell(".spec.replicas", "boolean"), Value::Null);
        assert_eq!(cell(".spec.nothing", "integer"), Value::Null);
        // A column type other than the five cannot be written: ColumnType has no such value
        // and the derive refuses the name at compile time (tests/ui).
    }

    #[test]
    fn date_cells() {
        let path = r#".status.conditions[?(@.type=="Ready")].lastTransitionTime"#;
        assert_eq!(cell(path, "date"), json!("60m"));
        let obj = json!({"a": "", "b": "soon", "c": 5});
        let at = |p: &str| {
            JsonPath::parse(p)
                .unwrap()
                .cell_value_at(&obj, ColumnType::Date, now())
        };
        assert_eq!(at(".a"), json!("<unknown>"));
        assert_eq!(at(".b"), json!("<invalid>"));
        assert_eq!(at(".c"), Value::Null);
        assert_eq!(at(".d"), Value::Null);
    }

    #[test]
    fn go_float_forms() {
        let v = |f: f64| go_float_text(f, 6, true);
        assert_eq!(v(0.0), "0");
        assert_eq!(v(1.5), "1.5");
        assert_eq!(v(-2.25), "-2.25");
        assert_eq!(v(123456.5), "123456.5");
        assert_eq!(v(1234567.5), "1.2345675e+06");
        assert_eq!(v(1e6), "1e+06");
        assert_eq!(v(0.0001), "0.0001");
        assert_eq!(v(0.00001), "1e-05");
        assert_eq!(v(1e100), "1e+100");
        let j = |f: f64| go_float_text(f, 21, false);
        assert_eq!(j(1e6), "1000000");
        assert_eq!(j(1.5e20), "150000000000000000000");
        assert_eq!(j(1e21), "1e+21");
        assert_eq!(j(0.000001), "0.000001");
        assert_eq!(j(1e-7), "1e-7");
        assert_eq!(j(-1.25e-10), "-1.25e-10");
    }

    #[test]
    fn go_json_text() {
        let v = json!({"b": [1, 2.5, "x<y>&z\u{2028}"], "a": {"q": "\"\\\n\u{1}"}, "c": null, "d": 1.0});
        assert_eq!(
            go_json(&v),
            r#"{"a":{"q":"\"\\\n\u0001"},"b":[1,2.5,"x\u003cy\u003e\u0026z\u2028"],"c":null,"d":1}"#
        );
    }
}
