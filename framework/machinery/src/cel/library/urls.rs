//! kube's URL library (`library/urls.go`): `url(string)`, `isURL(string)` and the
//! accessors of a URL. A URL is an absolute URI or an absolute path, as Go's
//! `url.ParseRequestURI` accepts them; the parts follow Go's `net/url`.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{STRING_TYPE, Type};
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};

use super::{error, global, member, op, opaque_arg, string_arg};

/// The CEL type name of a URL (kube's `kubernetes.URL`).
pub(crate) const URL_TYPE: &str = "kubernetes.URL";

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let url = Type::new_opaque_type(URL_TYPE);
    global(env, "url", &[STRING_TYPE], op!(to_url))?;
    global(env, "isURL", &[STRING_TYPE], op!(is_url))?;
    member(env, "getScheme", &url, &[], op!(get_scheme))?;
    member(env, "getHost", &url, &[], op!(get_host))?;
    member(env, "getHostname", &url, &[], op!(get_hostname))?;
    member(env, "getPort", &url, &[], op!(get_port))?;
    member(env, "getEscapedPath", &url, &[], op!(get_escaped_path))?;
    member(env, "getQuery", &url, &[], op!(get_query))?;
    Ok(())
}

/// A parsed URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    source: String,
    scheme: String,
    host: String,
    path: String,
    query: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        URL_TYPE
    }
}

impl Url {
    /// Parses `source` as `url.ParseRequestURI` does, or says why not.
    pub(crate) fn parse(source: &str) -> Result<Url, String> {
        let invalid = || format!("parse {source:?}: invalid URI for request");
        if source.is_empty() {
            return Err(format!("parse {source:?}: empty url"));
        }
        if source.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(format!(
                "parse {source:?}: net/url: invalid control character in URL"
            ));
        }
        // `url.Parse` drops the fragment; `ParseRequestURI` would keep it in the path.
        let without_fragment = source.split_once('#').map_or(source, |(a, _)| a);
        let (rest, query) = match without_fragment.split_once('?') {
            Some((rest, query)) => (rest, query),
            None => (without_fragment, ""),
        };
        let (scheme, rest) = match rest.split_once(':') {
            Some((scheme, rest)) if is_scheme(scheme) => (scheme.to_ascii_lowercase(), rest),
            Some(("", _)) => {
                return Err(format!("parse {source:?}: missing protocol scheme"));
            }
            _ => (String::new(), rest),
        };
        if !rest.starts_with('/') {
            return Err(invalid());
        }
        let (host, path) = match rest.strip_prefix("//") {
            Some(authority) if !scheme.is_empty() => {
                let end = authority.find('/').unwrap_or(authority.len());
                let (authority, path) = authority.split_at(end);
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                check_host(source, host)?;
                (host.to_string(), path)
            }
            _ => (String::new(), rest),
        };
        Ok(Url {
            source: source.to_string(),
            scheme,
            host,
            path: path.to_string(),
            query: query.to_string(),
        })
    }

    fn hostname(&self) -> &str {
        let host = self.host.as_str();
        if let Some(bracketed) = host.strip_prefix('[') {
            return bracketed.split_once(']').map_or(bracketed, |(h, _)| h);
        }
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    }

    fn port(&self) -> &str {
        let host = self.host.as_str();
        let after = match host.rfind(']') {
            Some(i) => &host[i + 1..],
            None => host,
        };
        after.rsplit_once(':').map_or("", |(_, p)| p)
    }
}

fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Go's check of a host's port (`validOptionalPort`) and brackets.
fn check_host(source: &str, host: &str) -> Result<(), String> {
    let port = if let Some(inner) = host.strip_prefix('[') {
        let Some((_, after)) = inner.split_once(']') else {
            return Err(format!("parse {source:?}: missing ']' in host"));
        };
        after
    } else {
        match host.find(':') {
            Some(i) => &host[i..],
            None => "",
        }
    };
    if port.is_empty() {
        return Ok(());
    }
    match port.strip_prefix(':') {
        Some(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => Err(format!(
            "parse {source:?}: invalid port {port:?} after host"
        )),
    }
}

/// Whether `raw` is a valid escaping of a path (Go's `validEncoded`).
fn valid_encoded(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            if hex_byte(&bytes[i + 1..]).is_none() {
                return false;
            }
            i += 3;
            continue;
        }
        let ok = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@[]/".contains(&b);
        if !ok {
            return false;
        }
        i += 1;
    }
    true
}

