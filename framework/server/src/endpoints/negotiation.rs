//! Content negotiation: which encoding and which shape (object, `Table`,
//! `PartialObjectMetadata`) a client asked for in `Accept`, and how a body is encoded by its
//! `Content-Type`. An unsupported media type is a 406 or 415, never a silent fallback.

use serde_json::Value;

use crate::endpoints::accept::{MediaRange, parse_accept};
use crate::endpoints::duplicates::{Exceeded, decode_noting_duplicates, decode_within};
use crate::error::{Error, Result};
use crate::runtime::nesting;

/// The wire encoding of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json`.
    Json,
    /// `application/yaml`.
    Yaml,
}

/// The shape of a response, from the `as`, `g` and `v` parameters of `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The object or list as stored.
    Object,
    /// `meta.k8s.io/v1` `Table`.
    Table,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (single objects, watch events).
    PartialObjectMetadata,
    /// `meta.k8s.io/v1` `PartialObjectMetadataList` (lists).
    PartialObjectMetadataList,
}

/// What a response should be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// JSON or YAML.
    pub encoding: Encoding,
    /// Object, Table or metadata only.
    pub shape: Shape,
}

impl Target {
    /// Plain JSON objects.
    pub const JSON: Target = Target {
        encoding: Encoding::Json,
        shape: Shape::Object,
    };

    /// The `Content-Type` of a response in this target: the encoding's media type alone,
    /// as kube-apiserver sends it for a `Table` or `PartialObjectMetadata` too.
    pub fn content_type(&self) -> &'static str {
        match self.encoding {
            Encoding::Json => "application/json",
            Encoding::Yaml => "application/yaml",
        }
    }
}

/// Which shapes an endpoint can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// get, and writes that return an object.
    Object,
    /// list and deletecollection.
    List,
    /// watch: events carry single objects.
    Watch,
    /// Anything that returns only plain objects or `Status`.
    Plain,
}

/// The media types this server encodes and decodes, as listed in 406 and 415 answers
/// (kube-apiserver lists its serializers' types; this server has no protobuf).
const ACCEPTED: &str = "application/json, application/yaml";

/// Picks the response target for `accept` at an endpoint of kind `endpoint`.
pub fn negotiate(accept: Option<&str>, endpoint: Endpoint) -> Result<Target> {
    parse_accept(accept)
        .iter()
        .find_map(|r| acceptable(r, endpoint))
        .ok_or_else(|| {
            Error::not_acceptable(format!(
                "only the following media types are accepted: {ACCEPTED}"
            ))
        })
}

fn acceptable(range: &MediaRange<'_>, endpoint: Endpoint) -> Option<Target> {
    let encoding = if range.is("application", "yaml") {
        Encoding::Yaml
    } else if range.matches("application", "json") {
        Encoding::Json
    } else {
        return None;
    };
    let param = |name: &str| range.param(name);
    let shape = match param("as") {
        None => Shape::Object,
        Some(kind) => {
            if param("g") != Some("meta.k8s.io") || param("v") != Some("v1") {
                return None;
            }
            let shape = match kind {
                "Table" => Shape::Table,
                "PartialObjectMetadata" => Shape::PartialObjectMetadata,
                "PartialObjectMetadataList" => Shape::PartialObjectMetadataList,
                _ => return None,
            };
            let fits = match (endpoint, shape) {
                (Endpoint::Plain, _) => false,
                (_, Shape::Table) => true,
                (Endpoint::Object | Endpoint::Watch, Shape::PartialObjectMetadata) => true,
                (Endpoint::List, Shape::PartialObjectMetadataList) => true,
                _ => false,
            };
            if !fits {
                return None;
            }
            shape
        }
    };
    Some(Target { encoding, shape })
}

/// How a request body is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyEncoding {
    /// JSON.
    Json,
    /// YAML (converted to JSON on decode).
    Yaml,
}

