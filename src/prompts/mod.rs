//! The agents' prompt texts (stable part first, so the engine reuses their KV caches),
//! rendered with minijinja, and the prompt profiles that choose them per model family.
//! Chat-template rendering and the stable-prefix split belong to the engine
//! ([`crate::engine::chat_template`], [`crate::engine::stable_prefix`]).

pub mod agents;
pub mod profile;
