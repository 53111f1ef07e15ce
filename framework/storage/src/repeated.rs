//! The parts of cached objects that many objects of one cache repeat byte for byte, kept once.
//!
//! The watch cache keeps every object as the bytes a client receives. Two parts of those bytes
//! are often the same for many objects, and the cache's owner says where they are
//! ([`Encoded`]): a beginning (for the registry's JSON, `{"apiVersion":…,"kind":…,"metadata":{`,
//! the same for every object of a resource) and one span after it (the registry's is
//! `metadata.managedFields`, the same for objects written by one manager, with one
//! operation, to the same fields within one second, as a bulk create or a controller's sweep
//! writes them), with a shorter part of it that more objects repeat (`managedFields` up to
//! the first entry's `time`: the same manager and fields in another second). The cache keeps
//! each distinct pair of a beginning and a repeated part once, in a [`Common`], and every
//! object only the rest of its bytes and a reference to the pair.
//!
//! A part is shared from its second sighting on: an object whose part is new keeps it among
//! its own bytes, so objects whose parts are all different pay for no reference and no entry.
//! [`Commons`] remembers the hashes of recent parts seen once (two bounded generations) and
//! holds the pairs in use weakly, dropping the unused ones as it grows.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use extension_apiserver_machinery::hash::{ServerKeys, seeded_hash};

/// The bytes of one object as a client receives them, made by the cache's
/// [`EncodeFn`](crate::cacher::EncodeFn), with the parts that other objects of the cache may
/// repeat. The parts only decide what the cache keeps once: every reader of the object gets
/// `bytes`, whole, whatever they say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    /// The object's bytes.
    pub bytes: Bytes,
    /// `bytes[..head]` is a beginning many objects have in common (0: none).
    pub head: usize,
    /// A span of `bytes` after `head` that many objects may repeat.
    pub repeated: Option<Range<usize>>,
    /// An end of `repeated` before its own: `repeated.start..shorter` is a part of it that
    /// more objects repeat (the registry's: `managedFields` up to the first entry's `time`,
    /// the same for objects one manager wrote in different seconds), kept once when the
    /// whole span is not.
    pub shorter: Option<usize>,
}

impl Encoded {
    /// `bytes` without parts worth sharing.
    pub fn whole(bytes: Bytes) -> Self {
        Self {
            bytes,
            head: 0,
            repeated: None,
            shorter: None,
        }
    }

    /// The beginning, and the repeated span and its shorter part, each empty when there is
    /// none, or when they do not fit `bytes` as [`Encoded`] says they must (then they are
    /// not shared).
    fn parts(&self) -> (Range<usize>, [Range<usize>; 2]) {
        let len = self.bytes.len();
        let head = if self.head <= len { self.head } else { 0 };
        let repeated = match &self.repeated {
            Some(span) if head <= span.start && span.start < span.end && span.end <= len => {
                span.clone()
            }
            _ => head..head,
        };
        let shorter = match self.shorter {
            Some(end) if repeated.start < end && end < repeated.end => repeated.start..end,
            _ => head..head,
        };
        (0..head, [repeated, shorter])
    }
}

impl From<Bytes> for Encoded {
    fn from(bytes: Bytes) -> Self {
        Self::whole(bytes)
    }
}

/// One distinct pair of parts that objects share: an object's bytes are `head`, its own bytes
/// up to a point, `repeated`, and the rest of its own.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Common {
    pub(crate) head: Box<[u8]>,
    pub(crate) repeated: Box<[u8]>,
}

/// An object's bytes split for the cache: the shared pair, if any, and its own bytes, `own.0`
/// followed by `own.1`, with the repeated part going between the two.
pub(crate) struct Split<'a> {
    pub(crate) common: Option<Arc<Common>>,
    pub(crate) own: (&'a [u8], &'a [u8]),
}