fn unescape(s: &str, plus_is_space: bool) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut rest = s.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        match (b, hex_byte(tail)) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                rest = &tail[2..];
            }
            _ => {
                out.push(if b == b'+' && plus_is_space { b' ' } else { b });
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The byte two hex digits at the start of `s` write.
fn hex_byte(s: &[u8]) -> Option<u8> {
    let digits = s.get(..2)?;
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// Go's `EscapedPath`: the path as written when it is a valid escaping, else the path
/// escaped as a path.
fn escaped_path(raw: &str) -> String {
    if valid_encoded(raw) {
        return raw.to_string();
    }
    let mut out = String::new();
    for b in unescape(raw, false).bytes() {
        if b.is_ascii_alphanumeric() || b"-._~$&+,/:;=@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn to_url(args: &[Value]) -> Result<Value, ExecutionError> {
    let source = string_arg("url", args, 0)?;
    let url = Url::parse(source).map_err(|e| {
        error(
            "url",
            format!("URL parse error during conversion from string: {e}"),
        )
    })?;
    Ok(Value::Opaque(Arc::new(url)))
}

fn is_url(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        Url::parse(string_arg("isURL", args, 0)?).is_ok(),
    ))
}

fn string(s: &str) -> Value {
    Value::String(s.to_string().into())
}

fn get_scheme(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(&opaque_arg::<Url>("getScheme", args, 0)?.scheme))
}

fn get_host(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(&opaque_arg::<Url>("getHost", args, 0)?.host))
}

fn get_hostname(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(
        opaque_arg::<Url>("getHostname", args, 0)?.hostname(),
    ))
}

fn get_port(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(opaque_arg::<Url>("getPort", args, 0)?.port()))
}

fn get_escaped_path(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(&escaped_path(
        &opaque_arg::<Url>("getEscapedPath", args, 0)?.path,
    )))
}

fn get_query(args: &[Value]) -> Result<Value, ExecutionError> {
    let url = opaque_arg::<Url>("getQuery", args, 0)?;
    let mut query: HashMap<String, Vec<Value>> = HashMap::new();
    for pair in url.query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        query
            .entry(unescape(key, true))
            .or_default()
            .push(string(&unescape(value, true)));
    }
    let map: HashMap<String, Value> = query
        .into_iter()
        .map(|(k, v)| (k, Value::List(v.into())))
        .collect();
    Ok(map.into())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_errors, assert_true};

    /// The examples of kube's `library/urls.go`.
    #[test]
    fn kube_url_examples() {
        assert_true(&[
            "isURL('https://user:pass@example.com:80/path?query=val#fragment')",
            "isURL('/absolute-path')",
            "!isURL('https://a:b:c/')",
            "!isURL('../relative-path')",
            "url('/path').getScheme() == ''",
            "url('https://example.com/').getScheme() == 'https'",
            "url('https://example.com:80/').getHost() == 'example.com:80'",
            "url('https://example.com/').getHost() == 'example.com'",
            "url('https://[::1]:80/').getHost() == '[::1]:80'",
            "url('https://[::1]/').getHost() == '[::1]'",
            "url('/path').getHost() == ''",
            "url('https://example.com:80/').getHostname() == 'example.com'",
            "url('https://127.0.0.1:80/').getHostname() == '127.0.0.1'",
            "url('https://[::1]:80/').getHostname() == '::1'",
            "url('/path').getHostname() == ''",
            "url('https://example.com:80/').getPort() == '80'",
            "url('https://example.com/').getPort() == ''",
            "url('/path').getPort() == ''",
            "url('https://example.com/path').getEscapedPath() == '/path'",
            "url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'",
            "url('https://example.com').getEscapedPath() == ''",
            "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}",
            "url('https://example.com/path?key with spaces=value with spaces').getQuery() == {'key with spaces': ['value with spaces']}",
            "url('https://example.com/path?').getQuery() == {}",
            "url('https://example.com/path').getQuery() == {}",
            "url('https://example.com/') == url('https://example.com/')",
        ]);
        assert_errors(&[
            (
                "url('../relative-path')",
                "URL parse error during conversion from string",
            ),
            (
                "url('https://a:b:c/')",
                "URL parse error during conversion from string",
            ),
        ]);
    }
}
