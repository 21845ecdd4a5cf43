//! Quire: on-device book translation.
//!
//! The modules follow the data: a [`book`] is split into [`units`], each unit becomes
//! [`prompts`] rendered through the model's chat template, the [`engine`] (model, tokenizer,
//! KV cache, prefix cache) produces text, [`translate`] coordinates the agents that turn
//! units into translations, [`checks`] proves the structure survived, and [`report`] writes
//! what happened. The agents, prompts and checks share one [`glossary`]. [`model_store`]
//! finds and fetches GGUF files; [`remote`] reaches a model on an OpenAI-compatible server
//! instead of the engine; [`serve`] puts the engine behind such an API; [`bench`](mod@bench)
//! measures.

#![warn(missing_docs)]

pub mod bench;
pub mod book;
pub mod checks;
pub mod cli;
pub mod engine;
pub mod glossary;
pub mod lang;
pub mod model_store;
pub mod paths;
pub mod prompts;
pub mod remote;
pub mod report;
pub mod serve;
pub mod translate;
pub mod units;
pub mod util;
