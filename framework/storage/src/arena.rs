//! The buffers the watch cache packs its objects into.
//!
//! A cache holds one immutable byte string per stored object for as long as the object is
//! current. Allocated one by one, each string pays the allocator's header and rounding, and
//! the long-lived strings end up interleaved with every request's short-lived buffers, which
//! leaves holes the allocator cannot give back: measured with glibc, about 100 B per cached
//! object beyond its own bytes. An [`Arena`] instead appends the strings to large shared
//! buffers: a string is a [`Bytes`] view into one, and a buffer is freed when the last view
//! into it is dropped.
//!
//! The first buffer is small ([`FIRST_CHUNK`]), so that a cache of a few objects holds
//! little; every later one is [`CHUNK`], large enough that glibc always maps it on its own
//! (its dynamic mmap threshold never rises past 32 MiB on 64-bit targets), outside the heaps
//! where requests allocate. Buffers of 64 KiB inside the heaps left holes between them that
//! `malloc_trim` could not give back whole; mapped apart, the cache's memory is the pages its
//! strings were written to (an unwritten tail is never touched, so never resident). The
//! price is address space: 32 MiB reserved per cache past its first buffer, and with
//! transparent huge pages set to `always` up to 2 MiB of a tail made resident at once. Under
//! strict overcommit (`vm.overcommit_memory=2`; the kubelet sets `1` on its nodes) each such
//! buffer counts in full against the commit limit although it is not resident.
//!
//! What the arena cannot do is reuse the space of a string that is no longer current while
//! its neighbours are: updates leave dead strings behind in old buffers. The owner counts the
//! bytes it still holds ([`Arena::allocated`] against its own live total) and, past
//! [`Arena::needs_compaction`], copies what is current into a fresh arena.

use bytes::{Bytes, BytesMut};

/// The size of an arena's first shared buffer, allocated by malloc as usual.
pub(crate) const FIRST_CHUNK: usize = 64 * 1024;

/// The size of every later shared buffer: 32 MiB, at which glibc always maps an allocation
/// of its own (see the module documentation).
pub(crate) const CHUNK: usize = 32 << 20;

/// Strings at least this long get a buffer of their own: a large one would waste much of a
/// chunk's tail, and would keep a whole chunk alive by itself.
const OWN_BUFFER: usize = FIRST_CHUNK / 8;

/// Appends byte strings to shared buffers. See the module documentation.
#[derive(Debug, Default)]
pub struct Arena {
    /// The buffer being filled: what follows the strings handed out so far.
    current: BytesMut,
    /// Bytes of every string this arena handed out (with the small first buffer's tail: a
    /// bound on what it keeps resident).
    allocated: usize,
    /// Whether the first shared buffer was made (every later one is a [`CHUNK`]).
    chunked: bool,
}

impl Arena {
    /// A new arena; it allocates nothing until the first string.
    pub fn new() -> Self {
        Self::default()
    }

    /// Packs the concatenation of `parts` and returns it.
    pub fn pack(&mut self, parts: &[&[u8]]) -> Bytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len >= OWN_BUFFER {
            let mut own = BytesMut::with_capacity(len);
            parts.iter().for_each(|p| own.extend_from_slice(p));
            self.allocated += len;
            return own.freeze();
        }
        // After `split`, `capacity` is what is left after the strings handed out.
        if self.current.capacity() < len {
            // The first buffer's tail stays unused, and counted; a mapped one's is never
            // touched.
            self.allocated += self.current.capacity();
            let size = if self.chunked { CHUNK } else { FIRST_CHUNK };
            self.current = BytesMut::with_capacity(size);
            self.chunked = true;
        }
        self.allocated += len;
        parts.iter().for_each(|p| self.current.extend_from_slice(p));
        // The front of the buffer becomes the string; `current` keeps the rest of the same
        // allocation (no copy, no new buffer while it has room).
        self.current.split().freeze()
    }

    /// Bytes this arena handed out since it was made (with the first buffer's unused tail),
    /// which its buffers keep resident while any string in them lives.
    pub fn allocated(&self) -> usize {
        self.allocated
    }

    /// Whether an owner still holding `live` bytes of strings should copy them into a fresh
    /// arena: when more than half of that again (and at least a megabyte) is dead.
    pub fn needs_compaction(&self, live: usize) -> bool {
        self.allocated.saturating_sub(live) > live / 2 + (1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_share_a_buffer_until_it_is_full() {
        let mut arena = Arena::new();
        let a = arena.pack(&[b"hello", b" ", b"world"]);
        let b = arena.pack(&[b"second"]);
        assert_eq!(&a[..], b"hello world");
        assert_eq!(&b[..], b"second");
        // Adjacent in one buffer.
        assert_eq!(a.as_ptr() as usize + a.len(), b.as_ptr() as usize);
        assert_eq!(arena.allocated(), 17);

        // The small first buffer fills, then strings go to a large one.
        let filler = vec![b'x'; OWN_BUFFER - 1];
        let mut strings = Vec::new();
        while arena.allocated() + filler.len() <= FIRST_CHUNK {
            strings.push(arena.pack(&[&filler]));
        }
        let first = strings[0].as_ptr() as usize;
        assert!(
            (first..first + FIRST_CHUNK).contains(&(strings.last().unwrap().as_ptr() as usize))
        );
        let tail = FIRST_CHUNK - arena.allocated();
        let next = arena.pack(&[&filler]);
        assert!(!(first..first + FIRST_CHUNK).contains(&(next.as_ptr() as usize)));
        assert_eq!(
            arena.allocated(),
            FIRST_CHUNK + filler.len(),
            "the tail ({tail} B) counted"
        );
        // The large buffer takes many strings, end to end, and only counts what they hold.
        let after = arena.pack(&[&filler]);
        assert_eq!(next.as_ptr() as usize + next.len(), after.as_ptr() as usize);
        assert_eq!(arena.allocated(), FIRST_CHUNK + 2 * filler.len());
        assert!(strings.iter().all(|s| s[..] == filler[..]));
        assert_eq!(&a[..], b"hello world", "earlier strings are not moved");
    }

    #[test]
    fn large_strings_get_their_own_buffer() {
        let mut arena = Arena::new();
        let small = arena.pack(&[b"small"]);
        let large = vec![b'y'; OWN_BUFFER];
        let packed = arena.pack(&[&large[..10], &large[10..]]);
        assert_eq!(&packed[..], &large[..]);
        assert_eq!(arena.allocated(), small.len() + OWN_BUFFER);
        // The chunk goes on being filled after it.
        let next = arena.pack(&[b"next"]);
        assert_eq!(
            small.as_ptr() as usize + small.len(),
            next.as_ptr() as usize
        );
    }

    #[test]
    fn compaction_is_due_when_half_again_is_dead() {
        let mut arena = Arena::new();
        arena.allocated = 10 << 20;
        assert!(!arena.needs_compaction(10 << 20));
        assert!(
            !arena.needs_compaction(6 << 20),
            "4 MiB dead of 6 live: under 3 + 1"
        );
        assert!(
            arena.needs_compaction(5 << 20),
            "5 MiB dead of 5 live: over 2.5 + 1"
        );
        assert!(!Arena::new().needs_compaction(0));
    }
}
