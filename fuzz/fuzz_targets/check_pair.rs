//! QA never panics: arbitrary source/translation pairs (split at the first NUL byte).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire::checks::{check_pair, CheckContext};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = s.split_once('\0').unwrap_or((s, s));
    let _ = check_pair(a, b, &CheckContext::default());
});
