//! When PyTorch's cached-but-unallocated memory is the cause of an out-of-memory error, and when it
//! is only the tail of a limit that live tensors already fill. One rule, used by every reader: the
//! log reader (`verdict/read/`, from the message's figures) and the allocator-record reader
//! (`snapshot/attribute.rs`, from the segments), so that `explain`, `watch` and an explain of the
//! record answer alike.
//!
//! Fragmentation needs the memory to be there, only not in one piece: the cache at least as large
//! as the request, live bytes plus the request within the limit, and the limit not already filled.
//! "Filled" is measured, not assumed: four capped H100 runs whose messages showed 0.2–3.3 GiB of
//! holes beside a 12 MiB–1.5 GiB request (a 1,000-token prompt decoding 3,000 more; a batch of 48 ×
//! 2,048; a batch of 32 × 2,048; a 24k-token prompt) were run again with
//! `PYTORCH_ALLOC_CONF=expandable_segments:True`, which returns every hole, and all four ran out
//! again with 34–160 MiB reserved and free (docs/calibration/
//! same-oom-expandable-segments-h100-2026-12-06.jsonl). At 84–98 % of the limit live and 95–100 %
//! reserved, the step that needed that buffer needs more after it; the cause is what filled the
//! limit, and the holes only decide which allocation fails first.

/// What the allocator held when a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// Bytes in blocks tensors hold.
    pub live: u64,
    /// Reserved by PyTorch but unallocated: the cache, usable only in pieces.
    pub unallocated: u64,
    /// The request that failed.
    pub request: u64,
    /// What the process may hold: the per-process cap, else the card.
    pub limit: u64,
    /// The same work ran and fit before (a training or serving loop's progress lines ahead of
    /// the error): its need is known to fit the limit, so holes beside a filled limit are what
    /// stopped it this time.
    pub steady: bool,
}

/// Live bytes at or above this share of the limit, with reserved bytes at or above
/// [`FILLED_RESERVED_PCT`], fill it.
pub const FILLED_LIVE_PCT: u64 = 80;
/// See [`FILLED_LIVE_PCT`].
pub const FILLED_RESERVED_PCT: u64 = 90;

impl Pool {
    /// Live tensors hold most of the limit and PyTorch has reserved nearly all of it: the holes are
    /// the limit's tail, not the cause.
    pub fn filled(&self) -> bool {
        if self.limit == 0 || self.live > self.limit {
            // No limit known, or live bytes past the card (a driver that spills into host memory,
            // as Windows does): how full the card is cannot be read.
            return false;
        }
        let reserved = self.live.saturating_add(self.unallocated);
        self.live.saturating_mul(100) >= self.limit.saturating_mul(FILLED_LIVE_PCT)
            && reserved.saturating_mul(100) >= self.limit.saturating_mul(FILLED_RESERVED_PCT)
    }

    /// The holes are the cause: enough cache for the request, the request fits beside the live
    /// bytes, and live tensors do not already fill the limit — or they do, but the same work fit
    /// before.
    pub fn fragmented(&self) -> bool {
        self.unallocated > 0
            && self.unallocated >= self.request
            && (self.limit == 0
                || self.live > self.limit
                || self.live.saturating_add(self.request) <= self.limit)
            && (self.steady || !self.filled())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn pool(live: u64, unallocated: u64, request: u64, limit: u64) -> Pool {
        Pool {
            live,
            unallocated,
            request,
            limit,
            steady: false,
        }
    }

    /// The four capped H100 runs that still ran out with expandable segments (their messages'
    /// figures): each is filled, none fragmented.
    #[test]
    fn the_four_measured_runs_are_filled_not_fragmented() {
        let runs = [
            // 24k-token prompt, 24 GiB cap: 20.22 GiB live, 3.29 GiB cached, 1.07 GiB asked.
            pool(20_705 * MIB, 3_369 * MIB, 1_096 * MIB, 24 * GIB),
            // batch 48 × 2,048, 20 GiB cap: 16.94 GiB live, 2.00 GiB cached, 1.50 GiB asked.
            pool(17_347 * MIB, 2 * GIB, 1_536 * MIB, 20 * GIB),
            // decode of 3,000 tokens after 1,000, 13.5 GiB cap: 13.28 GiB live, 219 MiB, 12 MiB.
            pool(13_599 * MIB, 219 * MIB, 12 * MIB, 13_824 * MIB),
        ];
        for p in runs {
            assert!(p.filled(), "{p:?}");
            assert!(!p.fragmented(), "{p:?}");
        }
    }

    #[test]
    fn a_filled_limit_after_many_steps_that_fit_is_fragmentation() {
        // A loop at step 1,190: 39.2 GiB live of 47.5, 7.17 GiB cached, 1 GiB asked.
        let mut p = pool(40_141 * MIB, 7_342 * MIB, GIB, 48_640 * MIB);
        assert!(p.filled() && !p.fragmented());
        p.steady = true;
        assert!(p.fragmented());
    }

    #[test]
    fn holes_beside_a_half_empty_card_are_fragmentation() {
        // 40 GiB live of 80, 12 GiB cached in pieces, 8 GiB asked.
        let p = pool(40 * GIB, 12 * GIB, 8 * GIB, 80 * GIB);
        assert!(!p.filled());
        assert!(p.fragmented());
    }

    #[test]
    fn a_request_larger_than_the_cache_or_the_room_is_not_fragmentation() {
        assert!(!pool(40 * GIB, 2 * GIB, 8 * GIB, 80 * GIB).fragmented());
        assert!(!pool(75 * GIB, 9 * GIB, 8 * GIB, 80 * GIB).fragmented());
        assert!(!pool(40 * GIB, 0, 0, 80 * GIB).fragmented());
    }

    #[test]
    fn live_bytes_past_the_card_say_nothing_of_how_full_it_is() {
        // Windows spilling into shared memory: 26.4 GiB live on a 24 GiB card.
        let p = pool(27_034 * MIB, 3 * GIB, 2 * GIB, 24 * GIB);
        assert!(!p.filled());
        assert!(p.fragmented());
    }

    #[test]
    fn live_bytes_well_below_the_limit_do_not_fill_it_even_when_reserved_is_high() {
        // 60 % live, 95 % reserved: the holes are a third of the card.
        let p = pool(48 * GIB, 28 * GIB, 8 * GIB, 80 * GIB);
        assert!(!p.filled());
        assert!(p.fragmented());
    }
}
