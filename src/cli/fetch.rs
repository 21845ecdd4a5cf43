//! `quire fetch [NAME...]`: download and verify known models.

use crate::model_store::{fetch_model, Manifest};
use anyhow::{bail, Result};

/// Arguments of `quire fetch`.
#[derive(clap::Args, Debug)]
pub struct FetchArgs {
    /// Model names from models/manifest.json (default: the default model); `all` for every one.
    pub names: Vec<String>,
    /// Print only the resulting paths.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Run `quire fetch`.
pub fn run(args: FetchArgs) -> Result<i32> {
    let manifest = Manifest::builtin()?;
    let store = super::store_config();
    let names: Vec<String> = if args.names.is_empty() {
        vec![manifest.default.clone()]
    } else if args.names.iter().any(|n| n == "all") {
        manifest.models.iter().map(|m| m.name.clone()).collect()
    } else {
        args.names.clone()
    };
    for name in names {
        let Some(entry) = manifest.get(&name) else {
            bail!("unknown model {name:?}; known models: {}", manifest.names());
        };
        let path = fetch_model(&store, entry, args.quiet)?;
        println!("{}", path.display());
    }
    Ok(0)
}
