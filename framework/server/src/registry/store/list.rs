//! List: one page at one revision, selectors applied, `continue` tokens as kube-apiserver
//! writes them (so a client cannot tell the difference).

use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::filter::Filter;
use super::{Inner, codec};
use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{ListOptions, ResourceVersionMatch};
use crate::registry::rest::{CachedJson, Object, ObjectList};
use crate::storage::cacher::CachedObject;
use crate::storage::{Cacher, ListRequest, Revision, StorageError};

/// How many keys one backend read fetches when selectors may drop most of them.
const SELECTOR_PAGE: usize = 500;

/// How long a list waits for a `resourceVersion` not yet reached before a 504.
const FUTURE_REVISION_WAIT: Duration = Duration::from_secs(3);

/// The revision of kube-apiserver's "inconsistent continue" token, which a 410 for an expired
/// `continue` carries: go on from the same key at the latest revision.
const LATEST: Revision = -1;

/// The decoded `continue` parameter: the revision of the first page and where to go on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    /// Always `meta.k8s.io/v1`.
    pub v: String,
    /// The revision every page is read at.
    pub rv: Revision,
    /// The key (relative to the list prefix) to start at, inclusive.
    pub start: String,
}

impl ContinueToken {
    /// The token of a page read at `rv` whose last key, relative to the list prefix, is
    /// `last`: the next page starts just after it.
    pub fn after(rv: Revision, last: &str) -> Self {
        Self {
            v: "meta.k8s.io/v1".into(),
            rv,
            start: format!("{last}\u{0}"),
        }
    }

    /// Encodes as kube does: unpadded URL-safe base64 of the JSON.
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Decodes, or a 400 that says the token is malformed.
    pub fn decode(token: &str) -> Result<Self> {
        let bad = |_| {
            Error::bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
            )
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|e| bad(e.to_string()))?;
        let token: ContinueToken =
            serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if token.v != "meta.k8s.io/v1"
            || (token.rv <= 0 && token.rv != LATEST)
            || token.start.contains("..")
        {
            return Err(bad(String::new()));
        }
        Ok(token)
    }
}

pub(crate) async fn list(
    inner: &Inner,
    ctx: &RequestContext,
    options: &ListOptions,
) -> Result<ObjectList> {
    let filter = Filter::new(&inner.info, options)?;
    let prefix = inner.list_prefix(ctx);
    if let Some(list) = from_cache(inner, options, &filter, &prefix).await? {
        return Ok(list);
    }
    let (revision, mut start_after) = start_point(inner, options, &prefix).await?;
    let limit = options.limit;
    let mut out = ObjectList::default();
    let mut revision = revision;
    loop {
        let page_size = if limit == 0 {
            0
        } else if filter.is_everything() {
            limit - out.items.len()
        } else {
            SELECTOR_PAGE.max(limit)
        };
        let request = ListRequest {
            prefix: prefix.clone(),
            start_after: start_after.clone(),
            revision,
            limit: page_size,
            // A count only answers `remainingItemCount`, which a list with selectors has not.
            skip_count: !filter.is_everything(),
        };
        let page = inner
            .backend
            .list(&request)
            .await
            .map_err(|e| page_error(inner, e, options))?;
        revision = page.revision;
        let count = page.items.len();
        for (i, kv) in page.items.iter().enumerate() {
            start_after = Some(kv.key.clone());
            if filter.is_everything() {
                out.items.push(Object::Encoded(inner.encode(kv)?));
            } else {
                let stored = inner.versions.in_storage_version(kv)?;
                match filter
                    .selects_json(&stored.value, || format!("stored object {}", kv.key))
                    .transpose()?
                {
                    Some(false) => continue,
                    Some(true) => out
                        .items
                        .push(Object::Encoded(codec::encode_stored(&stored)?)),
                    None => {
                        let object = codec::decode_stored(&stored)?;
                        if !filter.matches(&object) {
                            continue;
                        }
                        out.items.push(object.into());
                    }
                }
            }
            if limit > 0 && out.items.len() == limit {
                let left_in_page = count - i - 1;
                if left_in_page > 0 || page.more {
                    let token = ContinueToken::after(revision, &kv.key[prefix.len()..]);
                    out.continue_token = Some(token.encode());
                    if filter.is_everything() {
                        out.remaining_item_count = page.remaining.map(|r| r + left_in_page as i64);
                    }
                }
                out.resource_version = revision.to_string();
                return Ok(out);
            }
        }
        if !page.more {
            break;
        }
    }
    out.resource_version = revision.to_string();
    Ok(out)
}

