//! `minibroker user add|list|delete`: the users file's SCRAM credentials, made from a password
//! read from stdin or a file — never from the command line, where `ps` and shell history would
//! keep it. The file holds no password (`minibroker_security::users`).

use anyhow::{Context, Result, bail};
use minibroker_security::{
    DEFAULT_ITERATIONS, ScramCredential, ScramMechanism, Users, check_user_name,
};
use serde_json::json;
use std::io::Read;
use std::path::PathBuf;

/// Flags of `user`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Subcommand,
}

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    /// Adds a user, or replaces its credential for the mechanism.
    Add {
        /// The user's name.
        name: String,
        /// The users file (created if missing, readable by its owner only).
        #[arg(long)]
        users_file: PathBuf,
        /// SCRAM-SHA-256 or SCRAM-SHA-512; both when not given.
        #[arg(long)]
        mechanism: Option<String>,
        /// PBKDF2 iterations, 4096 to 16384.
        #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
        iterations: u32,
        /// Read the password from standard input (its first line).
        #[arg(long, conflicts_with = "password_file")]
        password_stdin: bool,
        /// Read the password from this file (its first line).
        #[arg(long)]
        password_file: Option<PathBuf>,
    },
    /// Every user and its mechanisms.
    List {
        /// The users file.
        #[arg(long)]
        users_file: PathBuf,
        /// JSON lines instead of text: one line, {"users": [{"user", "mechanism", "iterations"}, ...]}.
        #[arg(long)]
        json: bool,
    },
    /// Removes a user's credential for a mechanism, or all of them.
    Delete {
        /// The user's name.
        name: String,
        /// The users file.
        #[arg(long)]
        users_file: PathBuf,
        /// Only this mechanism's credential.
        #[arg(long)]
        mechanism: Option<String>,
    },
}

/// The mechanisms `name` names (both when `None`).
fn mechanisms(name: Option<&str>) -> Result<Vec<ScramMechanism>> {
    match name {
        None => Ok(ScramMechanism::ALL.to_vec()),
        Some(name) => match ScramMechanism::from_name(&name.to_ascii_uppercase()) {
            Some(mechanism) => Ok(vec![mechanism]),
            None => bail!("unknown mechanism {name:?}: SCRAM-SHA-256 or SCRAM-SHA-512"),
        },
    }
}

/// The password's first line, from stdin or a file.
fn read_password(stdin: bool, file: Option<&PathBuf>) -> Result<Vec<u8>> {
    let text = match (stdin, file) {
        (true, _) => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the password from stdin")?;
            text
        }
        (false, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the password from {}", path.display()))?,
        (false, None) => bail!(
            "give the password with --password-stdin or --password-file (never on the command line)"
        ),
    };
    let password = text.lines().next().unwrap_or_default();
    if password.is_empty() {
        bail!("the password is empty");
    }
    Ok(password.as_bytes().to_vec())
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        Subcommand::Add {
            name,
            users_file,
            mechanism,
            iterations,
            password_stdin,
            password_file,
        } => {
            check_user_name(&name)?;
            let mechanisms = mechanisms(mechanism.as_deref())?;
            let password = read_password(password_stdin, password_file.as_ref())?;
            let mut users = Users::load(&users_file)?;
            for mechanism in &mechanisms {
                let credential = ScramCredential::generate(*mechanism, &password, iterations)?;
                users.set(&name, *mechanism, credential);
            }
            users.save(&users_file)?;
            let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
            println!(
                "user {name}: {} credential(s) saved in {}",
                names.join(" and "),
                users_file.display()
            );
            Ok(())
        }
        Subcommand::List { users_file, json } => {
            let users = Users::load(&users_file)?;
            if json {
                let listed: Vec<_> = users
                    .list()
                    .map(|(name, mechanism, iterations)| {
                        json!({"user": name, "mechanism": mechanism.name(), "iterations": iterations})
                    })
                    .collect();
                println!("{}", json!({ "users": listed }));
            } else {
                println!("{:<32} {:<14} ITERATIONS", "USER", "MECHANISM");
                for (name, mechanism, iterations) in users.list() {
                    println!("{name:<32} {:<14} {iterations}", mechanism.name());
                }
            }
            Ok(())
        }
        Subcommand::Delete {
            name,
            users_file,
            mechanism,
        } => {
            let mut users = Users::load(&users_file)?;
            let only = match mechanism.as_deref() {
                None => None,
                Some(name) => mechanisms(Some(name))?.first().copied(),
            };
            let removed = users.remove(&name, only);
            if removed == 0 {
                bail!(
                    "no such user credential in {}: {name}",
                    users_file.display()
                );
            }
            users.save(&users_file)?;
            println!("user {name}: {removed} credential(s) removed");
            Ok(())
        }
    }
}
