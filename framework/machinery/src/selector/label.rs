//! Label selectors (`?labelSelector=`): parsing, matching and printing with the grammar,
//! error messages and canonical form of kube's `labels.Parse`, plus conversion of a
//! `metav1.LabelSelector` (matchLabels + matchExpressions).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use serde_json::Value;

use super::SelectorError;
use crate::validation::{is_qualified_name, is_valid_label_value};

/// How a requirement relates a label to its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key=value`.
    Equals,
    /// `key==value` (same meaning as `=`, kept so the selector prints back as written).
    DoubleEquals,
    /// `key!=value`: also true when the label is absent.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: also true when the label is absent.
    NotIn,
    /// `key`: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label is an integer less than `n`.
    LessThan,
}

impl Operator {
    /// kube's name for the operator, as used in its error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Equals => "=",
            Self::DoubleEquals => "==",
            Self::NotEquals => "!=",
            Self::In => "in",
            Self::NotIn => "notin",
            Self::Exists => "exists",
            Self::DoesNotExist => "!",
            Self::GreaterThan => "gt",
            Self::LessThan => "lt",
        }
    }
}

/// One condition on one label key. Built only through validation, so always well formed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement, checking it as kube's `NewRequirement` does: a valid key,
    /// the number of values the operator needs, integers for `>`/`<`, valid label values.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        let mut errs = Vec::new();
        errs.extend(key_error(key, "key"));
        errs.extend(value_count_errors(operator, &values));
        for (i, v) in values.iter().enumerate() {
            let msgs = is_valid_label_value(v);
            if !msgs.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {v:?}: {}",
                    msgs.join("; ")
                ));
            }
        }
        match aggregate(errs) {
            Some(message) => Err(SelectorError::new(message)),
            None => Ok(Self {
                key: key.to_string(),
                operator,
                values,
            }),
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, as given (empty for `Exists` / `DoesNotExist`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set (given as a lookup) satisfies this requirement.
    pub fn matches<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        let value = lookup(&self.key);
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => value.is_some_and(has),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(has),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => self.compare(value),
        }
    }

    /// `>` and `<`: both sides must be integers, else no match.
    fn compare(&self, value: Option<&str>) -> bool {
        let parse = |s: &str| s.parse::<i64>().ok();
        let (Some(have), [bound]) = (value.and_then(parse), self.values.as_slice()) else {
            return false;
        };
        match (parse(bound), self.operator) {
            (Some(bound), Operator::GreaterThan) => have > bound,
            (Some(bound), Operator::LessThan) => have < bound,
            _ => false,
        }
    }
}

/// kube's `field.Invalid` text for a bad key at `path`, or nothing.
fn key_error(key: &str, path: &str) -> Option<String> {
    let msgs = is_qualified_name(key);
    (!msgs.is_empty()).then(|| format!("{path}: Invalid value: {key:?}: {}", msgs.join("; ")))
}

/// Go's `%#v` of the `[]string` values kube shows in these messages; an empty list here
/// always came from a nil slice.
fn go_values(values: &[String]) -> String {
    if values.is_empty() {
        return "[]string(nil)".to_string();
    }
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

fn value_count_errors(op: Operator, values: &[String]) -> Vec<String> {
    let invalid = |detail: &str| format!("values: Invalid value: {}: {detail}", go_values(values));
    let mut errs = Vec::new();
    match op {
        Operator::In | Operator::NotIn if values.is_empty() => {
            errs.push(invalid(
                "for 'in', 'notin' operators, values set can't be empty",
            ));
        }
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => {
            errs.push(invalid(
                "exact-match compatibility requires one single value",
            ));
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
            errs.push(invalid(
                "values set must be empty for exists and does not exist",
            ));
        }
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errs.push(invalid(
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            for (i, v) in values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.parse::<i64>().is_err())
            {
                let detail = "for 'Gt', 'Lt' operators, the value must be an integer";
                errs.push(format!("values[{i}]: Invalid value: {v:?}: {detail}"));
            }
        }
        _ => {}
    }
    errs
}

/// kube's aggregate error text: one message as is, several as `[a, b]`, duplicates dropped.
fn aggregate(errs: Vec<String>) -> Option<String> {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errs
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    match unique.len() {
        0 => None,
        1 => unique.into_iter().next(),
        _ => Some(format!("[{}]", unique.join(", "))),
    }
}

impl fmt::Display for Requirement {
    /// kube's canonical form: `!k`, `k`, `k=v`, `k in (a,b)` with sorted values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            Operator::DoesNotExist => return write!(f, "!{}", self.key),
            Operator::Exists => return f.write_str(&self.key),
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            other => other.as_str(),
        };
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        let joined = values.join(",");
        match self.operator {
            Operator::In | Operator::NotIn => write!(f, "{}{op}({joined})", self.key),
            _ => write!(f, "{}{op}{joined}", self.key),
        }
    }
}

