//! Objects to and from stored bytes, and from JSON to the user's type.

use std::io::Write as _;
use std::ops::Range;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::registry::context::{PatchDecoding, RequestContext};
use crate::registry::options::FieldValidation;
use serde_path_to_error::Segment;

use crate::codec::unknown;
use crate::registry::schema_errors::schema_errors;
use crate::registry::schema_validation;
use crate::runtime::jsonpath::go_json;
use crate::runtime::object::{self, metadata_mut, set_meta};
use crate::runtime::{FieldError, FieldErrorType, Resource, ResourceInfo};
use crate::storage::cacher::{CachedObject, Encoded};
use crate::storage::{KeyValue, StorageError};

/// A stored object, with `metadata.resourceVersion` from the key's modification revision.
pub(crate) fn decode_stored(kv: &KeyValue) -> Result<Value> {
    let mut object: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| Error::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    set_meta(
        &mut object,
        "resourceVersion",
        json!(kv.mod_revision.to_string()),
    );
    Ok(object)
}

/// The bytes a client receives for a stored key-value: the stored JSON with
/// `metadata.resourceVersion` spliced in, without decoding the object into a tree and
/// encoding it again. The result is the same JSON as [`decode_stored`] encoded (members in
/// the same order when the stored object's are sorted, as this crate writes them).
pub(crate) fn encode_stored(kv: &KeyValue) -> Result<Bytes> {
    spliced_or_encoded(kv).map(|spliced| Bytes::from(spliced.json))
}

/// [`encode_stored`] with the parts of the bytes other objects of the resource repeat: all
/// before the first member of `metadata` (`{"apiVersion":…,"kind":…,"metadata":{`), and
/// the value of `metadata.managedFields` (and its part before the first entry's `time`),
/// which the watch cache keeps once for the objects that have the same.
fn encode_stored_parts(kv: &KeyValue) -> Result<Encoded> {
    spliced_or_encoded(kv).map(parts_of)
}

/// What the watch cache keeps of `spliced`: its bytes, and where the parts other objects
/// repeat are in them.
fn parts_of(spliced: Spliced) -> Encoded {
    let Spliced {
        json: mut encoded,
        head,
        managed_fields: repeated,
    } = spliced;
    // Only the cache keeps the shorter part, so only its encoding looks for it.
    let shorter = repeated
        .as_ref()
        .and_then(|span| first_entry_time(&encoded, span.start));
    // Watch-cache objects are kept for as long as they are current: no spare capacity.
    encoded.shrink_to_fit();
    Encoded {
        bytes: Bytes::from(encoded),
        head,
        repeated,
        shorter,
    }
}

/// [`encode_for_client`] of bytes this crate wrote (`stored`, at `revision`): the places the
/// writing found, instead of a scan. `None` where the splice is left to judge.
pub(crate) fn encode_written(stored: &StoredJson, revision: i64) -> Option<Encoded> {
    stored.spliced(revision).map(parts_of)
}

/// The stored JSON with `resourceVersion` spliced in, or (when it cannot be spliced) the
/// object decoded and encoded again, which has no spans.
fn spliced_or_encoded(kv: &KeyValue) -> Result<Spliced> {
    // The splice checks the JSON's grammar as it goes, and passes over anything whose verdict
    // it leaves to the decoder; bytes that are not JSON get the same 500 from the decoding path.
    let fast = splice_resource_version(&kv.value, kv.mod_revision)
        .filter(|_| std::str::from_utf8(&kv.value).is_ok());
    if let Some(spliced) = fast {
        return Ok(spliced);
    }
    Ok(Spliced {
        json: serde_json::to_vec(&decode_stored(kv)?).map_err(Error::internal)?,
        head: 0,
        managed_fields: None,
    })
}

/// [`encode_stored`] for the watch cache, with the parts objects repeat.
pub(crate) fn encode_for_client(kv: &KeyValue) -> std::result::Result<Encoded, StorageError> {
    encode_stored_parts(kv).map_err(|e| StorageError::Internal(e.message().to_string()))
}

/// The raw `apiVersion` of a stored object, without decoding it: the top-level members are
/// skipped until `apiVersion`, the first of them in what this crate stores (members sorted).
/// `None` when there is none, it is not a plain string, or `json` is not an object.
pub(crate) fn stored_api_version(json: &[u8]) -> Option<&[u8]> {
    let mut scan = Scan::new(json, 0);
    scan.expect(b'{')?;
    loop {
        let key = scan.string()?;
        scan.expect(b':')?;
        if &json[key.0..key.1] == b"apiVersion" {
            let value = scan.string()?;
            return Some(&json[value.0..value.1]);
        }
        scan.value()?;
        if scan.after_member()? {
            return None;
        }
    }
}

/// `json` with `resourceVersion` spliced in ([`splice_resource_version`]), and where in it
/// two parts are that other objects repeat.
struct Spliced {
    json: Vec<u8>,
    /// `json[..head]` is all before the first member of `metadata` (after its `{`).
    head: usize,
    /// The span of `metadata.managedFields`' value (the last, if there are two).
    managed_fields: Option<Range<usize>>,
}