/// A page from the watch cache, when the list allows it. A first page: any
/// `resourceVersion` but an exact one. A later page (`continue`): when the cache is current
/// and nothing under the list's prefix changed since the first page's revision, so that the
/// cache's objects are the state at that revision; otherwise the backend reads the page at
/// that revision.
/// `None` when the cache cannot serve it.
async fn from_cache(
    inner: &Inner,
    options: &ListOptions,
    filter: &Filter,
    prefix: &str,
) -> Result<Option<ObjectList>> {
    let Some(cache) = &inner.cache else {
        return Ok(None);
    };
    if let Some(token) = &options.continue_token {
        // The cache must first have seen every write the store has: a change after the
        // token's revision that it has not applied yet would make it look unchanged, and
        // serve a page the store, compacted since, answers with 410.
        if !consistent_revision(inner, cache).await? {
            return Ok(None);
        }
        return continue_from_cache(cache, options, filter, prefix, token);
    }
    let rv = options
        .resource_version
        .as_deref()
        .filter(|s| !s.is_empty());
    let servable = match (rv, options.resource_version_match) {
        (_, ResourceVersionMatch::Exact) => false,
        (None, ResourceVersionMatch::Unset) => consistent_revision(inner, cache).await?,
        (None, _) => false,
        (Some("0"), _) => cache.is_ready(),
        (Some(rv), _) => {
            let rv = parse_resource_version(rv)?;
            wait_for_revision(inner, rv).await?;
            cache_reaches(inner, cache, rv).await
        }
    };
    if !servable {
        return Ok(None);
    }
    let relative = cache.relative(prefix);
    cache
        .visit(prefix, |objects, revision| {
            page(objects, revision, options.limit, filter, relative)
        })
        .transpose()
}

/// A later page from the cache, when it has the state of the token's revision under
/// `prefix` (see [`Cacher::unchanged_since`]).
fn continue_from_cache(
    cache: &Cacher,
    options: &ListOptions,
    filter: &Filter,
    prefix: &str,
    token: &str,
) -> Result<Option<ObjectList>> {
    // A resourceVersion beside `continue` or a malformed token: the backend path's errors.
    let rv = options.resource_version.as_deref().unwrap_or_default();
    if !(rv.is_empty() || rv == "0") {
        return Ok(None);
    }
    let Ok(token) = ContinueToken::decode(token) else {
        return Ok(None);
    };
    if token.rv == LATEST {
        return Ok(None);
    }
    let start_after = format!("{prefix}{}", token.start.trim_end_matches('\u{0}'));
    let relative = cache.relative(prefix);
    cache
        .visit_unchanged_since(prefix, &start_after, token.rv, |objects| {
            page(objects, token.rv, options.limit, filter, relative)
        })
        .transpose()
}

/// The room a page reserves before it knows how many objects it holds.
const PAGE_RESERVE: usize = 1024;

