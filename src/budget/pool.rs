//! The token budget of a serving engine whose KV cache is one pool sized when it starts —
//! vLLM's blocks, SGLang's token pool. The engine's profiling run already holds the largest step's
//! activations, so what a request may use is its share of the pool: `c` requests at once hold at
//! most `pool / c` tokens each (whole blocks), and none more than the longest request the engine
//! was started for. A request past the pool waits in the engine's queue; it does not run out of
//! memory. This is the same arithmetic as the engine's own "maximum concurrency" line, so the
//! table and the verdict above it say one thing.

use super::{Budget, BudgetRow, Limit, WhatIf, CONCURRENCY_ROWS};
use crate::estimate::Workload;

/// A KV pool: its tokens, the unit a request takes them in, the longest request it admits and
/// how many run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    pub tokens: u64,
    pub block: u64,
    pub max_request: u64,
    pub max_running: u64,
    /// The model's own context, when the longest request is that.
    pub model_context: Option<u64>,
}

impl Pool {
    /// vLLM's pool once it starts: its blocks, and `--max-model-len` — the one it was given, or
    /// where it refuses that, the largest it would start with (the remedy's).
    pub fn vllm(s: &crate::estimate::VllmStartup) -> Pool {
        Pool {
            tokens: s.kv_tokens,
            block: s.block_size.max(1),
            max_request: if s.starts {
                s.max_model_len
            } else {
                s.largest_max_model_len
            },
            max_running: s.max_num_seqs.max(1),
            model_context: None,
        }
    }

    /// SGLang's token pool (`max_total_num_tokens`, one token a page) and its longest request.
    pub fn sglang(s: &crate::estimate::SglangStartup) -> Pool {
        Pool {
            tokens: s.max_total_num_tokens,
            block: 1,
            max_request: s.max_req_len.min(s.context_length),
            max_running: s.max_running_requests.max(1),
            model_context: None,
        }
    }

    /// The most tokens each of `c` requests at once may hold, and what bounds it.
    pub fn per_request(&self, c: u64) -> (u64, Limit) {
        let blocks = self.tokens / self.block / c.max(1);
        let share = blocks.saturating_mul(self.block);
        match share.min(self.max_request) {
            0 => (0, Limit::Nothing),
            t if t < share && Some(t) == self.model_context => (t, Limit::Context),
            t if t < share => (t, Limit::MaxRequest),
            t => (t, Limit::Memory),
        }
    }

    /// Requests of `tokens` each that fit the pool at once (at most the engine's own cap).
    pub fn requests(&self, tokens: u64) -> u64 {
        if tokens == 0 || tokens > self.max_request {
            return 0;
        }
        let blocks_each = tokens.div_ceil(self.block);
        (self.tokens / self.block / blocks_each).min(self.max_running)
    }
}

/// The budget's rows and its largest prompt, new tokens and batch, read off the pool.
pub fn follow(b: &mut Budget, pool: &Pool, w: &Workload) {
    let pool = &Pool {
        model_context: b.context_limit,
        ..*pool
    };
    b.table = CONCURRENCY_ROWS
        .iter()
        .map(|&c| {
            let (t, by) = pool.per_request(c);
            BudgetRow::at(c, t, by, w)
        })
        .collect();
    let (t, _) = pool.per_request(w.batch);
    b.max_prompt_tokens = t.checked_sub(w.max_new_tokens).filter(|&p| p > 0);
    b.max_new_tokens = t.checked_sub(w.prompt_tokens).filter(|&n| n > 0);
    b.max_batch = Some(pool.requests(w.total_tokens())).filter(|&n| n > 0);
}

/// A what-if row of the same engine: its longest request at batch 1 is the pool's.
pub fn follow_what_if(row: &mut WhatIf, pool: &Pool, model_context: Option<u64>) {
    let pool = &Pool {
        model_context,
        ..*pool
    };
    let (t, by) = pool.per_request(1);
    row.max_total_tokens_batch1 = t;
    row.limited_by = by;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Pool {
        // 31,200 tokens of 16-token blocks (1,950 blocks), started for 31,200, 256 at once.
        Pool {
            tokens: 31_200,
            block: 16,
            max_request: 31_200,
            max_running: 256,
            model_context: None,
        }
    }

    #[test]
    fn each_of_c_requests_holds_its_whole_blocks_of_the_pool() {
        let p = pool();
        assert_eq!(p.per_request(1), (31_200, Limit::Memory));
        // 1,950 blocks / 4 = 487 blocks each.
        assert_eq!(p.per_request(4), (487 * 16, Limit::Memory));
        let short = Pool {
            max_request: 8_192,
            ..p
        };
        assert_eq!(short.per_request(1), (8_192, Limit::MaxRequest));
        let model = Pool {
            model_context: Some(8_192),
            ..short
        };
        assert_eq!(model.per_request(1), (8_192, Limit::Context));
        assert_eq!(short.per_request(4), (487 * 16, Limit::Memory));
    }

    #[test]
    fn requests_that_fit_at_once_are_whole_blocks_and_the_engines_cap() {
        let p = pool();
        // 2,304 tokens = 144 blocks: 1,950 / 144 = 13.
        assert_eq!(p.requests(2_304), 13);
        assert_eq!(p.requests(2_305), 1_950 / 145);
        assert_eq!(p.requests(31_201), 0);
        assert_eq!(p.requests(16), 256);
        assert_eq!(p.requests(0), 0);
    }
}
