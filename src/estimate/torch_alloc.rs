//! PyTorch's CUDA caching allocator, as a model: the rules of
//! `c10/cuda/CUDACachingAllocator.cpp` with its default settings (no `expandable_segments`, no
//! `max_split_size_mb`, no garbage-collection threshold, one stream), so that a sequence of
//! tensor allocations and frees gives the segments PyTorch would `cudaMalloc`, its reserved bytes,
//! and the request at which it runs out under a given limit.
//!
//! - Sizes are rounded up to 512 B. Requests up to 1 MiB come from the small pool, whose segments
//!   are 2 MiB; larger ones from the large pool: a 20 MiB segment below 10 MiB, else the request
//!   rounded up to 2 MiB.
//! - A request takes the smallest cached free block that holds it (ties: the lowest address).
//!   The block is split when the rest is ≥ 512 B (small pool) or > 1 MiB (large pool): the
//!   request keeps the low end, the rest goes back to the pool.
//! - A freed block merges with free neighbours of its segment.
//! - With no cached block, a new segment is asked of the driver. When that fails, every cached
//!   segment that is wholly free is handed back (`release_cached_blocks`) and the driver is asked
//!   once more; failing again is the out-of-memory error.
//! - Where the driver puts a segment decides a tie between two equal cached blocks (the lower
//!   address wins). As the H100's traces show it (docs/calibration/alloc-traces-h100-2026-12-07):
//!   address space is reserved downward in whole 32 MiB, and a later large-pool segment that fits
//!   the unused end of an earlier reservation goes there, above the segments made since. At
//!   Qwen2.5-7B's 4,096-token prompt, where every activation is a whole number of 2 MiB, that
//!   decides which of two 28 MiB blocks a request takes, and so whether the decode runs.
//!
//! Replaying the allocator traces of the ground truth's own transformers runs (recorded with
//! `torch.cuda.memory._record_memory_history` on the H200, scripts/gpu/alloc-trace.py) gives
//! PyTorch's `max_memory_reserved` to the byte, and the failing request at the very event where
//! PyTorch failed (tests/torch_alloc_replay.rs).

use thiserror::Error;

use crate::units::MIB;

const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = MIB;
const SMALL_BUFFER: u64 = 2 * MIB;
const LARGE_BUFFER: u64 = 20 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;
/// The driver's address reservations are whole multiples of this (the H100's traces).
const VA_CHUNK: u64 = 32 * MIB;

/// What the driver keeps back from a `cudaMalloc` on the H200 (driver 580): a 278 MiB segment
/// failed with 279.1 MiB reported free (Llama-2-7B eager, 1,509 tokens,
/// docs/calibration/alloc-traces-h200-2026-12-01),
/// while every allocation that left ≥ 2 MiB free succeeded.
pub const DRIVER_RESERVE: u64 = 2 * MIB;

/// The request PyTorch could not place, as its out-of-memory message would say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the allocator could not get a {segment}-byte segment for a {requested}-byte tensor with {reserved} of {limit} bytes reserved")]
pub struct OutOfMemory {
    /// The tensor's bytes, rounded as the allocator rounds them.
    pub requested: u64,
    /// The segment it asked the driver for.
    pub segment: u64,
    /// Bytes reserved by the allocator when it gave up (after handing back the free segments).
    pub reserved: u64,
    pub limit: u64,
}

/// A live or cached block: a piece of one segment.
#[derive(Debug, Clone, Copy)]
struct Block {
    ptr: u64,
    size: u64,
    small: bool,
    allocated: bool,
    /// The neighbours in its segment (`NIL`: none); 32 bits keep a block in half a cache line.
    prev: u32,
    next: u32,
}

/// No neighbour.
const NIL: u32 = u32::MAX;

/// A block index as a neighbour link (an arena past `NIL` blocks is far beyond any replay).
fn link(id: usize) -> u32 {
    u32::try_from(id).unwrap_or(NIL)
}

/// A neighbour link as a block index.
fn linked(l: u32) -> Option<usize> {
    (l != NIL).then_some(l as usize)
}