/// One page of cached `objects` (in key order, from where the page starts) at `revision`;
/// `prefix` is the list's, relative to the cache's ([`Cacher::relative`]). Takes from
/// `objects` only what the page needs (and, for `remainingItemCount`, the number of the rest,
/// which the cache's counted range, a [`CachedRange`](crate::storage::cacher::CachedRange),
/// knows without reading them).
fn page<'a>(
    objects: &mut impl ExactSizeIterator<Item = &'a CachedObject>,
    revision: Revision,
    limit: usize,
    filter: &Filter,
    prefix: &str,
) -> Result<ObjectList> {
    let mut out = ObjectList {
        resource_version: revision.to_string(),
        // `limit` is the client's "no more than": it sizes nothing (kube answers a limit of
        // 10^12 with the objects there are).
        items: Vec::with_capacity(if limit > 0 {
            limit.min(PAGE_RESERVE)
        } else {
            PAGE_RESERVE
        }),
        ..ObjectList::default()
    };
    while let Some(object) = objects.next() {
        if !filter.selects(object)? {
            continue;
        }
        out.items
            .push(Object::Cached(CachedJson::new(object.clone())));
        if limit > 0 && out.items.len() == limit {
            // Like kube-apiserver: a continue token when any key is left, whether or not the
            // selectors would keep it; a count of what is left only without selectors.
            let left = if filter.is_everything() {
                objects.len()
            } else {
                usize::from(objects.next().is_some())
            };
            if left > 0 {
                let token = ContinueToken::after(revision, &object.key_suffix()[prefix.len()..]);
                out.continue_token = Some(token.encode());
                if filter.is_everything() {
                    out.remaining_item_count = Some(left as i64);
                }
            }
            break;
        }
    }
    Ok(out)
}

/// How long a read waits for the watch cache to catch up with a revision the store has
/// reached before it reads the store instead.
const CACHE_CATCH_UP: Duration = Duration::from_secs(1);

/// Whether the cache is (or within [`CACHE_CATCH_UP`] gets) current at `revision`.
pub(crate) async fn cache_reaches(inner: &Inner, cache: &Cacher, revision: Revision) -> bool {
    match cache.revision() {
        None => false,
        Some(at) if at >= revision => true,
        Some(_) => {
            inner.backend.request_progress().await;
            cache.wait_for(revision, CACHE_CATCH_UP).await
        }
    }
}

/// How long a consistent get waits for the watch cache to catch up with the backend's
/// revision (after asking the backend for progress) before it reads the backend instead.
const GET_CATCH_UP: Duration = Duration::from_millis(100);

/// A consistent get from the watch cache: the object at `key` once the cache is current at
/// the backend's current revision (`Some(None)`: there is none); `None` when the cache
/// cannot answer (not ready, or behind and not catching up soon).
pub(crate) async fn get_from_cache(
    inner: &Inner,
    cache: &Cacher,
    key: &str,
) -> Option<Option<CachedObject>> {
    if !cache.is_ready() {
        return None;
    }
    let local = inner.backend.local_revision();
    let current = match local {
        Some(current) => current,
        // A remote backend's revision reads are shared by concurrent callers.
        None => inner.backend.current_revision().await.ok()?,
    };
    if let Some(found) = cache.get_at_least(key, current) {
        return Some(found);
    }
    // An embedded backend's cache is a moment behind its writes: the backend answers at once.
    if local.is_some() {
        return None;
    }
    inner.backend.request_progress().await;
    if !cache.wait_for(current, GET_CATCH_UP).await {
        return None;
    }
    cache.get_at_least(key, current)
}

/// For a consistent read: whether the cache is current at the store's current revision.
pub(crate) async fn consistent_revision(inner: &Inner, cache: &Cacher) -> Result<bool> {
    if !cache.is_ready() {
        return Ok(false);
    }
    let current = match inner.backend.local_revision() {
        Some(current) => current,
        None => inner
            .backend
            .current_revision()
            .await
            .map_err(|e| list_error(inner, e))?,
    };
    Ok(cache_reaches(inner, cache, current).await)
}

