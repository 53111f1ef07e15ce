//! The watch cache's ordered set: its objects in key order, counted, so that the rank of a key
//! costs O(log n) and a range knows its length without walking it.
//!
//! A sorted sequence cut into blocks of at most [`BLOCK`] items, with a Fenwick tree of the
//! blocks' lengths. The cache holds one item per stored object (a 32 B handle), so what the
//! blocks leave empty is paid per object. Keys mostly arrive in order (a list of the backend
//! at start, then creates with names that sort after the last, a few of them out of order as
//! creates in flight side by side reach the cache), so a full block where a new item goes is
//! not halved when it need not be: it first passes one item to a neighbour with room, and an
//! item in its last quarter (after all of its items, with keys in order) starts a new block
//! with the items after it, which the next keys fill. Blocks filled so stay full. (The
//! `indexset` tree used before halved every full node, and with keys in order each half was
//! never filled again: 64 B per handle of 32.) Elsewhere a full block is halved, as in any
//! B-tree.

use std::borrow::Borrow;
use std::ops::Range;

/// The most items a block holds: inserting in the middle of a block moves up to this many.
const BLOCK: usize = 512;

/// Items in order, each at most once. See the module documentation.
#[derive(Debug)]
pub(crate) struct OrderedSet<T> {
    /// Never an empty block.
    blocks: Vec<Vec<T>>,
    /// The blocks' lengths.
    counts: Fenwick,
    len: usize,
}

impl<T> Default for OrderedSet<T> {
    fn default() -> Self {
        Self {
            blocks: Vec::new(),
            counts: Fenwick::default(),
            len: 0,
        }
    }
}