/// A parsed label selector: the AND of its requirements, sorted by key.
///
/// ```
/// use extension_apiserver_machinery::selector::LabelSelector;
/// let s = LabelSelector::parse("tier notin (cache), app in (web,api),!legacy").unwrap();
/// assert_eq!(s.to_string(), "app in (api,web),!legacy,tier notin (cache)");
/// let labels = [("app".to_string(), "web".to_string())].into();
/// assert!(s.matches(&labels));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    /// Set only by [`LabelSelector::nothing`]: kube's `labels.Nothing()`.
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every object (an empty `labelSelector`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no object (a nil `metav1.LabelSelector`).
    pub fn nothing() -> Self {
        Self {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses the `labelSelector` query syntax, with kube's error messages.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let tokens = lex(selector);
        let mut requirements = Parser { tokens, pos: 0 }.parse()?;
        // kube sorts by key so equal selectors print (and cache) alike.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self {
            requirements,
            nothing: false,
        })
    }

    /// Converts a `metav1.LabelSelector` as kube's `LabelSelectorAsSelector`: an empty one
    /// matches everything; matchLabels become `=`, matchExpressions their operator.
    pub fn from_label_selector(selector: &metav1::LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::new(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            requirements.push(Requirement::new(
                &expr.key,
                op,
                expr.values.clone().unwrap_or_default(),
            )?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self {
            requirements,
            nothing: false,
        })
    }

    /// Whether this selector lets every object through.
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this selector lets no object through ([`LabelSelector::nothing`]).
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// If every match must have `key` set to one value, that value (for index lookups).
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [only]) => Some(only),
            _ => None,
        }
    }

    /// Whether a label set matches.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels behind `lookup` match; saves building a map per object.
    pub fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(&lookup))
    }

    /// Whether a JSON object's `metadata.labels` match (non-string labels count as absent).
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels = object.get("metadata").and_then(|m| m.get("labels"));
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }
}

impl fmt::Display for LabelSelector {
    /// kube's canonical form: requirements joined by `,`, sorted by key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::write_joined(f, &self.requirements)
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A lexical token. In kube's grammar `in` and `notin` are keywords only where an
/// operator may stand; elsewhere they are plain identifiers (see [`Parser::peek_value`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    End,
    Ident(String),
    In,
    NotIn,
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
}

impl Token {
    /// The text kube quotes in "found '...'" messages.
    fn literal(&self) -> &str {
        match self {
            Self::End => "",
            Self::Ident(s) => s,
            Self::In => "in",
            Self::NotIn => "notin",
            Self::Bang => "!",
            Self::Equals => "=",
            Self::DoubleEquals => "==",
            Self::NotEquals => "!=",
            Self::GreaterThan => ">",
            Self::LessThan => "<",
            Self::OpenParen => "(",
            Self::CloseParen => ")",
            Self::Comma => ",",
        }
    }

