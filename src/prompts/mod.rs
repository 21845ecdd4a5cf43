//! Prompts: chat-template rendering, the stable-prefix split that lets the engine reuse
//! KV caches, and the agents' prompt texts (stable part first).

pub mod agents;
pub mod chat_template;
pub mod stable_prefix;
