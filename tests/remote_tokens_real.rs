//! `RemoteBackend` counts tokens like the local engine when given a local GGUF of the
//! served model (its tokenizer and chat template, no weights), and estimates without one.

mod common;

use quire::engine::backend::ChatBackend;
use quire::engine::chat_template::Message;
use quire::remote::{RemoteBackend, RemoteConfig};

#[test]
fn counts_match_the_engine_with_a_local_gguf() {
    let engine = common::qwen();
    let config = RemoteConfig::new("http://127.0.0.1:9/v1", "qwen");
    let remote = RemoteBackend::new(config)
        .unwrap()
        .with_local_tokenizer(&common::model_path(common::QWEN), None)
        .unwrap();
    assert_eq!(remote.counting(), "tokenizer");
    let text = "The prefix cache keeps 1,024 tokens — 缓存前缀。";
    assert_eq!(
        remote.count_tokens(text).unwrap(),
        engine.encode(text).unwrap().len()
    );
    let messages = [Message::system("You translate."), Message::user(text)];
    let rendered = engine.template.render(&messages, true).unwrap();
    assert_eq!(
        remote.prompt_tokens(&messages).unwrap(),
        engine.encode(&rendered).unwrap().len()
    );
}

#[test]
fn a_missing_gguf_is_a_clear_error() {
    let config = RemoteConfig::new("http://127.0.0.1:9/v1", "qwen");
    let err = RemoteBackend::new(config)
        .unwrap()
        .with_local_tokenizer(std::path::Path::new("/nonexistent/m.gguf"), None)
        .err()
        .expect("no such file");
    assert!(
        format!("{err:#}").contains("/nonexistent/m.gguf"),
        "{err:#}"
    );
}
