//! Prompts: chat-template rendering, the stable-prefix split that lets the engine reuse
//! KV caches, and the agents' prompt texts (stable part first).

pub mod chat_template;
pub mod stable_prefix;