/// `json` (one object) with `"resourceVersion":"{revision}"` set in its top-level
/// `metadata` object: inserted before the first member whose key sorts after it, or its
/// value replaced when present. `None` when `json` is not an object with one `metadata`
/// object, or has a key the splice cannot judge by its bytes (escaped), or two
/// `resourceVersion`s in `metadata`: the caller decodes it instead, where the last of
/// duplicate members wins, as for every JSON reader of ours and of kube's. `None` as well
/// when `json` is not JSON by [`Scan`]'s checks (all but its UTF-8, which the caller checks).
fn splice_resource_version(json: &[u8], revision: i64) -> Option<Spliced> {
    const RV: &[u8] = b"resourceVersion";
    let mut scan = Scan::new(json, 0);
    scan.expect(b'{')?;
    // The top-level members until `metadata`.
    loop {
        let key = plain_key(&mut scan)?;
        scan.expect(b':')?;
        if key == b"metadata" {
            break;
        }
        scan.value()?;
        if scan.after_member()? {
            return None;
        }
    }
    scan.expect(b'{')?;
    let head = scan.at;
    let mut managed_fields = None;
    // Where the member goes, or which value it replaces, and whether a comma follows.
    let (start, end, comma_before, comma_after) = if scan.peek()? == b'}' {
        no_second_metadata(json, scan.at + 1)?;
        (scan.at, scan.at, false, false)
    } else {
        let mut found = None;
        let mut last_end;
        loop {
            scan.skip_ws();
            let member = scan.at;
            let key = plain_key(&mut scan)?;
            scan.expect(b':')?;
            scan.skip_ws();
            let value_start = scan.at;
            scan.value()?;
            last_end = scan.at;
            match found {
                _ if key == RV && matches!(found, Some(Place::Replace(..))) => return None,
                None | Some(Place::Before(_)) if key == RV => {
                    found = Some(Place::Replace(value_start, scan.at));
                }
                None if key > RV => found = Some(Place::Before(member)),
                _ => {}
            }
            if key == b"managedFields" {
                managed_fields = Some(value_start..scan.at);
            }
            if scan.after_member()? {
                break;
            }
        }
        no_second_metadata(json, scan.at)?;
        match found {
            Some(Place::Replace(start, end)) => (start, end, false, false),
            Some(Place::Before(at)) => (at, at, false, true),
            None => (last_end, last_end, true, false),
        }
    };
    if scan.deferred {
        return None;
    }
    // `"resourceVersion":`, the revision in quotes (a sign and at most 19 digits), a comma.
    let mut out = Vec::with_capacity(json.len() + RV.len() + 3 + 23 + 1);
    out.extend_from_slice(&json[..start]);
    if start == end {
        if comma_before {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(RV);
        out.extend_from_slice(b"\":");
    }
    write!(out, "\"{revision}\"").expect("a Vec takes every write");
    if comma_after {
        out.push(b',');
    }
    // A span after the splice moved by what it added (a value replaced may be shorter).
    let moved = |at: usize| out.len() + at - end;
    let managed_fields = managed_fields.map(|span| {
        if span.end <= start {
            span
        } else {
            moved(span.start)..moved(span.end)
        }
    });
    out.extend_from_slice(&json[end..]);
    Some(Spliced {
        json: out,
        head,
        managed_fields,
    })
}

/// Where the value of the first entry's `time` starts in a `managedFields` value starting at
/// `at`: what comes before it is the same for the objects a manager wrote to the same fields
/// at any time. `None` when the value is not a list whose first entry has a `time`.
fn first_entry_time(json: &[u8], at: usize) -> Option<usize> {
    let mut scan = Scan::new(json, at);
    scan.expect(b'[')?;
    scan.expect(b'{')?;
    loop {
        let key = plain_key(&mut scan)?;
        scan.expect(b':')?;
        if key == b"time" {
            scan.skip_ws();
            return Some(scan.at);
        }
        scan.value()?;
        if scan.after_member()? {
            return None;
        }
    }
}

/// `Some` when the top-level members after `metadata` (from `at`, after its value) have no
/// second `metadata`, and nothing but white space follows the object.
fn no_second_metadata(json: &[u8], at: usize) -> Option<()> {
    let mut rest = Scan::new(json, at);
    while !rest.after_member()? {
        if plain_key(&mut rest)? == b"metadata" {
            return None;
        }
        rest.expect(b':')?;
        rest.value()?;
    }
    rest.skip_ws();
    (rest.at == json.len() && !rest.deferred).then_some(())
}

/// The next key of an object, when it has no escapes (its bytes are then its text).
fn plain_key<'a>(scan: &mut Scan<'a>) -> Option<&'a [u8]> {
    let (start, end) = scan.string()?;
    let key = &scan.json[start..end];
    (!key.contains(&b'\\')).then_some(key)
}

/// Where `resourceVersion` goes in a `metadata` object.
enum Place {
    /// Replaces the value between these offsets.
    Replace(usize, usize),
    /// A new member before the member starting at this offset.
    Before(usize),
}

/// A cursor over JSON text that finds member boundaries without building values, and checks
/// the grammar of what it passes over: the values it skips, the strings (no control
/// characters, known escapes), the separators. It does not check UTF-8. What is grammatical
/// but a decoder may still refuse, it passes over and notes in `deferred`: escapes of UTF-16
/// surrogates (serde_json judges their pairs), numbers with an exponent or more than
/// [`MAX_DIGITS`] digits (their range). Nesting deeper than [`MAX_DEPTH`] it refuses.
struct Scan<'a> {
    json: &'a [u8],
    at: usize,
    /// Something was passed over whose verdict is a decoder's.
    deferred: bool,
}

