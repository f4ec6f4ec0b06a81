//! Errors of the KV manager. Each names the field, the limit and the value received.

use thiserror::Error;

/// Why a KV operation was refused. Refusals never change state (check/commit pairs).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KvError {
    /// Not enough free + evictable blocks for the request.
    #[error("out of KV blocks: need {needed} blocks, {available} available (free + evictable)")]
    OutOfBlocks { needed: usize, available: usize },
    /// The sequence id is not known to the manager.
    #[error("unknown sequence id {0}")]
    UnknownSequence(u64),
    /// A sequence with this id already has a block table.
    #[error("sequence id {0} already exists")]
    SequenceExists(u64),
    /// A restored block must hold exactly one full block of tokens.
    #[error("restored block has {got} tokens, block size is {block_size}")]
    BadBlockLen { got: usize, block_size: usize },
    /// A restored block's parent hash is not in the prefix cache, so the chain would dangle.
    #[error("restored block's parent hash {0:#018x} is not cached")]
    MissingParent(u64),
    /// The block's hash is already cached; restoring it again would duplicate it.
    #[error("block hash {0:#018x} is already cached")]
    AlreadyCached(u64),
    /// The prefix cache is disabled, so nothing can be restored into it.
    #[error("prefix cache is disabled")]
    CacheDisabled,
    /// A truncation would need window pages that were already released.
    #[error(
        "cannot truncate to {num_tokens} tokens: its window starts at block \
         {first_visible_block}, but window blocks before {released_blocks} were released"
    )]
    BehindWindow {
        num_tokens: usize,
        released_blocks: usize,
        first_visible_block: usize,
    },
    /// A configuration value is out of range.
    #[error("invalid KV config: {field} = {value} ({why})")]
    BadConfig {
        field: &'static str,
        value: usize,
        why: &'static str,
    },
}
