//! The hashers of the server's own tables, chosen by who picks the keys.
//!
//! `std`'s `HashMap` hashes with SipHash, keyed at random per map, so that a client who
//! picks the keys cannot make them collide. Where no client picks the keys, or the keys are
//! hashes already, SipHash guards nothing and costs a create about 3.5% of its instructions
//! (the book's "Names hashed with foldhash"); these tables use foldhash instead.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::OnceLock;

/// The hasher of a table whose keys only the server inserts (the names a schema or the
/// installed resources declare), or whose keys are hashes already: foldhash's fast hasher.
/// A request's keys are only looked up in such a table, so no client can fill it with keys
/// that collide.
pub type ServerKeys = foldhash::fast::RandomState;

/// A map keyed by names the server declares, hashed with [`ServerKeys`].
pub type ByName<V> = HashMap<String, V, ServerKeys>;

/// The hash of `value`, which a client may choose (the parts of a stored object, a
/// request's labels), for a table keyed by it: foldhash's quality hasher, seeded at random
/// once per process, so that a client cannot choose values whose hashes collide. A table
/// keyed by it must still compare the values themselves, so that a collision costs only that
/// comparison.
pub fn seeded_hash<T: Hash + ?Sized>(value: &T) -> u64 {
    static SEEDED: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
    SEEDED.get_or_init(Default::default).hash_one(value)
}

#[cfg(test)]
mod tests {
    use super::seeded_hash;

    #[test]
    fn one_seed_per_process() {
        assert_eq!(
            seeded_hash(b"part".as_slice()),
            seeded_hash(b"part".as_slice())
        );
        assert_ne!(
            seeded_hash(b"part".as_slice()),
            seeded_hash(b"other".as_slice())
        );
    }
}