/// The revision to read at and the key to start after, from `continue` or `resourceVersion`.
async fn start_point(
    inner: &Inner,
    options: &ListOptions,
    prefix: &str,
) -> Result<(Revision, Option<String>)> {
    let rv = options
        .resource_version
        .as_deref()
        .filter(|s| !s.is_empty());
    if let Some(token) = &options.continue_token {
        if rv.is_some_and(|rv| rv != "0") {
            return Err(Error::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let token = ContinueToken::decode(token)?;
        let start = token.start.trim_end_matches('\u{0}');
        let revision = if token.rv == LATEST { 0 } else { token.rv };
        return Ok((revision, Some(format!("{prefix}{start}"))));
    }
    match (rv, options.resource_version_match) {
        (None, ResourceVersionMatch::Unset) => Ok((0, None)),
        (None, _) => Err(Error::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )),
        (Some("0"), ResourceVersionMatch::Exact) => Err(Error::bad_request(
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        )),
        (Some(rv), matching) => {
            let rv = parse_resource_version(rv)?;
            if matching == ResourceVersionMatch::Exact {
                return Ok((rv, None));
            }
            wait_for_revision(inner, rv).await?;
            Ok((0, None))
        }
    }
}

/// Parses a client's resourceVersion.
pub(crate) fn parse_resource_version(rv: &str) -> Result<Revision> {
    rv.parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| Error::bad_request(format!("invalid resource version: {rv:?}")))
}

/// "Not older than": the store must have reached `rv`; wait a little if it has not.
async fn wait_for_revision(inner: &Inner, rv: Revision) -> Result<()> {
    let deadline = tokio::time::Instant::now() + FUTURE_REVISION_WAIT;
    loop {
        let current = inner
            .backend
            .current_revision()
            .await
            .map_err(|e| list_error(inner, e))?;
        if current >= rv {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let mut e = Error::timeout(format!(
                "Too large resource version: {rv}, current: {current}"
            ));
            e = e.with_retry_after(1);
            return Err(e);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A backend page's error. A `continue` whose revision is compacted gets kube-apiserver's
/// 410 with an "inconsistent continue" token: the same key, at the latest revision.
fn page_error(inner: &Inner, e: StorageError, options: &ListOptions) -> Error {
    let token = options
        .continue_token
        .as_deref()
        .and_then(|t| ContinueToken::decode(t).ok());
    match (e, token) {
        (StorageError::Compacted { .. }, Some(token)) => {
            let latest = ContinueToken {
                rv: LATEST,
                ..token
            };
            Error::expired(INCONSISTENT_CONTINUE).with_continue(latest.encode())
        }
        (e, _) => list_error(inner, e),
    }
}

const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

fn list_error(inner: &Inner, e: StorageError) -> Error {
    match e {
        // A list at a compacted resourceVersion (no continue): etcd3's `interpretListError`.
        StorageError::Compacted { .. } => {
            Error::expired("The resourceVersion for the provided list is too old.")
        }
        other => inner.storage_error("", other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's limit is a bound, never a size: a page of 10^12 (or i64::MAX) objects
    /// reserves no more than a page's room and holds the objects there are.
    #[test]
    fn a_huge_limit_reserves_nothing() {
        let filter = Filter::new(&crate::test_kinds::TEST_INFO, &ListOptions::default()).unwrap();
        for limit in [1_000_000_000_000usize, i64::MAX as usize, usize::MAX] {
            let page = page(&mut std::iter::empty(), 7, limit, &filter, "").unwrap();
            assert!(page.items.is_empty() && page.items.capacity() <= PAGE_RESERVE);
            assert_eq!(page.resource_version, "7");
        }
    }

    #[test]
    fn continue_token_round_trips_like_kube() {
        let token = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: 42,
            start: "default/b\u{0}".into(),
        };
        let encoded = token.encode();
        assert!(!encoded.contains('='));
        assert_eq!(ContinueToken::decode(&encoded).unwrap(), token);
        assert_eq!(
            ContinueToken::decode("not-base64!").unwrap_err().code(),
            400
        );
    }

    #[test]
    fn latest_revision_token_decodes_and_zero_does_not() {
        let token = |rv| ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv,
            start: "default/b\u{0}".into(),
        };
        assert_eq!(
            ContinueToken::decode(&token(LATEST).encode()).unwrap().rv,
            LATEST
        );
        assert_eq!(
            ContinueToken::decode(&token(0).encode())
                .unwrap_err()
                .code(),
            400
        );
        assert_eq!(
            ContinueToken::decode(&token(-2).encode())
                .unwrap_err()
                .code(),
            400
        );
    }
}
