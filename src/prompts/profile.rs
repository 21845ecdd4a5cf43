//! Prompt profiles: which prompts the translation agent sends, per model family. Quire's
//! own prompt (the translation guide, the glossary, line-by-line instructions) is written
//! for general instruction-tuned models; a dedicated translation model was trained on its
//! authors' short, documented prompt formats and gets those instead
//! ([`super::agents::translate_prompt_for`]).

use crate::engine::gguf::GgufFile;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The prompts the translation agent sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptProfile {
    /// Quire's guide-led prompt (`templates/translate_system.j2`, `translate_user.j2`), for
    /// instruction-tuned models.
    #[default]
    Guide,
    /// The prompt Tencent documents for its translation models (Hunyuan-MT, HY-MT1.5,
    /// Hy-MT2): one user message, no system message, terms in its terminology-intervention
    /// format (`templates/translate_hy_mt.j2`).
    HyMt,
}

/// `--prompt-profile`: a profile, or `auto`, chosen from the model's GGUF metadata
/// ([`PromptProfile::for_gguf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProfileChoice {
    /// From the model: `hy-mt` for a Hunyuan translation model, else `guide`.
    #[default]
    Auto,
    /// Quire's guide-led prompt.
    Guide,
    /// The Hunyuan translation models' documented prompt.
    HyMt,
}

impl PromptProfile {
    /// The profile's name as the CLI spells it (`guide`, `hy-mt`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Guide => "guide",
            Self::HyMt => "hy-mt",
        }
    }

    /// The profile for a model of `architecture` named `names` (`general.name`,
    /// `general.basename`, ...): `HyMt` for the Hunyuan dense architecture (the one Tencent's
    /// translation models use; a general Hunyuan chat model takes `--prompt-profile guide`)
    /// or a name that says Hunyuan-MT / HY-MT (in any case and spacing: "HY MT1.5 1.8B",
    /// "Hunyuan-MT-7B"); `Guide` otherwise.
    pub fn detect(architecture: &str, names: &[&str]) -> Self {
        if architecture == "hunyuan-dense" || names.iter().any(|n| names_hunyuan_mt(n)) {
            Self::HyMt
        } else {
            Self::Guide
        }
    }

    /// The profile for a loaded GGUF's metadata ([`Self::detect`]).
    pub fn for_gguf(gguf: &GgufFile) -> Self {
        let names: Vec<&str> = ["general.name", "general.basename", "general.finetune"]
            .iter()
            .filter_map(|k| gguf.meta_str(k).ok())
            .collect();
        Self::detect(gguf.architecture().unwrap_or_default(), &names)
    }

    /// The profile for the GGUF file at `path` (its metadata only; no weights are read).
    pub fn for_model_file(path: &Path) -> Result<Self> {
        Ok(Self::for_gguf(&GgufFile::open(path)?))
    }
}

impl ProfileChoice {
    /// The profile to use: the one chosen, or for `auto` the one of the model at `model`
    /// (`Guide` without a local model file, e.g. a server's model).
    pub fn resolve(self, model: Option<&Path>) -> Result<PromptProfile> {
        Ok(match (self, model) {
            (Self::Guide, _) => PromptProfile::Guide,
            (Self::HyMt, _) => PromptProfile::HyMt,
            (Self::Auto, Some(path)) => PromptProfile::for_model_file(path)?,
            (Self::Auto, None) => PromptProfile::Guide,
        })
    }
}

/// Whether a model name says Hunyuan-MT or HY-MT: a word `hy` or `hunyuan` followed by a
/// word starting with `mt`, or a word starting with `hymt`.
fn names_hunyuan_mt(name: &str) -> bool {
    let words: Vec<String> = name
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    words.iter().any(|w| w.starts_with("hymt"))
        || words
            .windows(2)
            .any(|p| (p[0] == "hy" || p[0] == "hunyuan") && p[1].starts_with("mt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_follows_the_model() {
        use PromptProfile::*;
        assert_eq!(PromptProfile::detect("hunyuan-dense", &[]), HyMt);
        for name in [
            "HY MT1.5 1.8B",
            "HY-MT1.5-7B",
            "Hunyuan-MT-7B",
            "Hy MT2 1.8B",
            "hymt15",
        ] {
            assert_eq!(PromptProfile::detect("llama", &[name]), HyMt, "{name}");
        }
        for name in [
            "Qwen2.5 Coder 1.5B Instruct",
            "gemma-3-270m",
            "Hunyuan 7B Instruct",
        ] {
            assert_eq!(PromptProfile::detect("qwen2", &[name]), Guide, "{name}");
        }
        assert_eq!(PromptProfile::detect("qwen3", &[]), Guide);
        assert_eq!(PromptProfile::detect("gemma3", &["Why Mt. Fuji"]), Guide);
    }

    #[test]
    fn a_chosen_profile_needs_no_model() {
        let none = None;
        assert_eq!(
            ProfileChoice::Auto.resolve(none).unwrap(),
            PromptProfile::Guide
        );
        assert_eq!(
            ProfileChoice::HyMt.resolve(none).unwrap(),
            PromptProfile::HyMt
        );
        let missing = Path::new("/nonexistent/model.gguf");
        assert_eq!(
            ProfileChoice::Guide.resolve(Some(missing)).unwrap(),
            PromptProfile::Guide
        );
        assert!(ProfileChoice::Auto.resolve(Some(missing)).is_err());
        assert_eq!(PromptProfile::HyMt.name(), "hy-mt");
        use clap::ValueEnum;
        assert_eq!(
            ProfileChoice::from_str("hy-mt", false).unwrap(),
            ProfileChoice::HyMt
        );
    }
}