impl<T: Ord> OrderedSet<T> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The block where `key` is or would go: the last whose first item is not after it (the
    /// first block when none).
    fn block_of<Q>(&self, key: &Q) -> usize
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.blocks
            .partition_point(|block| block[0].borrow() <= key)
            .saturating_sub(1)
    }

    /// The block of `key` and where in it `key` is (`Ok`) or would go (`Err`); `None` when
    /// the set is empty.
    fn find<Q>(&self, key: &Q) -> Option<(usize, Result<usize, usize>)>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        if self.blocks.is_empty() {
            return None;
        }
        let b = self.block_of(key);
        Some((
            b,
            self.blocks[b].binary_search_by(|item| item.borrow().cmp(key)),
        ))
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&T>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.find(key)? {
            (b, Ok(i)) => Some(&self.blocks[b][i]),
            _ => None,
        }
    }

    pub(crate) fn contains<Q>(&self, key: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.get(key).is_some()
    }

    /// How many items sort before `key`.
    pub(crate) fn rank<Q>(&self, key: &Q) -> usize
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.find(key) {
            None => 0,
            Some((b, Ok(i) | Err(i))) => self.counts.prefix(b) + i,
        }
    }

    /// Puts `item` in the set, and returns the equal item it replaces.
    pub(crate) fn replace(&mut self, item: T) -> Option<T> {
        let Some((b, at)) = self.find(&item) else {
            self.blocks.push(vec![item]);
            self.counts = Fenwick::of(&self.blocks);
            self.len = 1;
            return None;
        };
        let i = match at {
            Ok(i) => return Some(std::mem::replace(&mut self.blocks[b][i], item)),
            Err(i) => i,
        };
        self.len += 1;
        if self.blocks[b].len() < BLOCK {
            self.blocks[b].insert(i, item);
            self.counts.add(b, 1);
            return None;
        }
        let next_has_room = self
            .blocks
            .get(b + 1)
            .is_some_and(|next| next.len() < BLOCK);
        if i == BLOCK && next_has_room {
            self.blocks[b + 1].insert(0, item);
            self.counts.add(b + 1, 1);
            return None;
        }
        if i == 0 {
            self.blocks.insert(b, vec![item]);
        } else if b > 0 && self.blocks[b - 1].len() < BLOCK {
            // A neighbour with room takes one item, so that keys that arrive nearly in order
            // (creates in flight side by side) fill the blocks they go into.
            let first = self.blocks[b].remove(0);
            self.blocks[b - 1].push(first);
            self.blocks[b].insert(i - 1, item);
            self.counts.add(b - 1, 1);
            return None;
        } else if next_has_room {
            let last = self.blocks[b].pop().expect("a full block");
            self.blocks[b].insert(i, item);
            self.blocks[b + 1].insert(0, last);
            self.counts.add(b + 1, 1);
            return None;
        } else {
            // Near the end (after every item, with keys in order), the items after the new
            // one start a block that the next keys fill, and this one stays (nearly) full;
            // elsewhere the block is halved, as in any B-tree.
            let at = if i >= 3 * BLOCK / 4 { i } else { BLOCK / 2 };
            let block = &mut self.blocks[b];
            let mut right = block.split_off(at);
            if i < at {
                block.insert(i, item);
            } else {
                right.insert(i - at, item);
            }
            self.blocks.insert(b + 1, right);
        }
        self.counts = Fenwick::of(&self.blocks);
        None
    }

    /// Takes the item equal to `key` out of the set.
    pub(crate) fn take<Q>(&mut self, key: &Q) -> Option<T>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (b, Ok(i)) = self.find(key)? else {
            return None;
        };
        let item = self.blocks[b].remove(i);
        self.len -= 1;
        if self.blocks[b].is_empty() {
            self.blocks.remove(b);
            self.counts = Fenwick::of(&self.blocks);
        } else if self.blocks[b].len() < BLOCK / 4 && self.merge_around(b) {
            self.counts = Fenwick::of(&self.blocks);
        } else {
            self.counts.sub(b, 1);
        }
        Some(item)
    }

    /// Merges block `b`, short after removals, into a neighbour where the two fit in three
    /// quarters of a block (so that a merged block is not split again by the next few inserts),
    /// and returns whether it did: removals in one part of the keys (a namespace deleted) do
    /// not leave a run of nearly empty blocks behind.
    fn merge_around(&mut self, b: usize) -> bool {
        let fits = |other: &Vec<T>| self.blocks[b].len() + other.len() <= 3 * BLOCK / 4;
        let left = if b + 1 < self.blocks.len() && fits(&self.blocks[b + 1]) {
            b
        } else if b > 0 && fits(&self.blocks[b - 1]) {
            b - 1
        } else {
            return false;
        };
        let mut right = self.blocks.remove(left + 1);
        self.blocks[left].append(&mut right);
        true
    }

    /// Every item, in order.
    pub(crate) fn iter(&self) -> Iter<'_, T> {
        self.range_idx(0..self.len)
    }

    /// The items at positions `range` (clamped to the set's length), in order.
    pub(crate) fn range_idx(&self, range: Range<usize>) -> Iter<'_, T> {
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        let (block, offset) = self.counts.locate(start);
        let (current, rest) = match self.blocks.get(block) {
            Some(items) => (items[offset..].iter(), self.blocks[block + 1..].iter()),
            None => ([].iter(), [].iter()),
        };
        Iter {
            current,
            rest,
            left: end - start,
        }
    }
}

impl<T: Ord> FromIterator<T> for OrderedSet<T> {
    /// Items in order fill every block but the last.
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut set = Self::new();
        for item in items {
            set.replace(item);
        }
        set
    }
}