    /// In value position the keywords are ordinary words: `in in (in)` is legal.
    fn into_value(self) -> Self {
        match self {
            Self::In => Self::Ident("in".into()),
            Self::NotIn => Self::Ident("notin".into()),
            other => other,
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits a selector into tokens; always ends with [`Token::End`]. The lexer cannot fail:
/// every special character is a token by itself, and `==` / `!=` are the only longer ones.
fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut rest = input.trim_start_matches(is_blank);
    while let Some(c) = rest.chars().next() {
        let (token, len) = if is_special(c) {
            special(rest)
        } else {
            word(rest)
        };
        tokens.push(token);
        rest = rest[len..].trim_start_matches(is_blank);
    }
    tokens.push(Token::End);
    tokens
}

fn special(rest: &str) -> (Token, usize) {
    if rest.starts_with("==") {
        return (Token::DoubleEquals, 2);
    }
    if rest.starts_with("!=") {
        return (Token::NotEquals, 2);
    }
    let token = match rest.as_bytes()[0] {
        b'=' => Token::Equals,
        b'!' => Token::Bang,
        b'(' => Token::OpenParen,
        b')' => Token::CloseParen,
        b',' => Token::Comma,
        b'>' => Token::GreaterThan,
        _ => Token::LessThan,
    };
    (token, 1)
}

fn word(rest: &str) -> (Token, usize) {
    let len = rest
        .find(|c| is_special(c) || is_blank(c))
        .unwrap_or(rest.len());
    let token = match &rest[..len] {
        "in" => Token::In,
        "notin" => Token::NotIn,
        other => Token::Ident(other.to_string()),
    };
    (token, len)
}

/// Recursive descent over the tokens, one method per grammar rule, with kube's messages.
struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

type ParseResult<T> = Result<T, SelectorError>;

impl Parser {
    /// The next token, in value position.
    fn peek_value(&self) -> Token {
        self.tokens[self.pos].clone().into_value()
    }

    fn next_op(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        // The End token stays put so that reading past the end keeps returning it.
        self.pos = (self.pos + 1).min(self.tokens.len() - 1);
        t
    }

    fn next_value(&mut self) -> Token {
        self.next_op().into_value()
    }

    fn parse(mut self) -> Result<Vec<Requirement>, SelectorError> {
        self.requirements()
    }

    fn requirements(&mut self) -> ParseResult<Vec<Requirement>> {
        let mut out = Vec::new();
        loop {
            match self.peek_value() {
                Token::Ident(_) | Token::Bang => {}
                Token::End => return Ok(out),
                t => {
                    return Err(SelectorError::new(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.literal()
                    )));
                }
            }
            let r = self
                .requirement()
                .map_err(|e| SelectorError::new(format!("unable to parse requirement: {e}")))?;
            out.push(r);
            match self.next_value() {
                Token::End => return Ok(out),
                Token::Comma => match self.peek_value() {
                    Token::Ident(_) | Token::Bang => {}
                    t => {
                        return Err(SelectorError::new(format!(
                            "found '{}', expected: identifier after ','",
                            t.literal()
                        )));
                    }
                },
                t => {
                    return Err(SelectorError::new(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        t.literal()
                    )));
                }
            }
        }
    }

