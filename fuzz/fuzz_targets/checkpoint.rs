//! Reading a checkpoint file never panics: whatever the bytes, it loads or is ignored.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quire::translate::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("orchestration_checkpoint.json"), data).expect("write");
    let _ = Checkpoint::load(dir.path());
});
