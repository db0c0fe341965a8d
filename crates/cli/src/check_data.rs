//! `minibroker check-data --data-dir DIR`: reads every file of a stopped broker's data
//! directory and reports damage; exits non-zero if there is any.

use anyhow::{Result, bail};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `check-data`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The data directory (of a stopped broker: its lock is taken).
    #[arg(long)]
    data_dir: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let report = minibroker_broker::data_dir_check::check_data_dir(&args.data_dir, |data| {
        let mut checked = minibroker_groups::check_offsets_files(data);
        checked.extend(minibroker_transactions::TransactionLog::check(
            &**data.storage(),
            data.root(),
        ));
        // Which principal owns which producer id (a broker with authorisation on).
        let owners = data.root().join("producer-owners");
        if owners.exists() {
            let damage = minibroker_security::ProducerOwners::check(&owners).err();
            checked.push((owners, damage.map(|error| error.to_string())));
        }
        checked
    })?;
    let mut out = std::io::stdout().lock();
    for finding in &report.findings {
        let kind = if finding.damage { "DAMAGED" } else { "note" };
        writeln!(out, "{kind} {}: {}", finding.path.display(), finding.what)?;
    }
    let damaged = report.findings.iter().filter(|f| f.damage).count();
    writeln!(
        out,
        "checked {} files ({} batches): {damaged} damaged",
        report.files, report.batches
    )?;
    if report.is_damaged() {
        bail!("{damaged} damaged files in {}", args.data_dir.display());
    }
    Ok(())
}
