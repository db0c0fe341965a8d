//! `minibroker certificates --out DIR`: a certificate authority, a server certificate for the
//! names clients dial, and client certificates, for a TLS listener (`tls_cert`, `tls_key`,
//! `tls_client_ca`) — so securing a broker needs no openssl recipe. Existing files are never
//! overwritten; private keys are readable by their owner only.

use anyhow::{Context, Result, bail};
use minibroker_security::pki::{Authority, Role, Validity};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Flags of `certificates`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory to write ca.pem, ca.key, server.pem, server.key and client-NAME.pem/.key
    /// into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// A name the server certificate is valid for: a DNS name or an IP address, as clients dial
    /// it (repeat for more).
    #[arg(long = "host", default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned()])]
    hosts: Vec<String>,
    /// A client certificate to make, for this principal (User:NAME; repeat for more).
    #[arg(long = "client")]
    clients: Vec<String>,
    /// Validity: at least this many years from today.
    #[arg(long, default_value_t = 1)]
    years: u16,
}

pub fn run(args: &Args) -> Result<()> {
    if args.hosts.is_empty() {
        bail!("give at least one --host");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let validity = Validity::Years(args.years);
    let authority = Authority::new("minibroker CA", validity)?;
    let server = authority.issue(Role::Server, &args.hosts[0], &args.hosts, validity)?;
    let mut files = vec![
        ("ca.pem".to_owned(), authority.certificate_pem(), false),
        ("ca.key".to_owned(), authority.key_pem().to_owned(), true),
        ("server.pem".to_owned(), server.certificate_pem, false),
        ("server.key".to_owned(), server.key_pem, true),
    ];
    for name in &args.clients {
        minibroker_security::check_user_name(name)?;
        let client = authority.issue(Role::Client, name, &[], validity)?;
        files.push((format!("client-{name}.pem"), client.certificate_pem, false));
        files.push((format!("client-{name}.key"), client.key_pem, true));
    }
    if let Some((name, _, _)) = files
        .iter()
        .find(|(name, _, _)| args.out.join(name).exists())
    {
        bail!(
            "{} exists; not overwriting it",
            args.out.join(name).display()
        );
    }
    for (name, text, private) in &files {
        write_new(&args.out.join(name), text, *private)?;
    }
    println!(
        "wrote ca.pem, server.pem and server.key (for {}){} in {}\n\
         broker: tls_cert = \"server.pem\", tls_key = \"server.key\"; clients trust ca.pem; keep ca.key away from the broker",
        args.hosts.join(", "),
        if args.clients.is_empty() {
            String::new()
        } else {
            format!(", and client certificates for {}", args.clients.join(", "))
        },
        args.out.display()
    );
    Ok(())
}

/// Writes a new file (never an existing one), readable by its owner only when `private`.
fn write_new(path: &Path, text: &str, private: bool) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}