/// Items of an [`OrderedSet`] from a position on, in order: a walk of a block's slice, then
/// of the next, as fast as a walk of one slice but once a block.
pub(crate) struct Iter<'a, T> {
    current: std::slice::Iter<'a, T>,
    rest: std::slice::Iter<'a, Vec<T>>,
    left: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        if self.left == 0 {
            return None;
        }
        loop {
            if let Some(item) = self.current.next() {
                self.left -= 1;
                return Some(item);
            }
            self.current = self.rest.next()?.iter();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

/// A Fenwick tree of counts: prefix sums and the position of a rank in O(log n).
#[derive(Debug, Default)]
struct Fenwick(Vec<usize>);

impl Fenwick {
    /// The tree of `blocks`' lengths.
    fn of<T>(blocks: &[Vec<T>]) -> Self {
        let mut tree: Vec<usize> = blocks.iter().map(Vec::len).collect();
        for i in 0..tree.len() {
            let parent = i | (i + 1);
            if parent < tree.len() {
                tree[parent] += tree[i];
            }
        }
        Self(tree)
    }

    fn add(&mut self, mut i: usize, n: usize) {
        while i < self.0.len() {
            self.0[i] += n;
            i |= i + 1;
        }
    }

    fn sub(&mut self, mut i: usize, n: usize) {
        while i < self.0.len() {
            self.0[i] -= n;
            i |= i + 1;
        }
    }

    /// The sum of the first `i` counts.
    fn prefix(&self, mut i: usize) -> usize {
        let mut sum = 0;
        while i > 0 {
            sum += self.0[i - 1];
            i &= i - 1;
        }
        sum
    }

    /// The block holding position `rank` and the position in it (with no block empty): the
    /// last block whose predecessors hold `rank` items or fewer. Past the last item, the
    /// block after the last, which an iterator with nothing left never reads.
    fn locate(&self, rank: usize) -> (usize, usize) {
        let mut at = 0;
        let mut left = rank;
        let mut step = self.0.len().checked_next_power_of_two().unwrap_or(0);
        // `at` counts the blocks whose items all come before `rank`.
        while step > 0 {
            if at + step <= self.0.len() && self.0[at + step - 1] <= left {
                at += step;
                left -= self.0[at - 1];
            }
            step >>= 1;
        }
        (at, left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set against std's `BTreeSet` through inserts, replaces and removes in an order
    /// of its own (a fixed pseudo-random walk), checking ranks, ranges and lookups.
    #[test]
    fn agrees_with_std() {
        let mut ours = OrderedSet::new();
        let mut std = std::collections::BTreeSet::new();
        let mut x: u64 = 12345;
        for step in 0..40_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (x >> 33) % 5_000;
            if step % 3 == 2 {
                assert_eq!(ours.take(&key), std.take(&key));
            } else {
                assert_eq!(ours.replace(key), std.replace(key));
            }
            assert_eq!(ours.len(), std.len());
            if step % 997 == 0 {
                check(&ours);
                let all: Vec<u64> = std.iter().copied().collect();
                assert!(ours.iter().copied().eq(all.iter().copied()));
                for probe in [0, 1, key, 2_500, 4_999, 6_000] {
                    let rank = std.range(..probe).count();
                    assert_eq!(ours.rank(&probe), rank, "rank of {probe}");
                    assert_eq!(ours.contains(&probe), std.contains(&probe));
                    assert_eq!(ours.get(&probe), std.get(&probe));
                    let to = (rank + 700).min(all.len() + 3);
                    let range = ours.range_idx(rank..to);
                    assert_eq!(range.len(), to.min(all.len()) - rank);
                    assert!(
                        range
                            .copied()
                            .eq(all[rank..to.min(all.len())].iter().copied())
                    );
                }
            }
        }
    }

    /// Keys in order, at the end or in a gap in the middle of the set (the names of one
    /// namespace before another's), fill their blocks: only the last block of each run is
    /// left part empty.
    #[test]
    fn keys_in_order_fill_blocks() {
        let block = BLOCK as u32;
        let mut set: OrderedSet<u32> = (0..5 * block)
            .chain(1 << 30..(1 << 30) + 5 * block)
            .collect();
        assert_eq!(set.blocks.len(), 10);
        assert!(set.blocks.iter().all(|b| b.len() == BLOCK));
        for k in 5 * block..9 * block + 7 {
            set.replace(k);
        }
        let partial = set.blocks.iter().filter(|b| b.len() < BLOCK).count();
        assert_eq!(partial, 1, "the gap's last block only");
        assert_eq!(set.blocks.len(), 15);
        assert!(
            set.iter()
                .copied()
                .eq((0..9 * block + 7).chain(1 << 30..(1 << 30) + 5 * block))
        );
        assert_eq!(set.range_idx(set.len()..set.len() + 5).count(), 0);
        assert_eq!(set.rank(&(1 << 30)), 9 * BLOCK + 7);
    }

    /// Keys nearly in order (each at most 40 places from its place, as creates in flight side
    /// by side reach the cache) fill their blocks as keys in order do: a key after the start
    /// of a new block does not halve the full block before it.
    #[test]
    fn keys_nearly_in_order_fill_blocks() {
        let n = 20 * BLOCK as u64;
        let mut keys: Vec<u64> = (0..n).collect();
        let mut x: u64 = 3;
        for chunk in keys.chunks_mut(40) {
            for i in (1..chunk.len()).rev() {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                chunk.swap(i, (x >> 33) as usize % (i + 1));
            }
        }
        let set: OrderedSet<u64> = keys.into_iter().collect();
        check(&set);
        assert_eq!(
            set.blocks.len(),
            20,
            "{:?}",
            set.blocks.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(set.iter().copied().eq(0..n));
    }

    /// The set's invariants: items strictly increasing, no block empty or over [`BLOCK`], the
    /// length and the Fenwick tree's prefix sums those of the blocks.
    fn check<T: Ord + std::fmt::Debug>(set: &OrderedSet<T>) {
        assert!(set.blocks.iter().all(|b| !b.is_empty() && b.len() <= BLOCK));
        assert!(set.iter().zip(set.iter().skip(1)).all(|(a, b)| a < b));
        assert_eq!(set.len(), set.blocks.iter().map(Vec::len).sum::<usize>());
        let mut sum = 0;
        for (b, block) in set.blocks.iter().enumerate() {
            assert_eq!(set.counts.prefix(b), sum);
            sum += block.len();
        }
    }

    /// Keys in random order over many blocks: full blocks split in the middle, the items keep
    /// their order, and a walk from any position (across blocks' ends) yields the same items
    /// as std's set.
    #[test]
    fn middle_inserts_split_and_keep_order() {
        let mut ours = OrderedSet::new();
        let mut std = std::collections::BTreeSet::new();
        let mut x: u64 = 7;
        for _ in 0..20 * BLOCK {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = x >> 20;
            assert_eq!(ours.replace(key), std.replace(key));
        }
        check(&ours);
        // Halved blocks refill between halves: at least half full on average.
        assert!(ours.blocks.len() <= 2 * ours.len() / BLOCK + 1);
        let all: Vec<u64> = std.iter().copied().collect();
        let mut start: usize = 0;
        for block in &ours.blocks {
            let ends = [
                start.saturating_sub(1),
                start,
                start + 1,
                start + block.len() - 1,
            ];
            for from in ends.map(|from| from.min(all.len() - 1)) {
                let to = (from + BLOCK + 3).min(all.len());
                assert!(
                    ours.range_idx(from..to)
                        .copied()
                        .eq(all[from..to].iter().copied())
                );
                assert_eq!(ours.rank(&all[from]), from);
            }
            start += block.len();
        }
    }

    /// Removing most keys of a part of the set merges the blocks left short, and what stays
    /// is found and walked in order.
    #[test]
    fn removals_merge_short_blocks() {
        let n = 16 * BLOCK as u32;
        let mut set: OrderedSet<u32> = (0..n).collect();
        assert_eq!(set.blocks.len(), 16);
        // Nine keys in ten of the middle half go (a namespace deleted, say).
        for k in n / 4..3 * n / 4 {
            if k % 10 != 0 {
                assert_eq!(set.take(&k), Some(k));
            }
            assert_eq!(set.take(&k.wrapping_add(n)), None);
        }
        check(&set);
        assert!(set.blocks.len() <= 8 + 2, "{} blocks", set.blocks.len());
        let left: Vec<u32> = (0..n)
            .filter(|k| *k < n / 4 || *k >= 3 * n / 4 || k % 10 == 0)
            .collect();
        assert!(set.iter().copied().eq(left.iter().copied()));
        for (rank, k) in left.iter().enumerate().step_by(97) {
            assert_eq!(set.rank(k), rank);
            assert_eq!(set.get(k), Some(k));
        }
        // Then everything goes, in order.
        for k in left {
            assert_eq!(set.take(&k), Some(k));
        }
        assert!(set.blocks.is_empty());
        assert_eq!(set.len(), 0);
    }

    #[test]
    fn empty_set() {
        let mut set: OrderedSet<u32> = OrderedSet::new();
        assert_eq!(set.rank(&5), 0);
        assert_eq!(set.iter().count(), 0);
        assert_eq!(set.range_idx(0..10).len(), 0);
        assert_eq!(set.take(&5), None);
        set.replace(5);
        assert_eq!(set.take(&5), Some(5));
        assert!(set.blocks.is_empty());
        assert_eq!(set.iter().count(), 0);
    }
}