/// The deepest nesting [`Scan::value`] passes over, below serde_json's limit of 128.
const MAX_DEPTH: usize = 100;

/// The most digits of a number [`Scan`] passes over: well within an `f64`'s range.
const MAX_DIGITS: usize = 100;

impl<'a> Scan<'a> {
    /// A cursor at `at` of `json`, with nothing deferred yet.
    fn new(json: &'a [u8], at: usize) -> Self {
        Self {
            json,
            at,
            deferred: false,
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.json.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.json.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string; returns the span of its raw (still escaped) content.
    fn string(&mut self) -> Option<(usize, usize)> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            self.at = plain_run_end(self.json, self.at);
            match *self.json.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some((start, self.at - 1));
                }
                b'\\' => self.escape()?,
                _ => return None, // a control character
            }
        }
    }

    /// An escape, at its backslash.
    fn escape(&mut self) -> Option<()> {
        match *self.json.get(self.at + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
            b'u' => {
                let hex = self.json.get(self.at + 2..self.at + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                let surrogate = matches!(hex[0], b'd' | b'D')
                    && matches!(hex[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F');
                self.deferred |= surrogate;
                self.at += 6;
            }
            _ => return None,
        }
        Some(())
    }

    /// Skips one value of any kind.
    fn value(&mut self) -> Option<()> {
        self.value_within(MAX_DEPTH)
    }

    /// Skips one value nested at most `depth` deep.
    fn value_within(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                let depth = depth.checked_sub(1)?;
                if self.opens_empty(b'}')? {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.expect(b':')?;
                    self.value_within(depth)?;
                    if self.after_member()? {
                        return Some(());
                    }
                }
            }
            b'[' => {
                let depth = depth.checked_sub(1)?;
                if self.opens_empty(b']')? {
                    return Some(());
                }
                loop {
                    self.value_within(depth)?;
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    /// Past the opening bracket at the cursor: whether `close` follows at once (consumed).
    fn opens_empty(&mut self, close: u8) -> Option<bool> {
        self.at += 1;
        let empty = self.peek()? == close;
        if empty {
            self.at += 1;
        }
        Some(empty)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.json[self.at..]
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    /// A number: `-`, an integer part without leading zeros, a fraction, an exponent.
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        if self.json.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let integer = self.digits();
        if integer == 0 || (integer > 1 && self.json[self.at - integer] == b'0') {
            return None;
        }
        if self.json.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.json.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.json.get(self.at) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
            self.deferred = true;
        }
        self.deferred |= self.at - start > MAX_DIGITS + 2;
        Some(())
    }

    /// Skips ASCII digits; returns how many.
    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.json.get(self.at) {
            self.at += 1;
        }
        self.at - start
    }

    /// After a member of an object: `true` at its closing brace (consumed), `false` after a
    /// comma (consumed), `None` at anything else.
    fn after_member(&mut self) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(false)
            }
            b'}' => {
                self.at += 1;
                Some(true)
            }
            _ => None,
        }
    }
}

/// Where the run of bytes a string holds as they are ends, from `at`: the first `"`, `\` or
/// control character (below 0x20), or the end of `json`. Eight bytes at a time, each word
/// tested for those bytes with the borrow of a subtraction (the lowest flagged byte is
/// always a true one), as serde_json skips to a string's end.
fn plain_run_end(json: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES << 7;
    const fn zero_bytes(word: u64) -> u64 {
        word.wrapping_sub(ONES) & !word
    }
    while let Some(chunk) = json.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let found = (zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word))
            & HIGH;
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&byte) = json.get(at) {
        if byte == b'"' || byte == b'\\' || byte < 0x20 {
            break;
        }
        at += 1;
    }
    at
}

/// A watch-cache object decoded, for selectors and shapes that need the JSON.
pub(crate) fn decode_cached(object: &CachedObject) -> Result<Value> {
    object
        .with_json(|json| serde_json::from_slice(json))
        .map_err(|e| Error::internal(format!("cached object {}: {e}", object.key_suffix())))
}

/// The bytes to store: the object without `resourceVersion` (the revision is the version).
pub(crate) fn encode_for_storage(object: &Value) -> Result<Bytes> {
    encode_answerable(object).map(|stored| stored.bytes)
}

/// The bytes to store of `object` ([`encode_for_storage`]), and where the answer to the
/// write takes its `resourceVersion`: found while the bytes are written, so the answer is
/// two copies, not a second pass over the JSON ([`splice_resource_version`]'s).
pub(crate) fn encode_answerable(object: &Value) -> Result<StoredJson> {
    let metadata_map = object
        .as_object()
        .filter(|map| map.get("metadata").is_some_and(Value::is_object));
    let (encoded, places) = match metadata_map {
        Some(map) => to_json_vec_with(|out| write_stored(out, map)),
        // Made an object with a `metadata` object first, as `metadata_mut` makes it.
        None => {
            let mut object = object.clone();
            metadata_mut(&mut object).remove("resourceVersion");
            to_json_vec(&object).map(|encoded| (encoded, Places::default()))
        }
    }
    .map_err(Error::internal)?;
    Ok(StoredJson {
        bytes: Bytes::from(encoded),
        place: places.rv,
        head: places.head,
        managed_fields: places.managed_fields,
    })
}