    fn requirement(&mut self) -> ParseResult<Requirement> {
        let (key, unary) = self.key_and_unary_operator()?;
        if let Some(op) = unary {
            return build(&key, op, Vec::new());
        }
        let op = self.operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => self.exact_value()?,
        };
        // kube collects values into a set: sorted, no duplicates.
        build(&key, op, values.into_iter().collect())
    }

    /// `[!] KEY`; the operator is already known when the key stands alone.
    fn key_and_unary_operator(&mut self) -> ParseResult<(String, Option<Operator>)> {
        let mut token = self.next_value();
        let negated = token == Token::Bang;
        if negated {
            token = self.next_value();
        }
        let Token::Ident(key) = token else {
            return Err(SelectorError::new(format!(
                "found '{}', expected: identifier",
                token.literal()
            )));
        };
        if let Some(e) = key_error(&key, "<nil>") {
            return Err(SelectorError::new(e));
        }
        let alone = matches!(self.peek_value(), Token::End | Token::Comma);
        let unary = match (negated, alone) {
            (true, _) => Some(Operator::DoesNotExist),
            (false, true) => Some(Operator::Exists),
            (false, false) => None,
        };
        Ok((key, unary))
    }

    fn operator(&mut self) -> ParseResult<Operator> {
        let op = match self.next_op() {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            t => {
                return Err(SelectorError::new(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.literal()
                )));
            }
        };
        Ok(op)
    }

    /// `( v, v, ... )`; empty entries are the empty string, `()` is `{""}`.
    fn value_set(&mut self) -> ParseResult<BTreeSet<String>> {
        let t = self.next_value();
        if t != Token::OpenParen {
            return Err(SelectorError::new(format!(
                "found '{}' expected: '('",
                t.literal()
            )));
        }
        match self.peek_value() {
            Token::Ident(_) | Token::Comma => {
                let set = self.value_list()?;
                self.next_value(); // the ')' value_list stopped at
                Ok(set)
            }
            Token::CloseParen => {
                self.next_value();
                Ok(BTreeSet::from([String::new()]))
            }
            t => Err(SelectorError::new(format!(
                "found '{}', expected: ',', ')' or identifier",
                t.literal()
            ))),
        }
    }

    /// The inside of `( ... )`, up to but not including the `)`.
    fn value_list(&mut self) -> ParseResult<BTreeSet<String>> {
        let mut set = BTreeSet::new();
        loop {
            match self.next_value() {
                Token::Ident(v) => {
                    set.insert(v);
                    match self.peek_value() {
                        Token::Comma => continue,
                        Token::CloseParen => return Ok(set),
                        t => {
                            return Err(SelectorError::new(format!(
                                "found '{}', expected: ',' or ')'",
                                t.literal()
                            )));
                        }
                    }
                }
                Token::Comma => {
                    // A comma with nothing before or after it stands for an empty value.
                    let next = self.peek_value();
                    if set.is_empty() || matches!(next, Token::Comma | Token::CloseParen) {
                        set.insert(String::new());
                    }
                    if next == Token::CloseParen {
                        return Ok(set);
                    }
                }
                t => {
                    return Err(SelectorError::new(format!(
                        "found '{}', expected: ',', or identifier",
                        t.literal()
                    )));
                }
            }
        }
    }

    /// The single value after `=`, `==`, `!=`, `>`, `<`; nothing there means `""`.
    fn exact_value(&mut self) -> ParseResult<BTreeSet<String>> {
        if matches!(self.peek_value(), Token::End | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.next_value() {
            Token::Ident(v) => Ok(BTreeSet::from([v])),
            t => Err(SelectorError::new(format!(
                "found '{}', expected: identifier",
                t.literal()
            ))),
        }
    }
}

