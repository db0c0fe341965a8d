//! SASL logins, for every listener that asks for them: the settings (mechanisms offered, the
//! users file, the failure delay, the session lifetime) and one connection's [`Session`] — where
//! it is in its login, who it logged in as, when its session ends.
//!
//! The exchange is the one Kafka's `SaslServerAuthenticator` runs: a mechanism is chosen
//! (SCRAM-SHA-256, SCRAM-SHA-512, or PLAIN when offered), then its tokens come one by one:
//! PLAIN's one message, or SCRAM's client-first and client-final
//! (`minibroker_security::ScramExchange`). A failed login is answered after
//! `auth_failure_delay_ms`, and the caller closes the connection. PLAIN's check costs a PBKDF2,
//! so it runs on a blocking thread. A login takes one of the user's
//! `max_connections_per_principal` slots for the connection's life; with a session lifetime
//! (KIP-368) the connection logs in again before it ends, as the same user. The Kafka listener
//! frames these steps as SaslHandshake and SaslAuthenticate, the native one as Authenticate.

use bytes::Bytes;
use minibroker_security::{Reloading, ScramExchange, ScramMechanism, Users, UsersFileError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::Config;
use minibroker_net::quotas::{Held, Quota};

/// How many SASL logins the listeners saw succeed and fail.
#[derive(Debug, Default)]
pub struct LoginCounts {
    /// Logins that succeeded.
    pub succeeded: AtomicU64,
    /// Logins refused: a wrong password, an unknown user, a malformed exchange.
    pub failed: AtomicU64,
}

impl LoginCounts {
    /// Counts one login, `ok` or not.
    pub fn count(&self, ok: bool) {
        let counter = if ok { &self.succeeded } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A mechanism a listener offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// PLAIN (RFC 4616), checked against the user's SCRAM credential.
    Plain,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram(ScramMechanism),
}

impl Mechanism {
    /// The mechanism of a SASL name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Self::Plain),
            name => ScramMechanism::from_name(name).map(Self::Scram),
        }
    }

    /// Its SASL name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::Scram(mechanism) => mechanism.name(),
        }
    }
}

/// What the listeners need to log clients in.
#[derive(Debug)]
pub struct SaslSettings {
    /// The mechanisms offered, in the configured order.
    pub mechanisms: Vec<Mechanism>,
    /// The users file, read again when it changes (a user added or removed needs no restart).
    users: Reloading<Users>,
    /// What an unknown user's stand-in salt is made from: the same for the broker's life.
    secret: [u8; 32],
    /// How long a failed login waits for its answer.
    pub failure_delay: Duration,
    /// How long a login lasts before the client must re-authenticate (KIP-368); `None`: for
    /// the connection's life.
    pub session_lifetime: Option<Duration>,
}

impl SaslSettings {
    /// The settings of `config`, its users file read: `None` when no listener asks for a login.
    ///
    /// # Errors
    /// The users file cannot be read, or a line of it does not.
    pub fn from_config(config: &Config) -> Result<Option<Self>, UsersFileError> {
        let net = &config.net;
        if !net.kafka_security_protocol.uses_sasl() && !net.listen_security_protocol.uses_sasl() {
            return Ok(None);
        }
        let users = Reloading::open(net.users_file.clone(), Users::load)?;
        let mut secret = [0u8; 32];
        // Without a random source the secret stays zero: stand-in salts are then guessable per
        // name, which tells nothing a login could not.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        Ok(Some(Self {
            mechanisms: net
                .sasl_enabled_mechanisms
                .iter()
                .filter_map(|name| Mechanism::from_name(name))
                .collect(),
            users,
            secret,
            failure_delay: Duration::from_millis(net.auth_failure_delay_ms),
            session_lifetime: (net.sasl_session_lifetime_ms > 0)
                .then(|| Duration::from_millis(net.sasl_session_lifetime_ms)),
        }))
    }

    /// The users as the file says now.
    #[must_use]
    pub fn users(&self) -> Arc<Users> {
        self.users.current()
    }

    /// The names of the mechanisms offered, in order.
    #[must_use]
    pub fn mechanism_names(&self) -> Vec<&'static str> {
        self.mechanisms.iter().map(|m| m.name()).collect()
    }

    /// Applies `edit` to the users file as it is now on disk, saves it, and holds the result
    /// at once.
    ///
    /// # Errors
    /// [`UsersFileError`] when there is no users file, or it cannot be read or written.
    pub fn edit_users<R>(&self, edit: impl FnOnce(&mut Users) -> R) -> Result<R, UsersFileError> {
        self.users.edit("users_file", Users::save, edit)
    }
}