/// The bytes of an object to store, and where a client's answer to the write takes its
/// `"resourceVersion":"…"` in them (`None` where [`splice_resource_version`] is left to
/// judge: a key it reads has escapes), with the parts the watch cache keeps once.
pub(crate) struct StoredJson {
    pub(crate) bytes: Bytes,
    place: Option<RvPlace>,
    /// Where `metadata`'s first member starts (after its `{`).
    head: usize,
    /// The span of `metadata.managedFields`' value.
    managed_fields: Option<Range<usize>>,
}

impl StoredJson {
    /// The answer to the write at `revision`: the stored bytes with
    /// `metadata.resourceVersion` spliced in, the same JSON as encoding the object with its
    /// resourceVersion. `None` when they cannot be spliced.
    pub(crate) fn answer(&self, revision: i64) -> Option<Bytes> {
        self.spliced(revision)
            .map(|spliced| Bytes::from(spliced.json))
    }

    /// What [`splice_resource_version`] makes of the bytes, from the places found while
    /// writing them.
    fn spliced(&self, revision: i64) -> Option<Spliced> {
        let Some(place) = self.place else {
            return splice_resource_version(&self.bytes, revision);
        };
        let mut member = Vec::with_capacity(RV_MEMBER_MAX);
        if place.comma_before {
            member.push(b',');
        }
        write!(member, "\"resourceVersion\":\"{revision}\"").expect("a Vec takes every write");
        if place.comma_after {
            member.push(b',');
        }
        let (before, after) = self.bytes.split_at(place.at);
        let mut json = Vec::with_capacity(self.bytes.len() + member.len());
        json.extend_from_slice(before);
        json.extend_from_slice(&member);
        json.extend_from_slice(after);
        // A span after the place moved by what was inserted.
        let managed_fields = self.managed_fields.clone().map(|span| {
            if span.end <= place.at {
                span
            } else {
                span.start + member.len()..span.end + member.len()
            }
        });
        Some(Spliced {
            json,
            head: self.head,
            managed_fields,
        })
    }
}

/// The most a `"resourceVersion":"…"` member adds, with its comma: the key, its colon and
/// quotes, a revision of a sign and at most 19 digits.
const RV_MEMBER_MAX: usize = "\"resourceVersion\":\"\"".len() + 20 + 1;

/// Where in stored bytes the member `resourceVersion` goes: before the first member of
/// `metadata` whose key sorts after it, or at the end of `metadata`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RvPlace {
    at: usize,
    /// A member precedes it: a comma goes first.
    comma_before: bool,
    /// A member follows it: a comma goes after.
    comma_after: bool,
}

/// What writing an object's bytes found in them.
#[derive(Default)]
struct Places {
    /// Where `resourceVersion` goes; `None` when a key the splice reads needs escapes.
    rv: Option<RvPlace>,
    /// Where `metadata`'s first member starts.
    head: usize,
    /// The span of `metadata.managedFields`' value.
    managed_fields: Option<Range<usize>>,
}

/// Writes `object` (whose `metadata` is an object) as `serde_json` does, without
/// `metadata.resourceVersion`; returns where that member goes, and the places the watch
/// cache looks for. No place for `resourceVersion` when a key the splice reads (of the
/// object or of `metadata`) needs escapes.
fn write_stored(
    out: &mut Vec<u8>,
    object: &serde_json::Map<String, Value>,
) -> serde_json::Result<Places> {
    const RV: &str = "resourceVersion";
    let needs_escape = |key: &str| key.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20);
    let mut plain = true;
    let mut place = None;
    let mut places = Places::default();
    out.push(b'{');
    for (i, (key, value)) in object.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        plain &= !needs_escape(key);
        serde_json::to_writer(&mut *out, key)?;
        out.push(b':');
        let metadata = match value {
            Value::Object(metadata) if key == "metadata" => metadata,
            value => {
                serde_json::to_writer(&mut *out, value)?;
                continue;
            }
        };
        out.push(b'{');
        places.head = out.len();
        let mut first = true;
        for (key, value) in metadata.iter().filter(|(key, _)| *key != RV) {
            if !first {
                out.push(b',');
            }
            if place.is_none() && key.as_str() > RV {
                place = Some(RvPlace {
                    at: out.len(),
                    comma_before: false,
                    comma_after: true,
                });
            }
            first = false;
            plain &= !needs_escape(key);
            serde_json::to_writer(&mut *out, key)?;
            out.push(b':');
            let start = out.len();
            serde_json::to_writer(&mut *out, value)?;
            if key == "managedFields" {
                places.managed_fields = Some(start..out.len());
            }
        }
        place.get_or_insert(RvPlace {
            at: out.len(),
            comma_before: !first,
            comma_after: false,
        });
        out.push(b'}');
    }
    out.push(b'}');
    places.rv = place.filter(|_| plain);
    Ok(places)
}

/// The most unknown fields reported, as sigs.k8s.io/json's decoder keeps at most 100 strict
/// errors: a body with 200,000 unknown fields costs no more than one with 100.
const MAX_UNKNOWN_FIELDS: usize = 100;

