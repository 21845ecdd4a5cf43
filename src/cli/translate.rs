//! `quire translate`: translate a Markdown book on this device.

/// Arguments of `quire translate`.
#[derive(clap::Args, Debug)]
pub struct TranslateArgs {}

/// Run `quire translate`.
pub fn run(_args: TranslateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