/// Reads `Content-Type` of a create or update body. A body without one is JSON, as
/// kube-apiserver reads it (its first serializer), which is what `kubectl create --raw` sends.
pub fn body_encoding(content_type: Option<&str>) -> Result<BodyEncoding> {
    let Some(content_type) = content_type.filter(|c| !c.trim().is_empty()) else {
        return Ok(BodyEncoding::Json);
    };
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(BodyEncoding::Json),
        "application/yaml" => Ok(BodyEncoding::Yaml),
        _ => Err(Error::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: {ACCEPTED}"
        ))),
    }
}

/// Decodes a body into JSON. Malformed input is a 400 that says where it broke.
pub fn decode_body(bytes: &[u8], encoding: BodyEncoding) -> Result<Value> {
    decode_object(bytes, encoding).map(|(value, _)| value)
}

/// Decodes a body into a JSON object, with the paths of fields given more than once (the
/// last value is kept, as Go's decoder keeps it; see `endpoints::duplicates`).
pub fn decode_object(bytes: &[u8], encoding: BodyEncoding) -> Result<(Value, Vec<String>)> {
    read_object(bytes, encoding).map_err(Error::from)
}

/// Why a body was not decoded.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The decoder refused the body as kube-apiserver's decoders refuse it (nested too deep,
    /// aliases expanding too far): their text, which each verb's handler wraps as kube's
    /// handler of that verb does.
    Unreadable(String),
    /// The body is not well-formed: the parser's message.
    Malformed(BodyEncoding, String),
    /// Any other failure, answered as it is.
    Refused(Error),
}

impl From<BodyError> for Error {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Unreadable(text) => {
                Error::bad_request(format!("cannot unmarshal request body: {text}"))
            }
            BodyError::Malformed(BodyEncoding::Json, e) => {
                Error::bad_request(format!("json: cannot unmarshal request body: {e}"))
            }
            BodyError::Malformed(BodyEncoding::Yaml, e) => {
                Error::bad_request(format!("yaml: cannot unmarshal request body: {e}"))
            }
            BodyError::Refused(e) => e,
        }
    }
}

/// Bodies larger than this are decoded on a blocking thread, so that a large body never
/// holds an async worker (and the requests it would serve meanwhile) for its parse.
const BLOCKING_DECODE_BYTES: usize = 64 * 1024;

/// `decode(bytes)`, on a blocking thread when the body is large.
pub(crate) async fn off_workers<T: Send + 'static>(
    bytes: bytes::Bytes,
    decode: impl FnOnce(&[u8]) -> T + Send + 'static,
) -> Result<T> {
    if bytes.len() <= BLOCKING_DECODE_BYTES {
        return Ok(decode(&bytes));
    }
    match tokio::task::spawn_blocking(move || decode(&bytes)).await {
        Ok(decoded) => Ok(decoded),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::internal(e)),
    }
}

/// Decodes a body into a JSON object (see [`decode_object`]).
pub(crate) fn read_object(
    bytes: &[u8],
    encoding: BodyEncoding,
) -> std::result::Result<(Value, Vec<String>), BodyError> {
    let (value, duplicates) = read_value(bytes, encoding)?;
    if !value.is_object() {
        return Err(BodyError::Refused(Error::bad_request(
            "the request body must be an object",
        )));
    }
    Ok((value, duplicates))
}

/// Decodes a body into JSON, with the paths of its duplicate fields. Its nesting is
/// measured before it is parsed ([`nesting`]), and a YAML body may make at most as many
/// values as it has bytes (or [`ALIAS_FLOOR`]), which bounds what its aliases expand to.
pub(crate) fn read_value(
    bytes: &[u8],
    encoding: BodyEncoding,
) -> std::result::Result<(Value, Vec<String>), BodyError> {
    match encoding {
        BodyEncoding::Json => {
            nesting::check_json(bytes).map_err(|e| BodyError::Unreadable(e.to_string()))?;
            let mut de = serde_json::Deserializer::from_slice(bytes);
            decode_noting_duplicates(&mut de)
                .and_then(|decoded| de.end().map(|()| decoded))
                .map_err(|e| BodyError::Malformed(encoding, e.to_string()))
        }
        BodyEncoding::Yaml => {
            nesting::check_yaml(bytes).map_err(|e| BodyError::Unreadable(e.to_string()))?;
            let de = serde_norway::Deserializer::from_slice(bytes);
            decode_within(de, bytes.len().max(ALIAS_FLOOR)).map_err(|e| match e {
                // go-yaml's words for a document whose aliases expand too far.
                Exceeded::Values => {
                    BodyError::Unreadable("yaml: document contains excessive aliasing".into())
                }
                Exceeded::Decoder(e) => BodyError::Malformed(encoding, e.to_string()),
            })
        }
    }
}