/// Decodes JSON into `T`, reporting unknown fields as `fieldValidation` asks: a warning
/// each with `Warn`; with `Strict`, kube-apiserver's strict decoding error, a 400 for a
/// create or update body and a 422 at `patch` for a patched object (with the patch body's
/// own strict errors first, see [`RequestContext::patch`]).
pub(crate) fn decode_typed<T: Resource>(
    object: &Value,
    validation: FieldValidation,
    ctx: &RequestContext,
) -> Result<T> {
    let mut unknown = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let typed: T = unknown::from_value_reporting_unknown(object, |path| {
        // A type that does not keep `apiVersion` and `kind` is not told of them.
        if unknown.len() >= MAX_UNKNOWN_FIELDS
            || path.is_top_level("apiVersion")
            || path.is_top_level("kind")
        {
            return;
        }
        let path = path.to_string();
        if seen.insert(path.clone()) {
            unknown.push(format!("unknown field {path:?}"));
        }
    })
    .map_err(|e| decode_error::<T>(object, e))?;
    let patch = ctx.patch().filter(|p| !p.errors.is_empty());
    if (unknown.is_empty() && patch.is_none()) || validation == FieldValidation::Ignore {
        return Ok(typed);
    }
    if validation == FieldValidation::Strict {
        return Err(strict_error(&T::INFO, object, ctx.patch(), unknown));
    }
    for m in unknown {
        ctx.warn(m);
    }
    Ok(typed)
}

/// kube-apiserver's answer to strict decoding errors: for a create or update body the
/// decoder's error as `transformDecodeError` wraps it (400), for a patch
/// `NewInvalid(GroupKind{}, "", [Invalid("patch", patched, err)])` (422).
fn strict_error(
    info: &ResourceInfo,
    object: &Value,
    patch: Option<&PatchDecoding>,
    unknown: Vec<String>,
) -> Error {
    let Some(patch) = patch else {
        return cannot_handle(
            info,
            format!("strict decoding error: {}", unknown.join(", ")),
        );
    };
    let errors: Vec<String> = patch.errors.iter().cloned().chain(unknown).collect();
    let detail = format!("strict decoding error: {}", errors.join(", "));
    let shown = match &patch.shown {
        Some(shown) => shown.clone(),
        None => go_json(object),
    };
    Error::invalid_in("", "", "", &[FieldError::invalid("patch", shown, &detail)])
}

/// Why `object` does not decode into `T`: a 422 with one cause per field the type's schema
/// refuses, as kube-apiserver's schema validation of a custom resource answers; else a 422 at
/// the field where decoding stopped; a 400 only when no field can be named.
fn decode_error<T: Resource>(object: &Value, e: serde_json::Error) -> Error {
    let name = object::name(object).unwrap_or_default();
    let mut errors = schema_errors::<T>(object);
    if errors.is_empty() {
        errors.extend(failing_field::<T>(object));
    }
    if errors.is_empty() {
        return cannot_handle(&T::INFO, e);
    }
    // The type's rules did not run: kube says so when its CRD has any (an error path, so the
    // schema is looked at only here).
    if errors.iter().any(schema_validation::blocks_rules)
        && schema_validation::resource_root_schema::<T>()
            .to_string()
            .contains("\"x-kubernetes-validations\"")
    {
        errors.push(schema_validation::rules_not_checked());
    }
    Error::invalid(&T::INFO, name, &errors)
}

/// The field decoding stopped at, with serde's reason: for what the schema does not say
/// (an integer too large for its Rust type, a malformed timestamp).
fn failing_field<T: Resource>(object: &Value) -> Option<FieldError> {
    let e = serde_path_to_error::deserialize::<_, T>(object).err()?;
    let mut field = String::new();
    let mut at = Some(object);
    for segment in e.path().iter() {
        match segment {
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(key);
                at = at.and_then(|v| v.get(key.as_str()));
            }
            Segment::Seq { index } => {
                field.push_str(&format!("[{index}]"));
                at = at.and_then(|v| v.get(*index));
            }
            Segment::Unknown => {}
        }
    }
    if field.is_empty() {
        return None;
    }
    let value = match at {
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => other.to_string(),
        None => "null".into(),
    };
    Some(FieldError {
        type_: FieldErrorType::Invalid,
        field,
        value: Some(value),
        detail: e.into_inner().to_string(),
    })
}

fn cannot_handle(info: &ResourceInfo, e: impl std::fmt::Display) -> Error {
    Error::bad_request(format!(
        "{} in version {:?} cannot be handled as a {}: {e}",
        info.kind, info.version, info.kind
    ))
}