fn build(key: &str, op: Operator, values: Vec<String>) -> ParseResult<Requirement> {
    Requirement::new(key, op, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parse(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn err(s: &str) -> String {
        LabelSelector::parse(s).expect_err(s).to_string()
    }

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values.iter().map(|v| v.to_string()).collect()).unwrap()
    }

    #[test]
    fn good_strings_print_back_without_spaces() {
        for s in [
            "x=a,y=b,z=c",
            "",
            "x!=a,y=b",
            "x=",
            "x= ",
            "x=,z= ",
            "x= ,z= ",
            "!x",
            "x>1",
            "x>1,z<5",
        ] {
            assert_eq!(parse(s).to_string(), s.replace(' ', ""), "{s:?}");
        }
    }

    #[test]
    fn bad_strings() {
        for s in [
            "x=a||y=b",
            "x==a==b",
            "!x=a",
            "x<a",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
            "x=a,",
            "x in",
            "=a",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn parsing_is_deterministic() {
        assert_eq!(parse("x=a,a=x").to_string(), parse("a=x,x=a").to_string());
        assert_eq!(parse("x=a,a=x").to_string(), "a=x,x=a");
    }

    #[test]
    fn set_based_parsing() {
        let cases: Vec<(&str, Vec<Requirement>)> = vec![
            ("\rx", vec![req("x", Operator::Exists, &[])]),
            (
                "this-is-a-dns.domain.com/key-with-dash",
                vec![req(
                    "this-is-a-dns.domain.com/key-with-dash",
                    Operator::Exists,
                    &[],
                )],
            ),
            (
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
                vec![req(
                    "this-is-another-dns.domain.com/key-with-dash",
                    Operator::In,
                    &["so", "what"],
                )],
            ),
            (
                "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
                vec![req(
                    "0.1.2.domain/99",
                    Operator::NotIn,
                    &["10.10.100.1", "tick.tack.clock"],
                )],
            ),
            ("foo  in\t (abc)", vec![req("foo", Operator::In, &["abc"])]),
            ("x notin\n (abc)", vec![req("x", Operator::NotIn, &["abc"])]),
            (
                "x  notin\t\t(abc,def)",
                vec![req("x", Operator::NotIn, &["abc", "def"])],
            ),
            ("x in (abc,)", vec![req("x", Operator::In, &["", "abc"])]),
            ("x in ()", vec![req("x", Operator::In, &[""])]),
            (
                "x notin (abc,,def),bar,z in (),w",
                vec![
                    req("bar", Operator::Exists, &[]),
                    req("w", Operator::Exists, &[]),
                    req("x", Operator::NotIn, &["", "abc", "def"]),
                    req("z", Operator::In, &[""]),
                ],
            ),
            (
                "x,y in (a)",
                vec![
                    req("x", Operator::Exists, &[]),
                    req("y", Operator::In, &["a"]),
                ],
            ),
            (
                "x,y",
                vec![
                    req("x", Operator::Exists, &[]),
                    req("y", Operator::Exists, &[]),
                ],
            ),
            (
                "x=a,y!=b,z in (h,i,j)",
                vec![
                    req("x", Operator::Equals, &["a"]),
                    req("y", Operator::NotEquals, &["b"]),
                    req("z", Operator::In, &["h", "i", "j"]),
                ],
            ),
            ("x notin ( )", vec![req("x", Operator::NotIn, &[""])]),
            ("x notin (, a)", vec![req("x", Operator::NotIn, &["", "a"])]),
            ("a ", vec![req("a", Operator::Exists, &[])]),
            (
                "a in (x,y,notin, z,in)",
                vec![req("a", Operator::In, &["in", "notin", "x", "y", "z"])],
            ),
            ("x==a", vec![req("x", Operator::DoubleEquals, &["a"])]),
            ("x>1", vec![req("x", Operator::GreaterThan, &["1"])]),
            ("x<7", vec![req("x", Operator::LessThan, &["7"])]),
            ("in=notin", vec![req("in", Operator::Equals, &["notin"])]),
            ("x in (b,a,b)", vec![req("x", Operator::In, &["a", "b"])]),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).requirements(), want.as_slice(), "{input:?}");
        }
    }

    #[test]
    fn canonical_form() {
        assert_eq!(
            parse("x in (def,abc), y notin (jkl),z").to_string(),
            "x in (abc,def),y notin (jkl),z"
        );
        assert_eq!(
            parse("x notin (abc,def),y!=jkl,!z").to_string(),
            "x notin (abc,def),y!=jkl,!z"
        );
        assert_eq!(
            parse("x notin (abc),y in (jkl,mno),z notin ()").to_string(),
            "x notin (abc),y in (jkl,mno),z notin ()"
        );
        assert_eq!(
            parse("x=abc,y==jkl,z!=a,z").to_string(),
            "x=abc,y==jkl,z!=a,z"
        );
        assert_eq!(parse("x>2,y<8,z").to_string(), "x>2,y<8,z");
        assert_eq!(
            req("x", Operator::In, &["b", "a"]).to_string(),
            "x in (a,b)"
        );
    }

    #[test]
    fn matching() {
        let yes = [
            ("", set(&[("x", "y")])),
            ("x=y", set(&[("x", "y")])),
            ("x=y,z=w", set(&[("x", "y"), ("z", "w")])),
            ("x!=y,z!=w", set(&[("x", "z"), ("z", "a")])),
            ("notin=in", set(&[("notin", "in")])),
            ("x", set(&[("x", "z")])),
            ("!x", set(&[("y", "z")])),
            ("x>1", set(&[("x", "2")])),
            ("x<1", set(&[("x", "0")])),
            ("x<1", set(&[("x", "-5")])),
            ("x notin (a)", set(&[])),
            ("x!=a", set(&[])),
            ("x=", set(&[("x", "")])),
            ("x in (,a)", set(&[("x", "")])),
        ];
        for (s, labels) in yes {
            assert!(parse(s).matches(&labels), "{s:?} should match {labels:?}");
        }
        let no = [
            ("x=z", set(&[])),
            ("x=y", set(&[("x", "z")])),
            ("x=y,z=w", set(&[("x", "w"), ("z", "w")])),
            ("x!=y,z!=w", set(&[("x", "z"), ("z", "w")])),
            ("x", set(&[("y", "z")])),
            ("!x", set(&[("x", "z")])),
            ("x>1", set(&[("x", "0")])),
            ("x<1", set(&[("x", "2")])),
            ("x>1", set(&[("x", "v2")])),
            ("x>1", set(&[])),
            ("x in ()", set(&[("y", "baz")])),
            ("x=", set(&[])),
        ];
        for (s, labels) in no {
            assert!(
                !parse(s).matches(&labels),
                "{s:?} should not match {labels:?}"
            );
        }
    }

    #[test]
    fn everything_and_nothing() {
        assert!(parse("").is_everything());
        assert!(parse(" \t").is_everything());
        assert!(!parse("x").is_everything());
        let nothing = LabelSelector::nothing();
        assert!(!nothing.is_everything() && nothing.is_nothing());
        assert!(!nothing.matches(&set(&[])));
        assert_eq!(nothing.to_string(), "");
        assert!(LabelSelector::everything().matches(&set(&[("a", "b")])));
    }

    #[test]
    fn exact_match_introspection() {
        let s = parse("app=web,tier in (db),x in (a,b),y!=c");
        assert_eq!(s.requires_exact_match("app"), Some("web"));
        assert_eq!(s.requires_exact_match("tier"), Some("db"));
        assert_eq!(s.requires_exact_match("x"), None);
        assert_eq!(s.requires_exact_match("y"), None);
        assert_eq!(s.requires_exact_match("z"), None);
    }

    #[test]
    fn matches_json_objects() {
        let obj = serde_json::json!({"metadata": {"labels": {"app": "web", "n": 3}}});
        assert!(parse("app=web").matches_object(&obj));
        assert!(parse("!n").matches_object(&obj));
        assert!(!parse("app").matches_object(&serde_json::json!({"metadata": {}})));
    }

    #[test]
    fn syntax_error_messages() {
        assert_eq!(err("x=a,"), "found '', expected: identifier after ','");
        assert!(
            err("x=a||y=b")
                .starts_with("unable to parse requirement: values[0][x]: Invalid value: \"a||y\"")
        );
        assert_eq!(
            err(",x"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(err("x=a b"), "found 'b', expected: ',' or 'end of string'");
        assert_eq!(err("x=a,)"), "found ')', expected: identifier after ','");
        assert_eq!(err("!x=a"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(
            err("x nott in (y)"),
            "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            err("x in y"),
            "unable to parse requirement: found 'y' expected: '('"
        );
        assert_eq!(
            err("a notin("),
            "unable to parse requirement: found '', expected: ',', ')' or identifier"
        );
        assert_eq!(
            err("a in (xyz abc)"),
            "unable to parse requirement: found 'abc', expected: ',' or ')'"
        );
        assert_eq!(
            err("a in (x,="),
            "unable to parse requirement: found '=', expected: ',', or identifier"
        );
        assert_eq!(
            err("x==(a)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            err("!"),
            "unable to parse requirement: found '', expected: identifier"
        );
        assert_eq!(
            err("(x)"),
            "found '(', expected: !, identifier, or 'end of string'"
        );
    }

    #[test]
    fn validation_error_messages() {
        assert_eq!(
            err("-x=a"),
            "unable to parse requirement: <nil>: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert_eq!(
            err("x=-a"),
            "unable to parse requirement: values[0][x]: Invalid value: \"-a\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert_eq!(
            err("x<a"),
            "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        let both = err("x>-a");
        assert!(both.starts_with("unable to parse requirement: [values[0]: Invalid value: \"-a\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"-a\": a valid label must be"), "{both}");
        assert!(both.ends_with("')]"));
        let long_key = "a".repeat(254);
        assert!(err(&long_key).contains("name part must be no more than 63 characters"));
        let long_value = format!("x={}", "a".repeat(64));
        assert!(err(&long_value).ends_with("values[0][x]: Invalid value: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": must be no more than 63 characters"));
    }

    #[test]
    fn requirement_constructor() {
        let ok = |k: &str, op, v: &[&str]| {
            Requirement::new(k, op, v.iter().map(|s| s.to_string()).collect()).is_ok()
        };
        assert!(!ok("x", Operator::In, &[]));
        assert!(!ok("x", Operator::NotIn, &[]));
        assert!(ok("x", Operator::In, &["foo"]));
        assert!(ok("x", Operator::NotIn, &["foo"]));
        assert!(ok("x", Operator::Exists, &[]));
        assert!(ok("x", Operator::DoesNotExist, &[]));
        assert!(ok("1foo", Operator::In, &["bar"]));
        assert!(ok("1234", Operator::In, &["bar"]));
        assert!(ok("y", Operator::GreaterThan, &["1"]));
        assert!(ok("z", Operator::LessThan, &["6"]));
        assert!(!ok("foo", Operator::GreaterThan, &["bar"]));
        assert!(!ok("barz", Operator::LessThan, &["blah"]));
        assert!(!ok(&"a".repeat(254), Operator::Exists, &[]));
        assert!(!ok("x", Operator::Equals, &["a", "b"]));
        let e = Requirement::new("x", Operator::In, vec![]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
        );
        let e = Requirement::new("-x", Operator::Exists, vec!["a".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("[key: Invalid value: \"-x\": name part must consist of"),
            "{e}"
        );
        assert!(e.ends_with(", values: Invalid value: []string{\"a\"}: values set must be empty for exists and does not exist]"), "{e}");
    }

    fn expr(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn from_metav1_label_selector() {
        let empty = metav1::LabelSelector::default();
        assert!(
            LabelSelector::from_label_selector(&empty)
                .unwrap()
                .is_everything()
        );
        let sel = metav1::LabelSelector {
            match_labels: Some([("foo".to_string(), "bar".to_string())].into()),
            match_expressions: Some(vec![
                expr("baz", "In", Some(&["qux", "norf"])),
                expr("gone", "DoesNotExist", None),
                expr("here", "Exists", Some(&[])),
            ]),
        };
        let s = LabelSelector::from_label_selector(&sel).unwrap();
        assert_eq!(s.to_string(), "baz in (norf,qux),foo=bar,!gone,here");
        assert!(s.matches(&set(&[("foo", "bar"), ("baz", "norf"), ("here", "")])));
        assert!(!s.matches(&set(&[("foo", "bar"), ("baz", "norf")])));
    }

    #[test]
    fn from_metav1_label_selector_errors() {
        let bad_op = metav1::LabelSelector {
            match_expressions: Some(vec![expr("a", "Gt", Some(&["1"]))]),
            ..Default::default()
        };
        let e = LabelSelector::from_label_selector(&bad_op).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"Gt\" is not a valid label selector operator"
        );
        let no_values = metav1::LabelSelector {
            match_expressions: Some(vec![expr("a", "In", None)]),
            ..Default::default()
        };
        let e = LabelSelector::from_label_selector(&no_values).unwrap_err();
        assert_eq!(
            e.to_string(),
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
        );
        let bad_label = metav1::LabelSelector {
            match_labels: Some([("a".to_string(), "-".to_string())].into()),
            ..Default::default()
        };
        let e = LabelSelector::from_label_selector(&bad_label).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("values[0][a]: Invalid value: \"-\": a valid label must be")
        );
    }
}
