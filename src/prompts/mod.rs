//! Prompts: chat-template rendering and (for the agents) prompt texts whose stable part
//! comes first so the engine can reuse its KV cache.

pub mod chat_template;
