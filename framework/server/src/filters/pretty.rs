//! Indented JSON for people: kube-apiserver indents a JSON answer when asked with
//! `?pretty=true`, or, without `pretty`, when the client is curl, Wget or a browser (its
//! `isPrettyPrint`). Only whole bodies are indented; watch streams go out as they are.

use axum::body::{Body, HttpBody as _};
use axum::extract::Request;
use axum::response::Response;
use http::header;

/// The largest body re-indented.
const MAX_PRETTY_BYTES: usize = 64 << 20;

/// Whether `request` gets indented JSON.
pub fn wanted(request: &Request) -> bool {
    if let Some(query) = request.uri().query().filter(|q| q.contains("pretty")) {
        let value = form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "pretty")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        if !value.is_empty() {
            return go_parse_bool(&value);
        }
    }
    let agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or_default();
    ["curl", "Wget", "Mozilla/5.0"]
        .iter()
        .any(|p| agent.starts_with(p))
}

/// Go's `strconv.ParseBool`, with anything it refuses as false.
fn go_parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// `response` with its JSON body indented, when it is a whole JSON body.
pub async fn indent_response(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    // A stream (watch) has no exact size: it is left alone.
    let whole = response.body().size_hint().exact().is_some();
    if !is_json || !whole {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PRETTY_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(indent(&bytes)))
}

/// Re-indents compact JSON by two spaces, as Go's `json.MarshalIndent(v, "", "  ")`: empty
/// objects and arrays stay `{}` and `[]`, a colon is followed by one space.
pub fn indent(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut i = 0;
    while i < json.len() {
        let b = json[i];
        i += 1;
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                let next = json[i..].iter().position(|c| !c.is_ascii_whitespace());
                if next.is_some_and(|n| json[i + n] == close) {
                    out.extend_from_slice(&[b, close]);
                    i += next.unwrap_or(0) + 1;
                    continue;
                }
                depth += 1;
                out.push(b);
                newline(&mut out, depth);
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(b);
            }
            b',' => {
                out.push(b);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            b if b.is_ascii_whitespace() => {}
            b => out.push(b),
        }
    }
    out
}

fn newline(out: &mut Vec<u8>, depth: usize) {
    out.push(b'\n');
    out.extend(std::iter::repeat_n(b' ', depth * 2));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indents_as_go() {
        let compact =
            br#"{"kind":"Status","metadata":{},"items":[],"a":[1,{"b":"x,y:{\"}"}],"c":null}"#;
        let pretty = String::from_utf8(indent(compact)).unwrap();
        assert_eq!(
            pretty,
            "{\n  \"kind\": \"Status\",\n  \"metadata\": {},\n  \"items\": [],\n  \"a\": [\n    1,\n    {\n      \"b\": \"x,y:{\\\"}\"\n    }\n  ],\n  \"c\": null\n}"
        );
        let back: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(
            back,
            serde_json::from_slice::<serde_json::Value>(compact).unwrap()
        );
    }

    #[test]
    fn asked_for_by_parameter_or_by_people_tools() {
        let request = |uri: &str, agent: &str| {
            Request::get(uri)
                .header("user-agent", agent)
                .body(Body::empty())
                .unwrap()
        };
        assert!(wanted(&request("/apis?pretty=true", "kubectl/v1.32")));
        assert!(wanted(&request("/apis", "curl/7.88.1")));
        assert!(!wanted(&request("/apis?pretty=false", "curl/7.88.1")));
        assert!(wanted(&request("/apis?pretty=", "Mozilla/5.0 (X11)")));
        assert!(!wanted(&request("/apis", "kubectl/v1.32")));
    }
}
