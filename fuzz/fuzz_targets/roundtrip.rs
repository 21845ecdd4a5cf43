//! Arbitrary bytes → (UTF-8 decode | clear error) → segmentation → placeholder restore →
//! reassembly must reproduce the input byte for byte, at several token budgets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire::book::{decode_markdown, Chapter};
use quire::units::{reassemble, restore_placeholders, segment_chapter, EstimateTokens, UnitKind};
use std::path::{Path, PathBuf};

fuzz_target!(|data: &[u8]| {
    let text = match decode_markdown(Path::new("fuzz.md"), data.to_vec()) {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(
                msg.contains("fuzz.md") && msg.contains("byte offset"),
                "{msg}"
            );
            return;
        }
    };
    let chapter = Chapter {
        rel_path: PathBuf::from("fuzz.md"),
        text,
    };
    for budget in [0usize, 7, 64, 4096] {
        let units =
            segment_chapter(&chapter, budget, &EstimateTokens).expect("segmentation never fails");
        let joined: String = units.iter().map(|u| u.source.as_str()).collect();
        assert_eq!(joined, chapter.text);
        let restored: Vec<String> = units
            .iter()
            .map(|u| restore_placeholders(u, &u.protected).expect("own placeholders restore"))
            .collect();
        for (u, r) in units.iter().zip(&restored) {
            if u.kind == UnitKind::Translate {
                assert_eq!(r, u.source.trim());
            }
        }
        assert_eq!(reassemble(&units, &restored), chapter.text);
    }
});
