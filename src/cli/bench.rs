//! `quire bench engine|prefix`: measurements printed side by side.

/// Arguments of `quire bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

/// Run `quire bench`.
pub fn run(_args: BenchArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