/// A handle on an allocated tensor's block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation(usize);

impl Allocation {
    /// The block's index: stable while the tensor is live, reused once it is freed.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Cached blocks of up to this many bytes (every small-pool block) are kept by size class.
const CLASSED: u64 = SMALL_BUFFER;
/// One class per multiple of `MIN_BLOCK` up to `CLASSED`, 0 included.
const CLASSES: usize = (CLASSED / MIN_BLOCK) as usize + 1;
/// Words of the bitmap of non-empty classes (at most 128, the summary's bits).
const WORDS: usize = CLASSES.div_ceil(64);

/// No block: the end of a class's list.
const NONE: usize = usize::MAX;

/// One pool's cached free blocks by (size, address, block), in the allocator's best-fit order
/// (smallest that holds the request, then the lowest address). A decode step makes and frees
/// thousands of small tensors, so a block whose size is a multiple of `MIN_BLOCK` up to 2 MiB
/// is in its size's class, a list in address order doubly linked through the block's index (a
/// block leaves it, and is known to be in it, without a walk), found through a two-level bitmap
/// of the non-empty classes in a few word operations; any other block is in a sorted vector, as
/// a set. A block is cached at most once.
#[derive(Debug, Clone)]
struct FreeBlocks {
    /// The first block of each class (`NONE`: empty).
    heads: Vec<usize>,
    /// By block index: its place in a class's list.
    links: Vec<Link>,
    /// Bit `c` of the class bitmap: class `c` holds a block.
    bits: [u64; WORDS],
    /// Bit `w`: word `w` of `bits` is not zero.
    summary: u128,
    /// Blocks outside the classes, sorted.
    rest: Vec<(u64, u64, usize)>,
}

/// A block's place in its class's list.
#[derive(Debug, Clone, Copy)]
struct Link {
    /// The class whose list holds the block (`NONE`: none).
    class: usize,
    /// The blocks after and before it there (`NONE`: the end).
    next: usize,
    prev: usize,
    /// Its address.
    ptr: u64,
}

const UNLINKED: Link = Link {
    class: NONE,
    next: NONE,
    prev: NONE,
    ptr: 0,
};

impl Default for FreeBlocks {
    fn default() -> Self {
        FreeBlocks {
            heads: vec![NONE; CLASSES],
            links: Vec::new(),
            bits: [0; WORDS],
            summary: 0,
            rest: Vec::new(),
        }
    }
}

/// The class of a block of `size` bytes, if it is kept by class.
fn class_of(size: u64) -> Option<usize> {
    (size % MIN_BLOCK == 0 && size <= CLASSED).then_some((size / MIN_BLOCK) as usize)
}

impl FreeBlocks {
    /// The first non-empty class from `c` on.
    fn class_from(&self, c: usize) -> Option<usize> {
        let w = c / 64;
        let word = *self.bits.get(w)?;
        let here = word & (!0u64 << (c % 64));
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        let above = self.summary & (!0u128).checked_shl(w as u32 + 1).unwrap_or(0);
        if above == 0 {
            return None;
        }
        let w = above.trailing_zeros() as usize;
        Some(w * 64 + self.bits[w].trailing_zeros() as usize)
    }