impl<'a> Split<'a> {
    /// `bytes` kept whole, sharing nothing.
    pub(crate) fn whole(bytes: &'a [u8]) -> Self {
        Self {
            common: None,
            own: (bytes, &[]),
        }
    }

    /// `bytes` sharing `common`: its own bytes are those from `start` (after the shared
    /// beginning, if any) without `repeated`, the span the shared repeated part stands for.
    fn around(
        bytes: &'a [u8],
        start: usize,
        repeated: Option<Range<usize>>,
        common: Arc<Common>,
    ) -> Self {
        let own = match repeated {
            Some(span) => (&bytes[start..span.start], &bytes[span.end..]),
            None => (&bytes[start..], &[][..]),
        };
        Self {
            common: Some(common),
            own,
        }
    }
}

/// How many hashes of parts seen once each generation of [`Commons::seen`] holds.
const SEEN: usize = 4096;

/// The pairs of one cache. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Commons {
    /// The pairs made, by the hash of their two parts; dead ones until the next sweep.
    pairs: HashMap<u64, Vec<Weak<Common>>, Rehash>,
    /// How many entries `pairs` holds, and held after the last sweep.
    entries: usize,
    swept: usize,
    /// Hashes of parts seen, this generation and the one before.
    seen: HashSet<u64, Rehash>,
    older: HashSet<u64, Rehash>,
}

/// The keys of [`Commons`]' maps are hashes already.
type Rehash = ServerKeys;

impl Commons {
    /// Splits `encoded` into the pair of parts it shares with objects before it (made now if
    /// its beginning, or its repeated span or the span's shorter part, was seen before) and
    /// its own bytes.
    pub(crate) fn split<'a>(&mut self, encoded: &'a Encoded) -> Split<'a> {
        let bytes = &encoded.bytes[..];
        let (head, spans) = encoded.parts();
        let head_part = &bytes[head.clone()];
        let head_hash = hash(head_part);
        let spans = spans.map(|span| {
            let hash = hash(&bytes[span.clone()]);
            (!span.is_empty()).then_some((span, hash))
        });
        if head.is_empty() && spans.iter().all(Option::is_none) {
            return Split::whole(bytes);
        }
        // Each part recorded as seen; the longer span shared before its shorter part, each
        // by a pair made for objects before or, when seen before, a pair made now.
        let share_head = !head.is_empty() && self.seen_before(head_hash);
        let seen = spans.each_ref().map(|span| {
            span.as_ref()
                .is_some_and(|(_, hash)| self.seen_before(*hash))
        });
        let (h, hh) = match share_head {
            true => (head_part, head_hash),
            false => (&[][..], EMPTY),
        };
        let start = if share_head { head.end } else { 0 };
        for (span, seen) in spans.into_iter().zip(seen) {
            let Some((span, hash)) = span else {
                continue;
            };
            let part = &bytes[span.clone()];
            if let Some(common) = self.find(head_hash, hash, head_part, part) {
                return Split::around(bytes, head.end, Some(span), common);
            }
            if seen {
                let common = self.find_or_make(hh, hash, h, part);
                return Split::around(bytes, start, Some(span), common);
            }
        }
        if !share_head {
            return Split::whole(bytes);
        }
        let common = self.find_or_make(hh, EMPTY, h, &[]);
        Split::around(bytes, start, None, common)
    }

    /// Whether a part with this hash was seen before (recording it if not).
    fn seen_before(&mut self, hash: u64) -> bool {
        if self.seen.contains(&hash) || self.older.contains(&hash) {
            return true;
        }
        if self.seen.len() >= SEEN {
            self.older = std::mem::take(&mut self.seen);
        }
        self.seen.insert(hash);
        false
    }

    fn find(&self, head: u64, repeated: u64, h: &[u8], r: &[u8]) -> Option<Arc<Common>> {
        self.pairs
            .get(&pair_hash(head, repeated))?
            .iter()
            .filter_map(Weak::upgrade)
            .find(|common| *common.head == *h && *common.repeated == *r)
    }

    fn find_or_make(&mut self, head: u64, repeated: u64, h: &[u8], r: &[u8]) -> Arc<Common> {
        if let Some(common) = self.find(head, repeated, h, r) {
            return common;
        }
        let common = Arc::new(Common {
            head: h.into(),
            repeated: r.into(),
        });
        if self.entries > 2 * self.swept + 64 {
            self.sweep();
        }
        self.pairs
            .entry(pair_hash(head, repeated))
            .or_default()
            .push(Arc::downgrade(&common));
        self.entries += 1;
        common
    }

    /// Drops the entries of pairs no object holds any more.
    fn sweep(&mut self) {
        self.pairs.retain(|_, pairs| {
            pairs.retain(|pair| pair.strong_count() > 0);
            !pairs.is_empty()
        });
        self.entries = self.pairs.values().map(Vec::len).sum();
        self.swept = self.entries;
    }

    /// How many pairs are in use (for tests).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.pairs
            .values()
            .flatten()
            .filter(|pair| pair.strong_count() > 0)
            .count()
    }
}

