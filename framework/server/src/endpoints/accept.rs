//! `Accept` header parsing, the one set of rules for every endpoint: resources
//! ([`super::negotiation`]), discovery and OpenAPI.
//!
//! Clauses come back in the order a client prefers them, as Go's `goautoneg` sorts them
//! (q-value, then specificity), so a handler serves the first clause it supports and answers
//! 406 when it supports none.

use http::{HeaderMap, header};

/// One clause of an `Accept` header, e.g. `application/json;g=apidiscovery.k8s.io;v=v2`.
#[derive(Debug, PartialEq)]
pub(crate) struct MediaRange<'a> {
    type_: &'a str,
    subtype: &'a str,
    params: Vec<(&'a str, &'a str)>,
    q: f32,
}

impl<'a> MediaRange<'a> {
    /// Whether this clause accepts `type_/subtype` (wildcards included).
    pub(crate) fn matches(&self, type_: &str, subtype: &str) -> bool {
        let type_ok = self.type_ == "*" || self.type_.eq_ignore_ascii_case(type_);
        let subtype_ok = self.subtype == "*" || self.subtype.eq_ignore_ascii_case(subtype);
        type_ok && subtype_ok
    }

    /// Whether this clause names exactly `type_/subtype` (no wildcard).
    pub(crate) fn is(&self, type_: &str, subtype: &str) -> bool {
        self.type_.eq_ignore_ascii_case(type_) && self.subtype.eq_ignore_ascii_case(subtype)
    }

    /// The value of a media type parameter such as `as`, `g` or `v`.
    pub(crate) fn param(&self, name: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }

    /// Whether the clause asks for a conversion (`as`, `g`, `v`) or a stream (`stream`), which
    /// plain documents cannot honour.
    pub(crate) fn is_qualified(&self) -> bool {
        ["as", "g", "v", "stream"]
            .iter()
            .any(|name| self.param(name).is_some())
    }

    fn specificity(&self) -> u8 {
        u8::from(self.type_ != "*") + u8::from(self.subtype != "*")
    }
}

/// The clauses of the request's `Accept` header, most preferred first; `*/*` when absent.
pub(crate) fn media_ranges(headers: &HeaderMap) -> Vec<MediaRange<'_>> {
    parse_accept(
        headers
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok()),
    )
}

/// The clauses of an `Accept` value, most preferred first; `*/*` when absent or blank.
/// Clauses with `q=0` are left out: the client refuses them.
pub(crate) fn parse_accept(accept: Option<&str>) -> Vec<MediaRange<'_>> {
    let accept = accept
        .filter(|value| !value.trim().is_empty())
        .unwrap_or("*/*");
    let mut ranges: Vec<MediaRange<'_>> = accept
        .split(',')
        .filter_map(parse_clause)
        .filter(|range| range.q > 0.0)
        .collect();
    // Stable, like goautoneg on short lists: higher q first, then concrete before wildcard.
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| b.specificity().cmp(&a.specificity()))
    });
    ranges
}

fn parse_clause(clause: &str) -> Option<MediaRange<'_>> {
    let mut parts = clause.split(';').map(str::trim);
    // A bare `*` (some clients send it) is `*/*`, as goautoneg reads it.
    let (type_, subtype) = match parts.next()? {
        "*" => ("*", "*"),
        essence => essence.split_once('/')?,
    };
    let (type_, subtype) = (type_.trim(), subtype.trim());
    if type_.is_empty() || subtype.is_empty() {
        return None;
    }
    let mut range = MediaRange {
        type_,
        subtype,
        params: Vec::new(),
        q: 1.0,
    };
    for param in parts {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim().trim_matches('"'));
        if key.eq_ignore_ascii_case("q") {
            range.q = value.parse().unwrap_or(0.0);
        } else {
            range.params.push((key, value));
        }
    }
    Some(range)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ranges(accept: &str) -> Vec<String> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        media_ranges(&headers)
            .iter()
            .map(|r| format!("{}/{}", r.type_, r.subtype))
            .collect()
    }

    #[test]
    fn absent_header_accepts_anything() {
        let headers = HeaderMap::new();
        let parsed = media_ranges(&headers);
        assert_eq!(parsed.len(), 1);
        assert!(parsed[0].matches("application", "json"));
    }

    #[test]
    fn sorts_by_quality_then_specificity_keeping_order() {
        let order = ranges("*/*;q=0.5, application/yaml, text/*, application/json;q=0.9");
        assert_eq!(
            order,
            ["application/yaml", "text/*", "application/json", "*/*"]
        );
    }

    #[test]
    fn drops_refused_and_malformed_clauses() {
        assert_eq!(
            ranges("application/json;q=0, garbage, text/plain"),
            ["text/plain"]
        );
    }

    #[test]
    fn reads_parameters() {
        let mut headers = HeaderMap::new();
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
        let parsed = media_ranges(&headers);
        assert_eq!(parsed[0].param("as"), Some("APIGroupDiscoveryList"));
        assert_eq!(parsed[0].param("V"), Some("v2"));
        assert!(parsed[0].is_qualified());
    }
}

/// Accept headers of any shape: parsed without panicking, every range well-formed.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_accept_header_parses(header in "[a-z/*;=,.+ q0-9\"é-]{0,48}") {
            for range in parse_accept(Some(&header)) {
                let _ = (range.is_qualified(), range.param("as"), range.matches("application", "json"));
            }
        }
    }
}