    /// The smallest block of at least `size` bytes (ties: the lowest address).
    fn first_holding(&self, size: u64) -> Option<(u64, u64, usize)> {
        let classed = usize::try_from(size.div_ceil(MIN_BLOCK))
            .ok()
            .and_then(|c| self.class_from(c))
            .map(|c| {
                let id = self.heads[c];
                (c as u64 * MIN_BLOCK, self.links[id].ptr, id)
            });
        if self.rest.is_empty() {
            return classed;
        }
        let at = self.rest.partition_point(|k| k.0 < size);
        let other = self.rest.get(at).copied();
        match (classed, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Take the smallest block of at least `size` bytes (ties: the lowest address) out of the
    /// pool. A block from a class is the head of its list, unlinked there without a search.
    fn take_holding(&mut self, size: u64) -> Option<(u64, u64, usize)> {
        let key = self.first_holding(size)?;
        match class_of(key.0) {
            Some(c) if self.heads[c] == key.2 => self.unlink(c, key.2),
            _ => self.remove(&key),
        }
        Some(key)
    }

    /// Whether block `id` is in the list of class `c`.
    fn holds(&self, c: usize, id: usize) -> bool {
        self.links.get(id).is_some_and(|l| l.class == c)
    }

    #[inline(always)]
    fn insert(&mut self, key: (u64, u64, usize)) {
        let Some(c) = class_of(key.0) else {
            if let Err(at) = self.rest.binary_search(&key) {
                self.rest.insert(at, key);
            }
            return;
        };
        let (_, ptr, id) = key;
        if self.holds(c, id) {
            return;
        }
        if self.links.len() <= id {
            self.links.resize(id + 1, UNLINKED);
        }
        // after every block of a lower (address, index)
        let mut before = NONE;
        let mut at = self.heads[c];
        while at != NONE && (self.links[at].ptr, at) < (ptr, id) {
            before = at;
            at = self.links[at].next;
        }
        self.links[id] = Link {
            class: c,
            next: at,
            prev: before,
            ptr,
        };
        if before == NONE {
            self.heads[c] = id;
        } else {
            self.links[before].next = id;
        }
        if at != NONE {
            self.links[at].prev = id;
        }
        self.bits[c / 64] |= 1 << (c % 64);
        self.summary |= 1 << (c / 64);
    }

    #[inline(always)]
    fn remove(&mut self, key: &(u64, u64, usize)) {
        let Some(c) = class_of(key.0) else {
            if let Ok(at) = self.rest.binary_search(key) {
                self.rest.remove(at);
            }
            return;
        };
        let id = key.2;
        if self.holds(c, id) && self.links[id].ptr == key.1 {
            self.unlink(c, id);
        }
    }

    /// Take block `id` out of the list of class `c`, which holds it.
    #[inline(always)]
    fn unlink(&mut self, c: usize, id: usize) {
        let Link { next, prev, .. } = self.links[id];
        self.links[id] = UNLINKED;
        if prev == NONE {
            self.heads[c] = next;
        } else {
            self.links[prev].next = next;
        }
        if next != NONE {
            self.links[next].prev = prev;
        }
        if self.heads[c] == NONE {
            self.bits[c / 64] &= !(1 << (c % 64));
            if self.bits[c / 64] == 0 {
                self.summary &= !(1 << (c / 64));
            }
        }
    }

    /// `remove(old)` then `insert(new)`: a freed block that merges with a cached neighbour
    /// takes its place.
    #[inline(always)]
    fn replace(&mut self, old: &(u64, u64, usize), new: (u64, u64, usize)) {
        self.remove(old);
        self.insert(new);
    }

    /// Every cached block, in the pool's order.
    fn keys(&self) -> Vec<(u64, u64, usize)> {
        let mut all = self.rest.clone();
        for (c, &head) in self.heads.iter().enumerate() {
            let mut at = head;
            while at != NONE {
                all.push((c as u64 * MIN_BLOCK, self.links[at].ptr, at));
                at = self.links[at].next;
            }
        }
        all.sort_unstable();
        all
    }
}

/// The allocator's state: every block ever made (an arena; merged blocks are retired), the two
/// pools of cached free blocks, and the counters PyTorch reports.
#[derive(Debug, Clone)]
pub struct CachingAllocator {
    limit: u64,
    blocks: Vec<Block>,
    retired: Vec<usize>,
    pools: [FreeBlocks; 2],
    next_ptr: u64,
    /// The unused ends of the driver's address reservations (start, length), newest last.
    tails: Vec<(u64, u64)>,
    reserved: u64,
    allocated: u64,
    peak_reserved: u64,
    peak_allocated: u64,
    segments: u64,
}

/// Rounded size of a request (`round_size`).
pub fn rounded(size: u64) -> u64 {
    if size < MIN_BLOCK {
        MIN_BLOCK
    } else {
        size.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
    }
}

/// Segment the allocator asks the driver for to hold a rounded request (`get_allocation_size`).
pub fn segment_for(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

impl CachingAllocator {
    /// An empty allocator that may reserve up to `limit` bytes in all (what the driver has free
    /// for it, less `DRIVER_RESERVE` if the caller models the driver's own share).
    pub fn new(limit: u64) -> Self {
        CachingAllocator {
            limit,
            blocks: Vec::new(),
            retired: Vec::new(),
            pools: [FreeBlocks::default(), FreeBlocks::default()],
            next_ptr: 1 << 47,
            tails: Vec::new(),
            reserved: 0,
            allocated: 0,
            peak_reserved: 0,
            peak_allocated: 0,
            segments: 0,
        }
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }
    pub fn allocated(&self) -> u64 {
        self.allocated
    }
    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }
    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }
    /// Segments asked of the driver so far.
    pub fn segments(&self) -> u64 {
        self.segments
    }

    /// Allocate `size` bytes; segment addresses are the allocator's own.
    pub fn malloc(&mut self, size: u64) -> Result<Allocation, OutOfMemory> {
        self.malloc_at(size, None)
    }

    /// Allocate `size` bytes; a new segment, if one is needed, starts at `segment_ptr` (a
    /// recorded trace's address, so that ties between equal free blocks break as they did).
    pub fn malloc_at(
        &mut self,
        size: u64,
        segment_ptr: Option<u64>,
    ) -> Result<Allocation, OutOfMemory> {
        let size = rounded(size);
        let small = size <= SMALL_SIZE;
        let pool = usize::from(!small);
        let id = match self.pools[pool].take_holding(size) {
            Some(key) => key.2,
            None => self.new_segment(size, small, segment_ptr)?,
        };
        self.split(id, size);
        let b = &mut self.blocks[id];
        b.allocated = true;
        self.allocated = self.allocated.saturating_add(b.size);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Ok(Allocation(id))
    }

    fn new_segment(
        &mut self,
        size: u64,
        small: bool,
        ptr: Option<u64>,
    ) -> Result<usize, OutOfMemory> {
        let segment = segment_for(size);
        if !self.fits(segment) {
            self.empty_cache();
            if !self.fits(segment) {
                return Err(OutOfMemory {
                    requested: size,
                    segment,
                    reserved: self.reserved,
                    limit: self.limit,
                });
            }
        }
        let ptr = match ptr {
            Some(p) => p,
            None => self.place(segment, small),
        };
        self.reserved = self.reserved.saturating_add(segment);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        self.segments = self.segments.saturating_add(1);
        Ok(self.push(Block {
            ptr,
            size: segment,
            small,
            allocated: false,
            prev: NIL,
            next: NIL,
        }))
    }

    /// Where the driver puts a new segment: a large one that fits the unused end of an earlier
    /// reservation goes there (the newest such end first), above the segments made since;
    /// otherwise fresh address space below the last reservation, rounded up to 32 MiB.
    fn place(&mut self, segment: u64, small: bool) -> u64 {
        if !small {
            if let Some(i) = self.tails.iter().rposition(|&(_, len)| len >= segment) {
                let (start, len) = self.tails[i];
                self.tails[i] = (start.saturating_add(segment), len - segment);
                return start;
            }
        }
        let reservation = segment.div_ceil(VA_CHUNK).saturating_mul(VA_CHUNK);
        self.next_ptr = self.next_ptr.saturating_sub(reservation);
        if !small && reservation > segment {
            self.tails
                .push((self.next_ptr.saturating_add(segment), reservation - segment));
        }
        self.next_ptr
    }

    fn fits(&self, segment: u64) -> bool {
        self.reserved
            .checked_add(segment)
            .is_some_and(|r| r <= self.limit)
    }

    fn push(&mut self, b: Block) -> usize {
        match self.retired.pop() {
            Some(id) => {
                self.blocks[id] = b;
                id
            }
            None => {
                self.blocks.push(b);
                self.blocks.len() - 1
            }
        }
    }

    /// Split block `id` to `size` when the rest is worth keeping; the rest is cached.
    fn split(&mut self, id: usize, size: u64) {
        let b = self.blocks[id];
        let rest = b.size.saturating_sub(size);
        let keep = if b.small {
            rest >= MIN_BLOCK
        } else {
            rest > SMALL_SIZE
        };
        if !keep {
            return;
        }
        let ptr = b.ptr.saturating_add(size);
        let r = self.push(Block {
            ptr,
            size: rest,
            small: b.small,
            allocated: false,
            prev: link(id),
            next: b.next,
        });
        if let Some(n) = linked(b.next) {
            self.blocks[n].prev = link(r);
        }
        let b = &mut self.blocks[id];
        b.next = link(r);
        b.size = size;
        // the key from the values just written, not read back from the block
        self.pools[usize::from(!b.small)].insert((rest, ptr, r));
    }

    /// Free a tensor's block: it merges with its free neighbours and is cached.
    pub fn free(&mut self, a: Allocation) {
        let id = a.0;
        let Some(mut me) = self.blocks.get(id).copied() else {
            return;
        };
        if !me.allocated {
            return;
        }
        self.allocated = self.allocated.saturating_sub(me.size);
        me.allocated = false;
        // The cached neighbours it absorbs leave the pool as the merged block enters it. The
        // merged block is built in `me` and written once.
        let mut absorbed = [None, None];
        for (slot, other) in [me.prev, me.next].into_iter().enumerate() {
            let Some(other) = linked(other) else {
                continue;
            };
            let o = self.blocks[other];
            if o.allocated {
                continue;
            }
            absorbed[slot] = Some((o.size, o.ptr, other));
            if slot == 0 {
                me.ptr = o.ptr;
                me.prev = o.prev;
                if let Some(p) = linked(o.prev) {
                    self.blocks[p].next = link(id);
                }
            } else {
                me.next = o.next;
                if let Some(n) = linked(o.next) {
                    self.blocks[n].prev = link(id);
                }
            }
            me.size = me.size.saturating_add(o.size);
            self.retired.push(other);
        }
        self.blocks[id] = me;
        let key = (me.size, me.ptr, id);
        let pool = &mut self.pools[usize::from(!me.small)];
        match absorbed {
            [None, None] => pool.insert(key),
            [Some(one), None] | [None, Some(one)] => pool.replace(&one, key),
            [Some(before), Some(after)] => {
                pool.remove(&before);
                pool.replace(&after, key);
            }
        }
    }

    /// Free the tensor whose block is `index` (`Allocation::index`); an index not allocated is
    /// left alone.
    pub fn free_index(&mut self, index: usize) {
        self.free(Allocation(index));
    }

    /// `torch.cuda.empty_cache()`: hand back every cached segment that is wholly free.
    pub fn empty_cache(&mut self) {
        for pool in 0..2 {
            let whole: Vec<(u64, u64, usize)> = (self.pools[pool].keys().into_iter())
                .filter(|k| self.is_whole_segment(k.2))
                .collect();
            for k in whole {
                self.release(pool, k);
            }
        }
    }

    /// Hand back the wholly free segment at `ptr`, if there is one (a recorded `segment_free`).
    pub fn release_segment(&mut self, ptr: u64) -> bool {
        for pool in 0..2 {
            let hit = (self.pools[pool].keys().into_iter())
                .find(|k| self.blocks[k.2].ptr == ptr && self.is_whole_segment(k.2));
            if let Some(k) = hit {
                self.release(pool, k);
                return true;
            }
        }
        false
    }

    /// A cached block that is a whole segment (no neighbour split off it).
    fn is_whole_segment(&self, id: usize) -> bool {
        let b = &self.blocks[id];
        b.prev == NIL && b.next == NIL
    }

    /// Give a wholly free segment back to the driver.
    fn release(&mut self, pool: usize, key: (u64, u64, usize)) {
        self.pools[pool].remove(&key);
        self.reserved = self.reserved.saturating_sub(key.0);
        self.retired.push(key.2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_and_segments_follow_pytorchs_three_classes() {
        assert_eq!(rounded(4), 512);
        assert_eq!(rounded(35_728), 35_840);
        assert_eq!(segment_for(rounded(7_168)), 2 * MIB);
        // k_proj of Qwen2.5-7B (3.5 MiB) shares a 20 MiB segment; q_proj (24.5 MiB) gets 26 MiB.
        assert_eq!(segment_for(3_670_016), 20 * MIB);
        assert_eq!(segment_for(25_690_112), 27_262_976);
    }

    #[test]
    fn a_freed_block_is_reused_split_and_merged_back() -> Result<(), OutOfMemory> {
        let mut a = CachingAllocator::new(u64::MAX);
        let x = a.malloc(3 * MIB)?; // a 20 MiB segment, split
        let y = a.malloc(3 * MIB)?; // from the rest of it
        assert_eq!((a.reserved(), a.segments()), (20 * MIB, 1));
        a.free(x);
        a.free(y);
        // one whole free segment again: a 17 MiB request fits it without a new segment
        let z = a.malloc(17 * MIB)?;
        assert_eq!((a.reserved(), a.segments()), (20 * MIB, 1));
        a.free(z);
        a.empty_cache();
        assert_eq!(a.reserved(), 0);
        Ok(())
    }

    #[test]
    fn the_pool_keeps_the_order_of_an_ordered_set() {
        use std::collections::BTreeSet;
        let mut set = BTreeSet::new();
        let mut pool = FreeBlocks::default();
        // a small linear congruential sequence: sizes from a few classes so that ties happen
        let mut x: u64 = 12_345;
        for _ in 0..20_000usize {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            // sizes in the classes, past them, and between two classes, with ties; a block is
            // cached at most once, so its index follows from its size and address
            let sizes = [
                0,
                MIN_BLOCK,
                3 * MIN_BLOCK,
                CLASSED,
                CLASSED + MIN_BLOCK,
                700,
                2_000,
            ];
            let class = (x >> 60) as usize % sizes.len() * 2 + ((x >> 57) & 1) as usize;
            let size = sizes[class / 2] + (class % 2) as u64 * 4 * MIN_BLOCK;
            let ptr = (x >> 40) & 0x3f;
            let key = (size, ptr, class * 64 + ptr as usize);
            match (x >> 33) % 4 {
                0 | 1 => {
                    set.insert(key);
                    pool.insert(key);
                }
                2 => {
                    // a cached block (or none) replaced by another key, as a merge does
                    let old = set
                        .iter()
                        .nth((x >> 20) as usize % (set.len() + 1))
                        .copied();
                    let old = old.unwrap_or(key);
                    set.remove(&old);
                    set.insert(key);
                    pool.replace(&old, key);
                }
                _ => {
                    let hit = set.range((key.0, 0, 0)..).next().copied();
                    assert_eq!(pool.first_holding(key.0), hit);
                    if let Some(k) = hit {
                        set.remove(&k);
                        if x & 1 == 0 {
                            pool.remove(&k);
                        } else {
                            assert_eq!(pool.take_holding(key.0), Some(k));
                        }
                    }
                }
            }
            assert!(pool.keys().iter().eq(set.iter()));
        }
    }

    #[test]
    fn out_of_memory_hands_back_free_segments_before_it_fails() -> Result<(), OutOfMemory> {
        let mut a = CachingAllocator::new(64 * MIB);
        let big = a.malloc(40 * MIB)?;
        a.free(big); // cached, wholly free
                     // 50 MiB does not fit beside the cached 40 MiB: it is handed back, then the request fits
        let c = a.malloc(50 * MIB)?;
        assert_eq!(a.reserved(), 50 * MIB);
        let err = a.malloc(20 * MIB).err();
        assert_eq!(
            err,
            Some(OutOfMemory {
                requested: 20 * MIB,
                segment: 20 * MIB,
                reserved: 50 * MIB,
                limit: 64 * MIB
            })
        );
        a.free(c);
        Ok(())
    }
}