/// Where a connection is in its login.
#[derive(Debug, Default)]
enum Login {
    /// A listener without SASL: no login.
    #[default]
    NotAsked,
    /// Waiting for the mechanism.
    Waiting,
    /// The mechanism is chosen; waiting for its first token.
    Chose(Mechanism),
    /// SCRAM's client-first is answered; waiting for client-final.
    Scram(Box<ScramExchange>),
    /// Logged in as this user.
    As(String),
}

/// The answer to a mechanism asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Chosen: its tokens come next.
    Chosen,
    /// Not offered (the answer lists those that are).
    Unsupported,
    /// Not now: the listener asks for no login, or one is under way, or done without a
    /// session lifetime.
    IllegalState,
}

/// What one token of a login led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The exchange goes on: this is the server's answer (SCRAM's server-first).
    Challenge(Vec<u8>),
    /// Logged in as `user`; `last` is the server's final token (SCRAM's server-final), and
    /// the session lasts `lifetime` (`None`: for the connection's life).
    LoggedIn {
        /// The user.
        user: String,
        /// The server's last token.
        last: Vec<u8>,
        /// How long the session lasts.
        lifetime: Option<Duration>,
    },
    /// Refused, after the failure delay: the connection is to close.
    Failed(String),
    /// A token before a mechanism was chosen, or on a listener without logins.
    IllegalState,
}

/// A session lifetime as the wire says it: milliseconds, 0 for the connection's life.
#[must_use]
pub fn lifetime_ms(lifetime: Option<Duration>) -> u64 {
    lifetime.map_or(0, |l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX))
}

/// One connection's login; see the module docs.
#[derive(Debug)]
pub struct Session {
    settings: Option<Arc<SaslSettings>>,
    login: Login,
    /// The user logged in before a re-authentication began: the new login must be the same.
    reauthenticating: Option<String>,
    /// When the session ends (KIP-368), if it does.
    ends: Option<Instant>,
    per_principal: Arc<Quota<String>>,
    /// This connection's slot among its user's connections, once logged in.
    slot: Option<Held<String>>,
    logins: Arc<LoginCounts>,
}

impl Session {
    /// A connection's session on a listener that asks for a login with `settings` (`None`:
    /// one that does not), counting logins in `logins` and taking slots of `per_principal`.
    #[must_use]
    pub fn new(
        settings: Option<Arc<SaslSettings>>,
        logins: Arc<LoginCounts>,
        per_principal: Arc<Quota<String>>,
    ) -> Self {
        Self {
            login: if settings.is_some() {
                Login::Waiting
            } else {
                Login::NotAsked
            },
            settings,
            reauthenticating: None,
            ends: None,
            per_principal,
            slot: None,
            logins,
        }
    }

    /// The settings, when the listener asks for logins.
    #[must_use]
    pub fn settings(&self) -> Option<&Arc<SaslSettings>> {
        self.settings.as_ref()
    }

    /// Whether requests other than the login's may be served.
    #[must_use]
    pub fn lets_through(&self) -> bool {
        matches!(self.login, Login::NotAsked | Login::As(_))
    }

    /// Whether the next step names the mechanism: before a login, or (a re-authentication)
    /// after one.
    #[must_use]
    pub fn expects_mechanism(&self) -> bool {
        matches!(self.login, Login::Waiting | Login::As(_))
    }

    /// Whether the session is past its lifetime without a new login.
    #[must_use]
    pub fn expired(&self) -> bool {
        self.ends.is_some_and(|ends| Instant::now() >= ends)
    }