pub(crate) use crate::codec::{
    encode_typed, from_object, set_type_meta, to_json_vec, to_json_vec_with,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(value: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: "/k".into(),
            value: Bytes::from(value.to_owned()),
            create_revision: 1,
            mod_revision: revision,
        }
    }

    /// The spliced bytes are exactly what decoding and encoding again gives.
    #[test]
    fn splicing_matches_the_decoding_path() {
        let cases = [
            r#"{"apiVersion":"v1","kind":"K","metadata":{"name":"a","namespace":"n","uid":"u"},"spec":{"x":[1,{"y":"}"}]}}"#,
            r#"{"metadata":{"name":"a"}}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":{"uid":"u"}}"#,
            r#"{"metadata":{"resourceVersion":"7","uid":"u"}}"#,
            r#"{"a":"\"metadata\"","metadata":{"labels":{"resourceVersion":"x"},"name":"q\\\"z"},"z":null}"#,
            r#"{ "kind" : "K" , "metadata" : { "name" : "a" , "zz" : 1.5e3 } }"#,
            r#"{"kind":"K"}"#,
            r#"{"kind":"K","metadata":null}"#,
            r#"[1]"#,
        ];
        for json in cases {
            let kv = kv(json, 42);
            let want = serde_json::to_vec(&decode_stored(&kv).unwrap()).unwrap();
            let got = encode_stored(&kv).unwrap();
            let got: Value = serde_json::from_slice(&got).unwrap();
            let want_value: Value = serde_json::from_slice(&want).unwrap();
            assert_eq!(got, want_value, "{json}");
            if !json.contains(' ') {
                assert_eq!(
                    encode_stored(&kv).unwrap(),
                    Bytes::from(want),
                    "same bytes for {json}"
                );
            }
        }
    }

    /// A create answers with the bytes it stored, the revision spliced in: the same bytes
    /// as encoding the object it returns.
    #[test]
    fn the_answer_of_a_write_is_the_stored_bytes_with_their_version() {
        let mut object = json!({
            "apiVersion": "g/v1", "kind": "K",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "managedFields": [{"manager": "m"}]},
            "spec": {"reference": "x"},
        });
        let stored = encode_answerable(&object).unwrap();
        set_meta(&mut object, "resourceVersion", json!("42"));
        let answer = stored.answer(42).unwrap();
        assert_eq!(answer, Bytes::from(serde_json::to_vec(&object).unwrap()));
    }

    /// What the watch cache keeps once for many objects: the beginning up to `metadata`'s
    /// first member, and `managedFields`' value, wherever the splice moved it.
    #[test]
    fn the_parts_objects_repeat_are_found() {
        let cases = [
            (
                r#"{"apiVersion":"g/v1","kind":"K","metadata":{"managedFields":[{"manager":"m"}],"name":"a"},"spec":{}}"#,
                r#"{"apiVersion":"g/v1","kind":"K","metadata":{"#,
                Some(r#"[{"manager":"m"}]"#),
            ),
            (
                r#"{"metadata":{"resourceVersion":"7","managedFields":[1,{"a":"]"}]}}"#,
                r#"{"metadata":{"#,
                Some(r#"[1,{"a":"]"}]"#),
            ),
            (
                r#"{"metadata":{"uid":"u","managedFields":[2]}}"#,
                r#"{"metadata":{"#,
                Some("[2]"),
            ),
            (r#"{"metadata":{}}"#, r#"{"metadata":{"#, None),
            (
                r#"{"kind":"K","metadata":{"managedFields":null}}"#,
                r#"{"kind":"K","metadata":{"#,
                Some("null"),
            ),
            (r#"{"kind":"K","metadata":null}"#, "", None),
        ];
        for (json, head, managed_fields) in cases {
            for revision in [1, 123_456_789] {
                let encoded = encode_stored_parts(&kv(json, revision)).unwrap();
                let bytes = std::str::from_utf8(&encoded.bytes).unwrap();
                assert_eq!(&bytes[..encoded.head], head, "{json}");
                let span = encoded.repeated.clone().map(|span| &bytes[span]);
                assert_eq!(span, managed_fields, "{json} at {revision}");
                assert_eq!(encoded.shorter, None, "no entry has a time");
                assert_eq!(encoded.bytes, encode_stored(&kv(json, revision)).unwrap());
            }
        }
    }

    /// The part of `managedFields` before the first entry's `time`, which objects one
    /// manager wrote at different times have in common.
    #[test]
    fn managed_fields_before_the_first_entrys_time_are_found() {
        let cases = [
            (
                r#"{"metadata":{"managedFields":[{"manager":"m","time":"2026-11-28T13:00:00Z"},{"time":"x"}],"name":"a"}}"#,
                Some(r#"[{"manager":"m","time":"#),
            ),
            (
                r#"{"metadata":{"resourceVersion":"7","managedFields":[ { "a" : [1] , "time" : "t" } ]}}"#,
                Some(r#"[ { "a" : [1] , "time" : "#),
            ),
            (r#"{"metadata":{"managedFields":[{"manager":"m"}]}}"#, None),
            (r#"{"metadata":{"managedFields":[]}}"#, None),
            (r#"{"metadata":{"managedFields":{"time":"t"}}}"#, None),
        ];
        for (json, before_time) in cases {
            for revision in [1, 123_456_789] {
                let encoded = encode_stored_parts(&kv(json, revision)).unwrap();
                let span = encoded.repeated.clone().unwrap();
                let before = encoded
                    .shorter
                    .map(|end| std::str::from_utf8(&encoded.bytes[span.start..end]).unwrap());
                assert_eq!(before, before_time, "{json} at {revision}");
            }
        }
    }

    #[test]
    fn the_stored_api_version_is_found_without_decoding() {
        let cases: [(&str, Option<&str>); 6] = [
            (
                r#"{"apiVersion":"g/v1","kind":"K","metadata":{}}"#,
                Some("g/v1"),
            ),
            (
                r#"{ "_x" : [1, {"apiVersion":"no"}] , "apiVersion" : "g/v2" }"#,
                Some("g/v2"),
            ),
            (r#"{"kind":"K","metadata":{}}"#, None),
            (r#"{"apiVersion":1}"#, None),
            (r#"[{"apiVersion":"g/v1"}]"#, None),
            ("nope", None),
        ];
        for (json, want) in cases {
            let got = stored_api_version(json.as_bytes());
            assert_eq!(got, want.map(str::as_bytes), "{json}");
        }
    }

    /// What the splice leaves to the decoder (numbers whose range it would have to judge,
    /// escaped surrogates) and what it refuses itself, each against the decoding path.
    #[test]
    fn the_splice_checks_the_grammar_and_defers_the_rest() {
        let deferred = [
            r#"{"metadata":{"a":1e3}}"#,
            r#"{"metadata":{},"z":-0.5E-2}"#,
            r#"{"metadata":{"a":"\ud83d\ude00"}}"#,
            r#"{"a":[1e400],"metadata":{}}"#,
            r#"{"metadata":{"a":"\udc00"}}"#,
        ];
        let refused = [
            r#"{"metadata":{"a":01}}"#,
            r#"{"metadata":{"a":1.}}"#,
            r#"{"metadata":{"a":-}}"#,
            r#"{"metadata":{"a":.5}}"#,
            r#"{"metadata":{"a":1e}}"#,
            r#"{"metadata":{"a":tru}}"#,
            r#"{"metadata":{"a":nul}}"#,
            r#"{"metadata":{"a":"\x"}}"#,
            r#"{"metadata":{"a":"\u12g4"}}"#,
            "{\"metadata\":{\"a\":\"\u{1}\"}}",
            r#"{"metadata":{"a":[1,]}}"#,
            r#"{"metadata":{"a":{"b":1,}}}"#,
            r#"{"metadata":{"a":{"b" 1}}}"#,
            r#"{"metadata":{"a":[1 2]}}"#,
            r#"{"metadata":{"a":{1:2}}}"#,
            r#"{"metadata":{}} x"#,
            r#"{"metadata":{},"b":[}"#,
            r#"{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"metadata":{}}"#,
        ];
        for json in deferred.iter().chain(&refused) {
            assert!(
                splice_resource_version(json.as_bytes(), 3).is_none(),
                "{json}"
            );
            // The splice (here, the decoding path it hands over to) and decoding agree.
            crate::fuzzing::stored_object(json.as_bytes());
        }
        for json in refused.iter().take(refused.len() - 1) {
            assert!(decode_stored(&kv(json, 3)).is_err(), "{json}");
        }
        for json in [
            r#"{"metadata":{"a":[0,-0,1.25,-12.5,{},[],true,false,null]}}"#,
            r#"{"metadata":{"a":"\"\\\/\b\f\n\r\t\u00e9 é€😀"}}"#,
            " {\"metadata\" : { } }\n\t",
        ] {
            assert!(
                splice_resource_version(json.as_bytes(), 3).is_some(),
                "{json}"
            );
        }
    }

    /// The end of a string's plain run, eight bytes at a time, is where a byte-by-byte search
    /// stops.
    #[test]
    fn a_plain_run_ends_where_a_byte_search_ends_it() {
        let alphabet = [
            b'a', b'"', b'\\', 0, 0x1f, 0x20, 0x7f, 0x80, 0xff, b'!', b']',
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 24) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| alphabet[((seed >> (i * 2 % 60)) as usize + i) % alphabet.len()])
                .collect();
            for at in 0..=len {
                let want = (at..len)
                    .find(|&i| matches!(bytes[i], b'"' | b'\\' | 0..0x20))
                    .unwrap_or(len);
                assert_eq!(plain_run_end(&bytes, at), want, "{bytes:?} from {at}");
            }
        }
    }

    #[test]
    fn corrupt_stored_bytes_are_an_error() {
        for json in [
            r#"{"metadata":{"name":"a"}"#,
            r#"{"metadata":{"name":"a"}},"#,
            "nope",
        ] {
            assert!(encode_stored(&kv(json, 1)).is_err(), "{json}");
        }
    }
}

/// The splicer against the plain decoding path on generated objects and garbage.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-z\"\\\\{}:, ]{0,8}".prop_map(Value::from),
            // Control characters (escaped as `\u0001`), and UTF-8 of two to four bytes.
            "[\u{1}\u{1f}/é€😀a]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zV\"{}]{1,16}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A stored object: members in any order around a `metadata` object that may hold a
    /// `resourceVersion` already, keys that sort before and after it.
    fn stored_object() -> impl Strategy<Value = Value> {
        let meta_key = prop_oneof![
            Just("resourceVersion".to_string()),
            Just("name".to_string()),
            Just("uid".to_string()),
            Just("managedFields".to_string()),
            "[a-z]{1,16}",
        ];
        let metadata = prop::collection::btree_map(meta_key, json_value(), 0..5);
        let others = prop::collection::btree_map("[a-z]{1,10}", json_value(), 0..4);
        (metadata, others).prop_map(|(metadata, others)| {
            let mut object: serde_json::Map<String, Value> = others.into_iter().collect();
            object.insert(
                "metadata".into(),
                Value::Object(metadata.into_iter().collect()),
            );
            Value::Object(object)
        })
    }

    /// Whether serde_json writes a number of `value` with an exponent.
    fn has_exponent(value: &Value) -> bool {
        match value {
            Value::Number(n) => n.to_string().contains(['e', 'E']),
            Value::Array(items) => items.iter().any(has_exponent),
            Value::Object(members) => members.values().any(has_exponent),
            _ => false,
        }
    }

    /// The bytes a damaged object gets: JSON's own, and some it refuses.
    const DAMAGE: &[u8] = b"\"\\{}[],:0123456789-+.eEtrufalsn u/\x00\x1f\x7f\xc3\xff";

    fn kv(value: Vec<u8>, revision: i64) -> KeyValue {
        KeyValue {
            key: "/k".into(),
            value: Bytes::from(value),
            create_revision: 1,
            mod_revision: revision,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn splicing_gives_the_bytes_of_the_decoding_path(
            object in stored_object(), revision in 1i64..i64::MAX
        ) {
            let kv = kv(serde_json::to_vec(&object).unwrap(), revision);
            let decoded = decode_stored(&kv).unwrap();
            let want = serde_json::to_vec(&decoded).unwrap();
            let encoded = encode_stored_parts(&kv).unwrap();
            prop_assert_eq!(&encoded.bytes, &Bytes::from(want));
            // The store's reads send the same bytes without looking for the parts.
            prop_assert_eq!(&encode_stored(&kv).unwrap(), &encoded.bytes);
            // Numbers written with an exponent are left to the decoding path, which finds no
            // parts; all else is spliced.
            prop_assert_eq!(encoded.head == 0, has_exponent(&object));
            if encoded.head == 0 {
                return Ok(());
            }
            // The parts the watch cache may keep once are where they are said to be.
            let head = &encoded.bytes[..encoded.head];
            prop_assert!(head.ends_with(b"\"metadata\":{"), "head {:?}", head);
            let managed_fields = encoded
                .repeated
                .clone()
                .map(|span| serde_json::from_slice::<Value>(&encoded.bytes[span]).unwrap());
            prop_assert_eq!(managed_fields.as_ref(), decoded["metadata"].get("managedFields"));
            if let Some(end) = encoded.shorter {
                let span = encoded.repeated.clone().unwrap();
                prop_assert!(span.start < end && end < span.end, "{:?} {}", span, end);
            }
        }

        /// A stored object with a few bytes changed, added or taken out: whatever that makes of
        /// it, the splice gives what decoding gives, or both refuse it.
        #[test]
        fn damaged_objects_are_judged_as_decoding_judges_them(
            object in stored_object(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop::sample::select(DAMAGE)), 1..4),
        ) {
            let mut bytes = serde_json::to_vec(&object).unwrap();
            for (at, kind, byte) in edits {
                let at = at.index(bytes.len());
                match kind {
                    0 => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ => drop(bytes.remove(at)),
                }
            }
            crate::fuzzing::stored_object(&bytes);
        }

        /// The bytes a write stores are the object's without its `resourceVersion`, and the
        /// answer found while writing them is the object's with the write's: what splicing
        /// the stored bytes gives, and what encoding the object gives.
        #[test]
        fn the_answer_of_a_write_is_its_object_with_its_version(
            object in stored_object(),
            escaped in prop::option::of(prop::sample::select(&["a\"b", "z\\", "m\u{1}"][..])),
            top in any::<bool>(),
            revision in 1i64..i64::MAX,
        ) {
            let mut object = object;
            // A key with escapes, at the top or in `metadata`: the splice does not judge it.
            if let Some(key) = escaped {
                let map = if top { object.as_object_mut().unwrap() } else { metadata_mut(&mut object) };
                map.insert(key.to_string(), Value::from(1));
            }
            let stored = encode_answerable(&object).unwrap();
            let mut without = object.clone();
            metadata_mut(&mut without).remove("resourceVersion");
            prop_assert_eq!(&stored.bytes, &Bytes::from(serde_json::to_vec(&without).unwrap()));
            prop_assert_eq!(stored.place.is_some(), escaped.is_none());
            let scanned = splice_resource_version(&stored.bytes, revision);
            let answer = stored.answer(revision);
            match (&answer, &scanned) {
                (Some(answer), _) => {
                    let mut with = without;
                    set_meta(&mut with, "resourceVersion", json!(revision.to_string()));
                    prop_assert_eq!(answer, &Bytes::from(serde_json::to_vec(&with).unwrap()));
                }
                (None, scanned) => prop_assert!(escaped.is_some() && scanned.is_none()),
            }
            // Where the scan finds the places, writing found the same: the answer and the
            // parts the watch cache keeps once.
            if let Some(scanned) = scanned {
                let written = stored.spliced(revision).unwrap();
                prop_assert_eq!(&written.json, &scanned.json);
                prop_assert_eq!(written.head, scanned.head);
                prop_assert_eq!(&written.managed_fields, &scanned.managed_fields);
                let kv = kv(stored.bytes.to_vec(), revision);
                let (cached, parts) = (encode_written(&stored, revision).unwrap(), encode_stored_parts(&kv).unwrap());
                prop_assert_eq!((cached.bytes, cached.head, cached.repeated, cached.shorter), (parts.bytes, parts.head, parts.repeated, parts.shorter));
            }
        }

        #[test]
        fn garbage_is_an_error_or_what_decoding_gives(
            bytes in prop::collection::vec(any::<u8>(), 0..64), text in "[{}\\[\\]\":,a-z0-9 ]{0,48}"
        ) {
            for value in [bytes.clone(), text.clone().into_bytes()] {
                crate::fuzzing::stored_object(&value);
            }
        }
    }
}
