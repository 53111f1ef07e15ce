//! The string `format`s a CRD's schema enforces (apiextensions-apiserver's
//! `validation/formats.go`, `supportedVersionedFormats` up to 1.34, as kube-openapi's
//! `strfmt` checks them). Any other format, `date-time` and `int32` among them, is
//! documentation only, as kube strips it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use base64::Engine;
use regex::Regex;

/// A format kube checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Format(&'static str);

const KNOWN: [&str; 27] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "k8s-short-name",
    "k8s-long-name",
    "",
];

impl Format {
    /// The format named `name`, when kube checks it.
    pub(super) fn known(name: &str) -> Option<Self> {
        KNOWN
            .iter()
            .find(|k| !k.is_empty() && **k == name)
            .map(|k| Self(k))
    }

    pub(super) fn name(self) -> &'static str {
        self.0
    }

    /// Whether `s` is of this format.
    pub(super) fn accepts(self, s: &str) -> bool {
        match self.0 {
            "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
            "uri" => is_request_uri(s),
            "email" => matches("email", r"^[^@\s<>]+@[^@\s<>]+$", s),
            "hostname" => {
                matches(
                    "hostname",
                    r"^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.?$",
                    s,
                ) && s.len() <= 255
            }
            "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
            "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
            "cidr" => is_cidr(s),
            "mac" => is_mac(s),
            "uuid" => matches(
                "uuid",
                r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
                s,
            ),
            "uuid3" => matches(
                "uuid3",
                r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
                s,
            ),
            "uuid4" => matches(
                "uuid4",
                r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
                s,
            ),
            "uuid5" => matches(
                "uuid5",
                r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
                s,
            ),
            "isbn" => is_isbn(s, 10) || is_isbn(s, 13),
            "isbn10" => is_isbn(s, 10),
            "isbn13" => is_isbn(s, 13),
            "creditcard" => {
                let digits: String = s.chars().filter(char::is_ascii_digit).collect();
                matches(
                    "creditcard",
                    r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$",
                    &digits,
                )
            }
            "ssn" => matches("ssn", r"^\d{3}[- ]?\d{2}[- ]?\d{4}$", s),
            "hexcolor" => matches("hexcolor", r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
            "rgbcolor" => matches(
                "rgbcolor",
                r"^rgb\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)$",
                s,
            ),
            "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
            "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
            "duration" => {
                matches(
                    "duration",
                    r"^(([+-]?[0-9]*\.?[0-9]+(ns|us|µs|μs|ms|s|m|h))+|[0-9]+\s*(ns|nano|nanos|nanosecond|nanoseconds|us|micro|micros|microsecond|microseconds|ms|milli|millis|millisecond|milliseconds|s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days|w|wk|wks|week|weeks))$",
                    s,
                ) || s == "0"
            }
            "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
            "k8s-short-name" => {
                s.len() <= 63 && matches("short", r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", s)
            }
            "k8s-long-name" => {
                s.len() <= 253
                    && matches(
                        "long",
                        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                        s,
                    )
            }
            _ => true, // password: any string
        }
    }
}

/// `pattern` of the format `name`, compiled once.
fn matches(name: &'static str, pattern: &'static str, s: &str) -> bool {
    static CACHE: OnceLock<std::sync::Mutex<Vec<(&'static str, Regex)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, regex)) = cache.iter().find(|(n, _)| *n == name) {
        return regex.is_match(s);
    }
    let regex = Regex::new(pattern).expect("the formats' patterns compile");
    let found = regex.is_match(s);
    cache.push((name, regex));
    found
}

/// Go's `url.ParseRequestURI`: an absolute URI or an absolute path, no fragment.
fn is_request_uri(s: &str) -> bool {
    if s.starts_with('/') {
        return !s.contains(char::is_whitespace);
    }
    matches("uri", r"^[a-zA-Z][a-zA-Z0-9+.-]*:[^\s#]+$", s)
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => prefix <= 32,
        Ok(IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

/// Go's `net.ParseMAC`: 6, 8 or 20 octets, `:`- or `-`-separated pairs or `.`-separated
/// quads.
fn is_mac(s: &str) -> bool {
    let hex = |part: &str, n: usize| part.len() == n && part.bytes().all(|b| b.is_ascii_hexdigit());
    for separator in [':', '-'] {
        let parts: Vec<&str> = s.split(separator).collect();
        if [6, 8, 20].contains(&parts.len()) && parts.iter().all(|p| hex(p, 2)) {
            return true;
        }
    }
    let parts: Vec<&str> = s.split('.').collect();
    [3, 4, 10].contains(&parts.len()) && parts.iter().all(|p| hex(p, 4))
}

/// An ISBN of `length` digits (the last of an ISBN-10 may be X), hyphens and spaces allowed.
fn is_isbn(s: &str, length: usize) -> bool {
    let chars: Vec<char> = s.chars().filter(|c| *c != '-' && *c != ' ').collect();
    if chars.len() != length {
        return false;
    }
    let digit = |c: char, i: usize| match c {
        'X' | 'x' if length == 10 && i == 9 => Some(10),
        c => c.to_digit(10),
    };
    let Some(digits) = chars
        .iter()
        .enumerate()
        .map(|(i, c)| digit(*c, i))
        .collect::<Option<Vec<u32>>>()
    else {
        return false;
    };
    if length == 10 {
        let sum: u32 = digits
            .iter()
            .enumerate()
            .map(|(i, d)| (10 - i as u32) * d)
            .sum();
        sum % 11 == 0
    } else {
        let sum: u32 = digits
            .iter()
            .enumerate()
            .map(|(i, d)| if i % 2 == 0 { *d } else { 3 * d })
            .sum();
        sum % 10 == 0
    }
}
