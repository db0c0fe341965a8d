//! How the CLI's commands reach a native listener: plainly, or — with `--tls-ca` and
//! `--login-user` — in a TLS session and logged in, as a broker whose `listen_security_protocol`
//! is `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` asks. The flags are global: every command that
//! speaks the native protocol (`send`, `produce`, `consume`, `topic`, `producers`,
//! `init-producer`, `describe-producers`, `verify --broker`) uses them.

use anyhow::{Context, Result, bail};
use minibroker_client::{ClientConfig, ClientTls, Credentials, LoginMechanism};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The global connection flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Security {
    /// Speak TLS to the native listener, trusting the CA in this PEM file.
    #[arg(long, global = true, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// The name the broker's certificate must hold (default: the host of the broker address).
    #[arg(long, global = true, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// Log in to the native listener as this user (a user of the broker's users file).
    #[arg(long, global = true, value_name = "NAME")]
    login_user: Option<String>,
    /// The user's password: this file's first line (never on the command line).
    #[arg(long, global = true, value_name = "FILE")]
    login_password_file: Option<PathBuf>,
    /// SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN.
    #[arg(long, global = true, default_value = "SCRAM-SHA-512")]
    login_mechanism: String,
}

static SECURITY: OnceLock<Security> = OnceLock::new();

/// Keeps the flags for [`client_config`].
pub fn set(security: Security) {
    let _ = SECURITY.set(security);
}

/// The client settings to reach the native listener at `broker` (`HOST:PORT`) with.
///
/// # Errors
/// A CA or password file that cannot be read, or flags that do not go together.
pub fn client_config(broker: &str) -> Result<ClientConfig> {
    let security = SECURITY.get().cloned().unwrap_or_default();
    let tls = match &security.tls_ca {
        None => None,
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading --tls-ca {}", path.display()))?;
            let config = minibroker_host::tls::client_config_from_pem(&pem)?;
            let name = match &security.tls_server_name {
                Some(name) => name.clone(),
                None => broker
                    .rsplit_once(':')
                    .map_or(broker, |(host, _)| host)
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
            };
            let server_name =
                minibroker_host::rustls::pki_types::ServerName::try_from(name.clone())
                    .with_context(|| format!("{name:?} is not a name a certificate can hold"))?;
            Some(ClientTls {
                config,
                server_name,
            })
        }
    };
    let login = match (&security.login_user, &security.login_password_file) {
        (None, None) => None,
        (Some(user), Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --login-password-file {}", path.display()))?;
            let password = text.lines().next().unwrap_or_default();
            if password.is_empty() {
                bail!(
                    "--login-password-file {}: its first line is empty",
                    path.display()
                );
            }
            let mechanism =
                LoginMechanism::from_name(&security.login_mechanism.to_ascii_uppercase())
                    .with_context(|| {
                        format!(
                            "unknown --login-mechanism {:?}: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN",
                            security.login_mechanism
                        )
                    })?;
            Some(Credentials {
                mechanism,
                user: user.clone(),
                password: password.as_bytes().to_vec(),
            })
        }
        _ => bail!("--login-user and --login-password-file go together"),
    };
    Ok(ClientConfig {
        tls,
        login,
        ..ClientConfig::default()
    })
}