/// The hash of an empty part.
const EMPTY: u64 = 0;

/// The hash of a part (a collision only costs a comparison of the bytes).
fn hash(part: &[u8]) -> u64 {
    if part.is_empty() {
        return EMPTY;
    }
    seeded_hash(part)
}

fn pair_hash(head: u64, repeated: u64) -> u64 {
    head.rotate_left(17) ^ repeated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(head: &str, middle: &str, repeated: &str, tail: &str) -> Encoded {
        let bytes = Bytes::from(format!("{head}{middle}{repeated}{tail}"));
        let start = head.len() + middle.len();
        Encoded {
            bytes,
            head: head.len(),
            repeated: (!repeated.is_empty()).then(|| start..start + repeated.len()),
            shorter: None,
        }
    }

    fn parts(split: &Split<'_>) -> (String, String, String, String) {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let (head, repeated) = match &split.common {
            Some(common) => (text(&common.head), text(&common.repeated)),
            None => Default::default(),
        };
        (head, text(split.own.0), repeated, text(split.own.1))
    }

    #[test]
    fn parts_are_shared_from_their_second_sighting() {
        let mut commons = Commons::default();
        let first = encoded("{h:", "a", "[mf1]", "}");
        let split = commons.split(&first);
        assert!(split.common.is_none(), "nothing seen before");
        assert_eq!(split.own, (&b"{h:a[mf1]}"[..], &b""[..]));

        // The head again, a new repeated part: the head is shared.
        let second = encoded("{h:", "b", "[mf2]", "}");
        let split = commons.split(&second);
        assert_eq!(
            parts(&split),
            ("{h:".into(), "b[mf2]}".into(), "".into(), "".into())
        );

        // Both seen: a pair of both, shared from then on.
        let third = encoded("{h:", "c", "[mf2]", ",x}");
        let split = commons.split(&third);
        assert_eq!(
            parts(&split),
            ("{h:".into(), "c".into(), "[mf2]".into(), ",x}".into())
        );
        let fourth = encoded("{h:", "d", "[mf2]", "}");
        let fourth = commons.split(&fourth);
        assert!(Arc::ptr_eq(
            split.common.as_ref().unwrap(),
            fourth.common.as_ref().unwrap()
        ));
        // The head-only pair is still in use by `second`'s split, not by `third`'s.
        assert_eq!(commons.in_use(), 2);
        drop((split, fourth));
        let fifth = encoded("{h:", "e", "[mf1]", "}");
        let fifth = commons.split(&fifth);
        assert_eq!(parts(&fifth).2, "[mf1]", "seen once, at the first object");
    }

    #[test]
    fn a_repeated_part_without_a_head_and_parts_that_do_not_fit() {
        let mut commons = Commons::default();
        commons.split(&encoded("", "a", "[mf]", "}"));
        let second = encoded("", "b", "[mf]", "}");
        let split = commons.split(&second);
        assert_eq!(
            parts(&split),
            ("".into(), "b".into(), "[mf]".into(), "}".into())
        );

        // Spans outside the bytes, or before the head, are not shared; the rest may be.
        for (head, repeated) in [
            (99, None),
            (3, Some(1..4)),
            (0, Some(2..99)),
            (0, Some(3..3)),
        ] {
            let bytes = Bytes::from_static(b"{h:a[mf]}");
            let odd = Encoded {
                bytes: bytes.clone(),
                head,
                repeated,
                shorter: None,
            };
            for _ in 0..2 {
                let split = commons.split(&odd);
                if head == 99 {
                    assert!(split.common.is_none(), "a head past the end is none");
                }
                let mut whole = Vec::new();
                let common = split.common.as_ref();
                whole.extend_from_slice(common.map_or(&[][..], |c| &c.head));
                whole.extend_from_slice(split.own.0);
                whole.extend_from_slice(common.map_or(&[][..], |c| &c.repeated));
                whole.extend_from_slice(split.own.1);
                assert_eq!(whole, bytes);
            }
        }
    }

    /// A span whose end differs from object to object (a time) is shared up to there; the
    /// whole span again once it repeats.
    #[test]
    fn the_shorter_part_is_shared_when_the_whole_span_is_not() {
        let with = |own: &str, time: &str| {
            let bytes = Bytes::from(format!("{{h:{own}[m,t:{time}]}}"));
            let start = 3 + own.len();
            Encoded {
                head: 3,
                repeated: Some(start..bytes.len() - 1),
                shorter: Some(start + "[m,t:".len()),
                bytes,
            }
        };
        let mut commons = Commons::default();
        let shares = |commons: &mut Commons, own: &str, time: &str| {
            let encoded = with(own, time);
            let split = commons.split(&encoded);
            let parts = parts(&split);
            let whole = format!("{}{}{}{}", parts.0, parts.1, parts.2, parts.3);
            assert_eq!(whole.as_bytes(), &encoded.bytes[..]);
            (parts.1, parts.2, parts.3)
        };
        assert_eq!(shares(&mut commons, "a", "1").1, "", "nothing seen");
        let second = shares(&mut commons, "b", "2");
        assert_eq!(second, ("b".into(), "[m,t:".into(), "2]}".into()));
        let third = shares(&mut commons, "c", "2");
        assert_eq!(third, ("c".into(), "[m,t:2]".into(), "}".into()));
        let fourth = shares(&mut commons, "d", "2");
        assert_eq!(fourth.1, "[m,t:2]", "the whole span's pair, made before");
        let fifth = shares(&mut commons, "e", "3");
        assert_eq!(fifth, ("e".into(), "[m,t:".into(), "3]}".into()));
        // A span that is not valid leaves its shorter part unused.
        let mut odd = with("f", "4");
        odd.shorter = Some(odd.bytes.len());
        assert_eq!(parts(&commons.split(&odd)).2, "");
    }

    #[test]
    fn unused_pairs_are_swept_and_the_seen_set_is_bounded() {
        let mut commons = Commons::default();
        for i in 0..3 * SEEN {
            let mf = format!("[mf{i}]");
            let (a, b) = (encoded("{h:", "a", &mf, "}"), encoded("{h:", "b", &mf, "}"));
            let first = commons.split(&a).common;
            let second = commons.split(&b);
            assert_eq!(parts(&second).2, mf);
            drop((first, second));
        }
        assert!(commons.entries <= 2 * commons.swept + 65, "{commons:?}");
        assert!(commons.entries < 200, "{} entries", commons.entries);
        assert!(commons.seen.len() <= SEEN && commons.older.len() <= SEEN);
        assert_eq!(commons.in_use(), 0);
    }
}
