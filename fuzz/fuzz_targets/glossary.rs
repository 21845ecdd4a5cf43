//! Glossary parsing (JSON and TOML) and duplicate validation never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quire::glossary::Glossary;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for g in [
            Glossary::parse_json(text, "en", "zh-CN"),
            Glossary::parse_toml(text, "en", "zh-CN"),
        ]
        .into_iter()
        .flatten()
        {
            let _ = g.without_duplicates();
        }
    }
});
