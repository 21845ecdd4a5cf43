//! The prefix cache: KV states of prompt prefixes, kept in memory and on disk, matched
//! against new prompts by their longest common token prefix.
//!
//! ## Why block-hash chains
//! Entries are indexed by a chain of hashes over fixed blocks of [`BLOCK`] tokens: the hash
//! of block *i* covers every token before it, so one hash names a whole prefix. Lookup walks
//! the prompt's blocks and stops at the first hash that no entry has — O(prompt / BLOCK)
//! hash-map probes however many entries exist — then extends token by token inside the
//! matched entry, so the match is exact to the token, not rounded to a block. A trie would
//! give the same answer but costs a node per token. On disk ([`disk`]) a file is named
//! by the sha256 of the engine fingerprint and the prefix's token ids instead.

pub mod disk;

use crate::engine::kv_cache::KvCache;
use anyhow::Result;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Tokens per hashed block.
pub const BLOCK: usize = 16;

/// Chain hashes of every full block of `tokens` (hash *i* covers `tokens[..(i+1)*BLOCK]`),
/// seeded with `salt` (model/tokenizer/template fingerprint).
pub fn block_hashes(salt: &str, tokens: &[u32]) -> Vec<[u8; 32]> {
    let mut out = Vec::with_capacity(tokens.len() / BLOCK);
    let mut prev = Sha256::digest(salt.as_bytes());
    for block in tokens.chunks_exact(BLOCK) {
        let mut h = Sha256::new();
        h.update(prev);
        for t in block {
            h.update(t.to_le_bytes());
        }
        prev = h.finalize();
        out.push(prev.into());
    }
    out
}

struct Entry {
    cache: KvCache,
    last_used: u64,
}

/// Hit/miss accounting.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefixStats {
    /// Lookups that reused at least one token from memory.
    pub memory_hits: usize,
    /// Lookups satisfied from disk.
    pub disk_hits: usize,
    /// Lookups that reused nothing.
    pub misses: usize,
    /// Prompt tokens whose KV came from the cache.
    pub hit_tokens: usize,
    /// Prompt tokens computed.
    pub computed_tokens: usize,
    /// Entries evicted for the memory budget.
    pub evictions: usize,
}

/// In-memory prefix entries under a byte budget, evicted least-recently-used first.
pub struct PrefixStore {
    salt: String,
    entries: HashMap<u64, Entry>,
    index: HashMap<[u8; 32], Vec<u64>>,
    next_id: u64,
    clock: u64,
    budget_bytes: usize,
    /// Accounting.
    pub stats: PrefixStats,
}

impl PrefixStore {
    /// A store for one model fingerprint (`salt`) holding at most `budget_bytes` of KV.
    pub fn new(salt: impl Into<String>, budget_bytes: usize) -> Self {
        Self {
            salt: salt.into(),
            entries: HashMap::new(),
            index: HashMap::new(),
            next_id: 0,
            clock: 0,
            budget_bytes,
            stats: PrefixStats::default(),
        }
    }

    /// Fingerprint this store is keyed by.
    pub fn salt(&self) -> &str {
        &self.salt
    }

    /// Bytes of KV held.
    pub fn bytes(&self) -> usize {
        self.entries
            .values()
            .map(|e| e.cache.len() * e.cache.bytes_per_token())
            .sum()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry sharing the longest token prefix with `prompt`: `(id, length)`.
    pub fn longest_match(&self, prompt: &[u32]) -> Option<(u64, usize)> {
        let hashes = block_hashes(&self.salt, prompt);
        // Candidates: entries sharing the deepest matching block; with no full block in
        // common, every entry is a candidate for a short partial match.
        let mut candidates: Vec<u64> = Vec::new();
        for h in hashes.iter().rev() {
            if let Some(ids) = self.index.get(h) {
                candidates = ids.clone();
                break;
            }
        }
        if candidates.is_empty() {
            candidates = self.entries.keys().copied().collect();
        }
        candidates
            .into_iter()
            .filter_map(|id| {
                let e = self.entries.get(&id)?;
                let n = crate::engine::generate::common_prefix(e.cache.tokens(), prompt);
                (n > 0).then_some((id, n))
            })
            .max_by_key(|&(id, n)| (n, id))
    }

    /// A new cache holding the longest cached prefix of `prompt` (possibly empty), with room
    /// for `extra` more positions. Returns the cache and how many tokens it reuses.
    pub fn checkout(
        &mut self,
        prompt: &[u32],
        extra: usize,
        empty: impl FnOnce() -> Result<KvCache>,
    ) -> Result<(KvCache, usize)> {
        self.clock += 1;
        if let Some((id, n)) = self.longest_match(prompt) {
            let e = self.entries.get_mut(&id).expect("indexed entry exists");
            e.last_used = self.clock;
            self.stats.memory_hits += 1;
            return Ok((e.cache.fork(n, extra)?, n));
        }
        Ok((empty()?, 0))
    }

    /// Remember the first `len` positions of `cache` (a copy is stored).
    pub fn insert(&mut self, cache: &KvCache, len: usize) -> Result<()> {
        if len == 0
            || self
                .entries
                .values()
                .any(|e| e.cache.tokens() == &cache.tokens()[..len])
        {
            return Ok(());
        }
        let copy = cache.fork(len, 0)?;
        self.insert_owned(copy);
        Ok(())
    }

    /// Remember `cache` as it is (no copy).
    pub fn insert_owned(&mut self, cache: KvCache) {
        self.clock += 1;
        let id = self.next_id;
        self.next_id += 1;
        for h in block_hashes(&self.salt, cache.tokens()) {
            self.index.entry(h).or_default().push(id);
        }
        self.entries.insert(
            id,
            Entry {
                cache,
                last_used: self.clock,
            },
        );
        self.evict();
    }

    fn evict(&mut self) {
        while self.bytes() > self.budget_bytes && self.entries.len() > 1 {
            let Some((&victim, _)) = self.entries.iter().min_by_key(|(_, e)| e.last_used) else {
                break;
            };
            if let Some(e) = self.entries.remove(&victim) {
                for h in block_hashes(&self.salt, e.cache.tokens()) {
                    if let Some(v) = self.index.get_mut(&h) {
                        v.retain(|&x| x != victim);
                        if v.is_empty() {
                            self.index.remove(&h);
                        }
                    }
                }
                self.stats.evictions += 1;
            }
        }
    }
}