/// How many values any YAML body may make, however short: go-yaml lets a small document
/// take nearly all of its first 400,000 decoded values from aliases.
pub const ALIAS_FLOOR: usize = 400_000;

/// kube-apiserver's `summarizeData(body, 30)`, quoted in its answer to a body it could not
/// decode: the first 30 bytes as they are when the body starts with `{`, else in hex.
pub(crate) fn summarize_body(body: &[u8]) -> String {
    const MAX: usize = 30;
    let (head, more) = match body.len() > MAX {
        true => (&body[..MAX], " ..."),
        false => (body, ""),
    };
    match body.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(head)),
        Some(_) => {
            let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}{more}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same rules as discovery's: q first, then the more specific clause (goautoneg).
    #[test]
    fn at_equal_quality_the_more_specific_clause_wins() {
        let yaml = negotiate(Some("*/*;q=0.9, application/yaml;q=0.9"), Endpoint::Object);
        assert_eq!(yaml.unwrap().encoding, Encoding::Yaml);
        let json = negotiate(Some("application/yaml;q=0.5, */*"), Endpoint::Object);
        assert_eq!(json.unwrap().encoding, Encoding::Json);
        // A bare `*` is `*/*`; `q=0` refuses a type.
        assert_eq!(
            negotiate(Some("*"), Endpoint::Object).unwrap(),
            Target::JSON
        );
        assert!(negotiate(Some("application/json;q=0"), Endpoint::Object).is_err());
    }

    #[test]
    fn kubectl_get_asks_for_a_table() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let t = negotiate(Some(accept), Endpoint::List).unwrap();
        assert_eq!(t.shape, Shape::Table);
        assert_eq!(
            negotiate(Some(accept), Endpoint::Plain).unwrap(),
            Target::JSON
        );
    }

    #[test]
    fn metadata_only_fits_its_endpoint() {
        let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(
            negotiate(Some(one), Endpoint::Object).unwrap().shape,
            Shape::PartialObjectMetadata
        );
        assert_eq!(
            negotiate(Some(one), Endpoint::List).unwrap_err().code(),
            406
        );
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            negotiate(Some(list), Endpoint::List).unwrap().shape,
            Shape::PartialObjectMetadataList
        );
    }

    #[test]
    fn unsupported_types_are_refused() {
        assert_eq!(
            negotiate(
                Some("application/vnd.kubernetes.protobuf"),
                Endpoint::Object
            )
            .unwrap_err()
            .code(),
            406
        );
        assert_eq!(
            negotiate(Some("text/html"), Endpoint::Object)
                .unwrap_err()
                .code(),
            406
        );
        assert_eq!(
            negotiate(Some("application/yaml"), Endpoint::Object)
                .unwrap()
                .encoding,
            Encoding::Yaml
        );
        assert_eq!(negotiate(None, Endpoint::Object).unwrap(), Target::JSON);
        assert_eq!(
            negotiate(Some("*/*"), Endpoint::Object).unwrap(),
            Target::JSON
        );
        assert_eq!(
            body_encoding(Some("application/vnd.kubernetes.protobuf"))
                .unwrap_err()
                .code(),
            415
        );
        assert_eq!(
            body_encoding(Some("application/json; charset=utf-8")).unwrap(),
            BodyEncoding::Json
        );
        // No Content-Type is JSON; a 415 lists only what is really accepted.
        assert_eq!(body_encoding(None).unwrap(), BodyEncoding::Json);
        assert_eq!(body_encoding(Some("")).unwrap(), BodyEncoding::Json);
        let e = body_encoding(Some("text/plain")).unwrap_err();
        assert_eq!(
            e.message(),
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml"
        );
    }

    fn unreadable(body: &[u8], encoding: BodyEncoding) -> String {
        match read_value(body, encoding) {
            Err(BodyError::Unreadable(text)) => text,
            other => panic!("not refused as unreadable: {other:?}"),
        }
    }

    /// kube's decoders' words for a body nested past 10,000 levels (past this server's 127,
    /// the same words with its limit), found before any parser runs: a 200 KB body nested
    /// 100,000 levels is refused at once.
    #[test]
    fn deep_bodies_are_refused_before_parsing() {
        let json = r#"{"a":"#.repeat(100_000);
        assert_eq!(
            unreadable(json.as_bytes(), BodyEncoding::Json),
            "invalid character '{' exceeded max depth"
        );
        let flow = "[".repeat(100_000);
        for encoding in [BodyEncoding::Json, BodyEncoding::Yaml] {
            assert!(!unreadable(flow.as_bytes(), encoding).is_empty());
        }
        assert_eq!(
            unreadable(flow.as_bytes(), BodyEncoding::Yaml),
            "yaml: exceeded max depth of 10000"
        );
        let block = format!("metadata:\n  name: x\nspec:\n  {}", "- ".repeat(100_000));
        assert_eq!(
            unreadable(block.as_bytes(), BodyEncoding::Yaml),
            "yaml: line 4: exceeded max depth of 10000"
        );
        let deep = format!("a: {}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            unreadable(deep.as_bytes(), BodyEncoding::Yaml),
            "yaml: exceeded max depth of 127"
        );
    }

    /// Aliases that replay a large anchor many times (a "billion laughs") stop at the
    /// value budget, with go-yaml's words.
    #[test]
    fn aliases_expand_within_a_budget() {
        let anchor: Vec<String> = (0..5_000).map(|i| i.to_string()).collect();
        let aliases = vec!["*a"; 200].join(", ");
        let body = format!("a: &a [{}]\nb: [{aliases}]\n", anchor.join(", "));
        assert!(body.len() < ALIAS_FLOOR);
        assert_eq!(
            unreadable(body.as_bytes(), BodyEncoding::Yaml),
            "yaml: document contains excessive aliasing"
        );
        // A few aliases are fine.
        let body = "a: &a {x: 1}\nb: *a\nc: [*a, *a]\n";
        let (value, _) = read_value(body.as_bytes(), BodyEncoding::Yaml).unwrap();
        assert_eq!(value["c"][1]["x"], 1);
    }

    #[test]
    fn bodies_are_summarized_as_kube_does() {
        assert_eq!(summarize_body(b""), "<empty>");
        assert_eq!(summarize_body(br#"{"a":1}"#), r#"{"a":1}"#);
        let long = r#"{"a":"#.repeat(10);
        assert_eq!(
            summarize_body(long.as_bytes()),
            format!("{} ...", &long[..30])
        );
        assert_eq!(summarize_body(b"- x"), "2d2078");
        assert_eq!(
            summarize_body(&[b'-'; 31]),
            format!("{} ...", "2d".repeat(30))
        );
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        assert_eq!(
            decode_body(b"{", BodyEncoding::Json).unwrap_err().code(),
            400
        );
        assert_eq!(
            decode_body(b"[1]", BodyEncoding::Json).unwrap_err().code(),
            400
        );
        assert_eq!(
            decode_body(b"a: [", BodyEncoding::Yaml).unwrap_err().code(),
            400
        );
        assert!(
            decode_body(b"a: 1", BodyEncoding::Yaml)
                .unwrap()
                .is_object()
        );
    }
}
