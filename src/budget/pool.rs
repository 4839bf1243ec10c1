//! The budget in transformers from the allocator model: the largest prompt and batch that run on
//! the card when `estimate::torch_program`'s sequence is replayed through PyTorch's caching
//! allocator, for the models whose sequence is known.

use super::largest;
use crate::estimate::torch_program::{on_card, Generation, Shape};

/// The largest prompt in `1..=max` that runs at this batch and length (`None`: not even one
/// token). A longer prompt needs more of every prefill tensor and a longer cache, so "runs" is
/// monotone in the prompt.
pub fn largest_prompt(
    shape: &Shape,
    batch: u64,
    new_tokens: u64,
    capacity: u64,
    max: u64,
) -> Option<u64> {
    largest(1, max, |prompt| {
        on_card(
            shape,
            Generation {
                batch,
                prompt,
                new_tokens,
            },
            capacity,
        )
        .ran()
    })
}

/// The largest batch in `1..=max` that runs at these lengths.
pub fn largest_batch(
    shape: &Shape,
    prompt: u64,
    new_tokens: u64,
    capacity: u64,
    max: u64,
) -> Option<u64> {
    largest(1, max, |batch| {
        on_card(
            shape,
            Generation {
                batch,
                prompt,
                new_tokens,
            },
            capacity,
        )
        .ran()
    })
}
