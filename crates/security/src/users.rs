//! The users file: each user's SCRAM credentials, one line per (user, mechanism), in Kafka's
//! own credential format, so a credential moves between Kafka and minibroker as it is:
//!
//! ```text
//! # comments and blank lines are skipped
//! alice SCRAM-SHA-256 salt=…,stored_key=…,server_key=…,iterations=8192
//! alice SCRAM-SHA-512 salt=…,stored_key=…,server_key=…,iterations=8192
//! ```
//!
//! No password is ever in it. A line that does not read is an error naming the file and the
//! line, never skipped: a broker that dropped a damaged line would lock that user out silently,
//! or keep a credential someone meant to remove. The file is these lines in one checksummed
//! record (magic `\0MBU`, version 1, through [`minibroker_storage`], so the simulated disk
//! crashes it too), replaced atomically (written aside, synced, renamed) and readable by its
//! owner only; a plain text file (older brokers', or one written by hand) is read as it is.

use std::collections::BTreeMap;
use std::path::Path;
use thiserror::Error;

use crate::file::{FileError, load_list, save_list};
use crate::scram::{ScramCredential, ScramError, ScramMechanism};
use minibroker_storage::keyed_lines::KeyedLines;
use minibroker_storage::{FsStorage, Storage};

/// Why the users file could not be read or written.
pub type UsersFileError = FileError;

/// Why a user name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid user name {0:?}: use 1 to 255 characters, none of them blank or a control")]
pub struct InvalidUserName(pub String);

/// Checks a user name: 1 to 255 characters, none whitespace or a control character (the file
/// separates fields by blanks; Kafka allows almost anything, but a name with a blank would not
/// survive its own command line).
///
/// # Errors
/// [`InvalidUserName`].
pub fn check_user_name(name: &str) -> Result<(), InvalidUserName> {
    let bad = name.is_empty()
        || name.chars().count() > 255
        || name.chars().any(|c| c.is_whitespace() || c.is_control());
    if bad {
        return Err(InvalidUserName(name.to_owned()));
    }
    Ok(())
}

/// Every user's credentials, by (name, mechanism).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    credentials: BTreeMap<(String, ScramMechanism), ScramCredential>,
}

impl Users {
    /// The users in `text` (the contents of the file at `path`, named in errors).
    ///
    /// # Errors
    /// [`UsersFileError::Line`] for the first line that does not read.
    pub fn parse(text: &str, path: &Path) -> Result<Self, UsersFileError> {
        let mut users = Self::default();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: String| UsersFileError::Line {
                path: path.to_owned(),
                line: index + 1,
                reason,
            };
            let mut fields = line.split_whitespace();
            let (Some(name), Some(mechanism), Some(credential), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(bad("expected NAME MECHANISM CREDENTIAL".into()));
            };
            check_user_name(name).map_err(|e| bad(e.to_string()))?;
            let mechanism = ScramMechanism::from_name(mechanism).ok_or_else(|| {
                bad(format!(
                    "unknown mechanism {mechanism:?} (SCRAM-SHA-256 or SCRAM-SHA-512)"
                ))
            })?;
            let credential = ScramCredential::parse(mechanism, credential)
                .map_err(|e: ScramError| bad(e.to_string()))?;
            if users
                .credentials
                .insert((name.to_owned(), mechanism), credential)
                .is_some()
            {
                return Err(bad(format!(
                    "{name} has a second {} credential",
                    mechanism.name()
                )));
            }
        }
        Ok(users)
    }

    /// The users of the file at `path`; none when it does not exist.
    ///
    /// # Errors
    /// As [`Self::parse`], or the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, UsersFileError> {
        Self::load_from(&FsStorage, path)
    }

    /// The users of the file at `path` on `storage`; none when it does not exist.
    ///
    /// # Errors
    /// As [`Self::load`].
    pub fn load_from(storage: &dyn Storage, path: &Path) -> Result<Self, UsersFileError> {
        load_list(storage, path, &file(), Self::parse)
    }

    /// The file's text.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = String::from(
            "# minibroker users: NAME MECHANISM CREDENTIAL (Kafka's SCRAM format); no passwords\n",
        );
        for ((name, mechanism), credential) in &self.credentials {
            text.push_str(&format!(
                "{name} {} {}\n",
                mechanism.name(),
                credential.to_kafka_string()
            ));
        }
        text
    }

    /// Replaces the file at `path` with these users, atomically, readable by its owner only.
    ///
    /// # Errors
    /// [`UsersFileError::Io`] when it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), UsersFileError> {
        self.save_to(&FsStorage, path)
    }

    /// [`Self::save`], on `storage`.
    ///
    /// # Errors
    /// As [`Self::save`].
    pub fn save_to(&self, storage: &dyn Storage, path: &Path) -> Result<(), UsersFileError> {
        save_list(storage, path, &file(), &self.to_text())
    }

    /// Sets `name`'s credential for `mechanism` (replacing one it had).
    pub fn set(&mut self, name: &str, mechanism: ScramMechanism, credential: ScramCredential) {
        self.credentials
            .insert((name.to_owned(), mechanism), credential);
    }

    /// Removes `name`'s credential for `mechanism`, or every one of its credentials when
    /// `None`; returns how many went.
    pub fn remove(&mut self, name: &str, mechanism: Option<ScramMechanism>) -> usize {
        let before = self.credentials.len();
        self.credentials
            .retain(|(user, m), _| user != name || mechanism.is_some_and(|wanted| *m != wanted));
        before - self.credentials.len()
    }

    /// `name`'s credential for `mechanism`.
    #[must_use]
    pub fn credential(&self, name: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.credentials.get(&(name.to_owned(), mechanism))
    }

    /// Every (user, mechanism, iterations), by user.
    pub fn list(&self) -> impl Iterator<Item = (&str, ScramMechanism, u32)> {
        self.credentials
            .iter()
            .map(|((name, mechanism), c)| (name.as_str(), *mechanism, c.iterations))
    }

    /// Whether PLAIN's `password` is `name`'s: checked against its SCRAM-SHA-256 credential, or
    /// its SCRAM-SHA-512 one (one PBKDF2 each; run it off the async runtime).
    #[must_use]
    pub fn verify_plain(&self, name: &str, password: &[u8]) -> bool {
        ScramMechanism::ALL.into_iter().any(|mechanism| {
            self.credential(name, mechanism)
                .is_some_and(|c| c.verify_password(mechanism, password))
        })
    }
}

/// The file's records: its lines whole under `\0MBU` version 1 (a line is its own key), readable
/// by its owner only.
fn file() -> KeyedLines {
    KeyedLines::new(b"\0MBU", |line| line).owner_only()
}
