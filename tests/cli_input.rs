//! Bad command-line input ends in a clear error and exit 2, never a panic.

use std::process::Command;

fn quire(args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("quire runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn huge_deadlines_are_refused_not_a_panic() {
    for d in ["1e30", "inf", "1e400", "99999999999999999999h"] {
        let (code, err) = quire(&["translate", "--dry-run", "--deadline", d]);
        assert_eq!(code, 2, "--deadline {d}: {err}");
        assert!(err.contains("--deadline"), "--deadline {d}: {err}");
        assert!(!err.contains("panicked"), "--deadline {d}: {err}");
    }
    let (code, err) = quire(&["translate", "--dry-run", "--deadline", "20m"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn unsupported_languages_are_refused_with_the_supported_ones() {
    for to in ["xx-YY", "tlh", "!!", "pt-BR", "zh-TW"] {
        let (code, err) = quire(&["translate", "--dry-run", "--to", to]);
        assert_eq!(code, 2, "--to {to}: {err}");
        assert!(
            err.contains("unsupported language --to")
                && err.contains("en → zh-CN, ja, ko, de, fr, es"),
            "{err}"
        );
    }
    let (code, err) = quire(&["translate", "--dry-run", "--from", "de", "--to", "fr"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unsupported language pair de → fr"), "{err}");
    for (from, to) in [
        ("en", "zh"),
        ("en", "zh-Hans"),
        ("en-US", "ja"),
        ("en", "de-DE"),
        ("zh-CN", "en"),
    ] {
        let (code, err) = quire(&["translate", "--dry-run", "--from", from, "--to", to]);
        assert_eq!(code, 0, "{from} → {to}: {err}");
    }
}

#[test]
fn empty_and_conflicting_glossaries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let g = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let empty = g("empty.json", "");
    let (code, err) = quire(&["translate", "--dry-run", "--glossary", &empty]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("empty.json") && err.contains("is empty"),
        "{err}"
    );
    let conflict = g(
        "conflict.json",
        r#"[{"en": "token", "zh": "词元"}, {"en": "Token", "zh": "令牌"}]"#,
    );
    let (code, err) = quire(&["translate", "--dry-run", "--glossary", &conflict]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("conflict.json") && err.contains("term #2") && err.contains("term #1"),
        "{err}"
    );
    let same = g(
        "same.json",
        r#"[{"en": "token", "zh": "词元"}, {"en": "token", "zh": "词元"}]"#,
    );
    let (code, err) = quire(&["translate", "--dry-run", "--glossary", &same]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn units_too_large_for_a_reply_are_clamped() {
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("long.md");
    let para = "The cache is stored on disk, so a restart of the server costs only twelve milliseconds and no recomputation.";
    std::fs::write(&book, vec![para; 61].join("\n\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("translate")
        .arg(&book)
        .args(["--dry-run", "--unit-tokens", "100000", "--out"])
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--unit-tokens 100000 → 496"), "{err}");
    let plan = String::from_utf8_lossy(&out.stdout);
    let sizes: Vec<usize> = plan
        .lines()
        .filter_map(|l| l.split("translate ~").nth(1))
        .filter_map(|r| r.split(' ').next()?.parse().ok())
        .collect();
    assert!(sizes.len() > 1 && sizes.iter().all(|&n| n <= 496), "{plan}");
}

#[test]
fn a_failed_run_leaves_no_empty_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["translate", "--model", "/nonexistent/model.gguf", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists(), "{} left behind", out.display());
}

#[test]
fn an_instruction_set_the_cpu_lacks_is_refused_before_anything_loads() {
    #[cfg(target_arch = "x86_64")]
    let has_avx512 = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni");
    #[cfg(not(target_arch = "x86_64"))]
    let has_avx512 = false;
    let out = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args([
            "bench",
            "engine",
            "--isa",
            "avx512",
            "-m",
            "/no/such/model.gguf",
        ])
        .output()
        .expect("quire runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    if has_avx512 {
        // The CPU has it: the next thing checked is the model.
        assert!(err.contains("/no/such/model.gguf"), "{err}");
    } else {
        assert!(
            err.contains("--isa avx512 needs") && err.contains("use --isa"),
            "{err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["bench", "engine", "--isa", "sse9"])
        .output()
        .expect("quire runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("avx2") && err.contains("avx512"), "{err}");
}