    /// Chooses the mechanism named `name` for the next tokens.
    pub fn choose(&mut self, name: &str) -> Choice {
        let Some(settings) = &self.settings else {
            return Choice::IllegalState;
        };
        let reauthenticating = match &self.login {
            // KIP-368: a logged-in connection logs in again, as the same user, when its
            // session has a lifetime.
            Login::As(user) if settings.session_lifetime.is_some() => Some(user.clone()),
            Login::Waiting => None,
            _ => return Choice::IllegalState,
        };
        match Mechanism::from_name(name).filter(|m| settings.mechanisms.contains(m)) {
            Some(mechanism) => {
                self.login = Login::Chose(mechanism);
                self.reauthenticating = reauthenticating;
                Choice::Chosen
            }
            None => {
                tracing::info!(mechanism = name, "a SASL mechanism not offered");
                Choice::Unsupported
            }
        }
    }

    /// Takes the login's next token.
    pub async fn step(&mut self, token: Bytes) -> Step {
        let Some(settings) = self.settings.clone() else {
            return Step::IllegalState;
        };
        let stepped = match std::mem::take(&mut self.login) {
            Login::Chose(Mechanism::Plain) => self.plain(&settings, token).await,
            Login::Chose(Mechanism::Scram(mechanism)) => {
                self.scram_first(&settings, mechanism, &token)
            }
            Login::Scram(exchange) => match exchange.finish(&token) {
                Ok(done) => self.logged_in(&settings, done.user, "SCRAM", done.server_final),
                Err(error) => {
                    tracing::info!(%error, "a SCRAM login failed");
                    Step::Failed(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM"
                            .into(),
                    )
                }
            },
            other => {
                self.login = other;
                return Step::IllegalState;
            }
        };
        match &stepped {
            Step::Failed(_) => {
                self.logins.count(false);
                tokio::time::sleep(settings.failure_delay).await;
            }
            Step::LoggedIn { .. } => self.logins.count(true),
            _ => {}
        }
        stepped
    }

    async fn plain(&mut self, settings: &Arc<SaslSettings>, token: Bytes) -> Step {
        let refused = || Step::Failed("Authentication failed: Invalid username or password".into());
        let (user, password) = match minibroker_security::parse_plain(&token) {
            Ok(parts) => parts,
            Err(error) => {
                tracing::info!(%error, "a PLAIN login failed");
                return refused();
            }
        };
        let checked = {
            let (users, user) = (settings.users(), user.clone());
            tokio::task::spawn_blocking(move || users.verify_plain(&user, &password))
                .await
                .unwrap_or(false)
        };
        if !checked {
            tracing::info!(user, "a PLAIN login failed");
            return refused();
        }
        self.logged_in(settings, user, "PLAIN", Vec::new())
    }

    fn scram_first(
        &mut self,
        settings: &SaslSettings,
        mechanism: ScramMechanism,
        token: &[u8],
    ) -> Step {
        let nonce = match minibroker_security::server_nonce() {
            Ok(nonce) => nonce,
            Err(error) => return Step::Failed(error.to_string()),
        };
        let users = settings.users();
        let started = ScramExchange::start(
            mechanism,
            token,
            |user| users.credential(user, mechanism).cloned(),
            &settings.secret,
            &nonce,
        );
        match started {
            Ok((exchange, server_first)) => {
                self.login = Login::Scram(Box::new(exchange));
                Step::Challenge(server_first)
            }
            Err(error) => {
                tracing::info!(%error, "a SCRAM login failed");
                Step::Failed(format!("Authentication failed: {error}"))
            }
        }
    }

    fn logged_in(
        &mut self,
        settings: &SaslSettings,
        user: String,
        how: &str,
        last: Vec<u8>,
    ) -> Step {
        match self.reauthenticating.take() {
            Some(before) if before != user => {
                tracing::info!(before, user, "a re-authentication as another user; closing");
                return Step::Failed("Re-authentication as a different user is not allowed".into());
            }
            Some(_) => tracing::info!(user, mechanism = how, "re-authenticated"),
            None => {
                let Some(slot) = self.per_principal.take(format!("User:{user}")) else {
                    tracing::info!(
                        user,
                        "the user holds max_connections_per_principal already; login refused"
                    );
                    return Step::Failed("Too many connections for this user".into());
                };
                self.slot = Some(slot);
                tracing::info!(user, mechanism = how, "authenticated");
            }
        }
        self.login = Login::As(user.clone());
        self.ends = settings
            .session_lifetime
            .map(|lifetime| Instant::now() + lifetime);
        Step::LoggedIn {
            user,
            last,
            lifetime: settings.session_lifetime,
        }
    }
}
