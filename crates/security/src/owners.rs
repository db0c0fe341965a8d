//! Which principal each producer id was issued to — a guarantee no Kafka broker gives.
//!
//! Kafka lets any principal with Write on a topic write with any producer id, and minibroker's
//! epoch bump (KIP-360) lets anyone fence anyone. With authorisation on, the broker records the
//! principal at every InitProducerId and refuses a batch whose producer id was issued to someone
//! else (or to no one), and an epoch bump of another principal's id gets a new id instead. So a
//! zombie or an intruder can neither write as a producer nor fence it.
//!
//! The record survives restarts: a durable broker appends one line per issue to
//! `producer-owners` in its data directory and syncs it before the id is handed out:
//!
//! ```text
//! minibroker producer-owners 2
//! 1000 1796190000000 User:alice 5a1f03c2
//! 1001 1796190000150 User:Jane%20Doe 0b7e91d4
//! ```
//!
//! (id, when issued in ms, principal, and the CRC-32C of what precedes it on the line). The
//! principal is written by [`crate::field`], so any name a login or a certificate gives (`CN=Jane
//! Doe`) reads back as it was. Version 1 files (the principal as it was, which a space broke) are
//! read, with a principal holding spaces taken whole, and rewritten as version 2. A torn
//! last line (a crash mid-append: that id was never handed out) is dropped; any other line that
//! does not read, or whose checksum fails, is an error naming the file and line: a flipped byte
//! must not hand an id to someone else. The file is rewritten, without
//! the forgotten ids, when it has grown to twice what it holds. Each id is kept until
//! `expiration` after it was issued (or last refreshed by use), and at most `max_remembered`
//! ids are kept: beyond that, the principal holding the most ids forgets its least recently
//! used, so one principal taking ids by the thousand cannot make the broker forget another's
//! id in use. A batch with a forgotten id is refused UNKNOWN_PRODUCER_ID, on which Kafka's
//! producers ask for a new id and go on (a never-issued or another principal's id stays an
//! authorisation failure).

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::file::{FileError, read_text, save_atomically};

/// The file's first line: its format and version.
const HEADER: &str = "minibroker producer-owners 2";

/// The first line of version 1, still read: the principal as it was, not encoded.
const HEADER_V1: &str = "minibroker producer-owners 1";

/// How much later a use must be than the last one noted for it to be noted again (an id's
/// place among its owner's least recently used moves at most once a second, not per batch).
const USE_RESOLUTION_MS: i64 = 1_000;

/// Whose a producer id is, to the principal asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Use {
    /// The asking principal's own.
    Owner,
    /// Issued to this other principal.
    Other(String),
    /// Issued once, and forgotten since (past its expiration, or its owner's least recently
    /// used beyond the cap): the producer asks for a new id, as Kafka's producers do when told
    /// UNKNOWN_PRODUCER_ID.
    Forgotten,
    /// Not issued to anyone the broker remembers.
    Nobody,
}

/// Producer id → the principal it was issued to.
#[derive(Debug)]
pub struct ProducerOwners {
    path: Option<PathBuf>,
    max_remembered: usize,
    expiration_ms: i64,
    held: Mutex<Held>,
}

/// One remembered id.
#[derive(Debug)]
struct Owner {
    principal: String,
    /// When its line was last written (issued, or refreshed by use), in ms.
    written_ms: i64,
    /// When it was last used, in ms (to [`USE_RESOLUTION_MS`]); only in memory.
    used_ms: i64,
}

/// The remembered ids, indexed for the two ways one is forgotten: past its expiration (by when
/// its line was written), and beyond the cap, where the principal holding the most ids loses
/// its least recently used (when every principal holds one, the least recently used of all
/// goes). So one principal taking ids by the thousand forgets its own, never another's that is
/// in use.
#[derive(Debug, Default)]
struct Held {
    owners: HashMap<i64, Owner>,
    /// (written_ms, id): expiration, and the file's order.
    by_written: BTreeSet<(i64, i64)>,
    /// (used_ms, id) of every id.
    by_used: BTreeSet<(i64, i64)>,
    /// Each principal's (used_ms, id).
    by_principal: HashMap<String, BTreeSet<(i64, i64)>>,
    /// (ids held, principal): the largest holder is the last.
    by_count: BTreeSet<(usize, String)>,
    /// The highest id ever recorded: an unknown id at or below it was issued and forgotten.
    highest: Option<i64>,
    /// Lines in the file, for knowing when to rewrite it.
    lines: usize,
}

impl Held {
    fn insert(&mut self, id: i64, principal: String, at_ms: i64) {
        self.remove(id);
        self.by_written.insert((at_ms, id));
        self.by_used.insert((at_ms, id));
        let ids = self.by_principal.entry(principal.clone()).or_default();
        ids.insert((at_ms, id));
        let count = ids.len();
        self.by_count.remove(&(count - 1, principal.clone()));
        self.by_count.insert((count, principal.clone()));
        self.highest = self.highest.max(Some(id));
        let owner = Owner {
            principal,
            written_ms: at_ms,
            used_ms: at_ms,
        };
        self.owners.insert(id, owner);
    }

    fn remove(&mut self, id: i64) {
        let Some(owner) = self.owners.remove(&id) else {
            return;
        };
        self.by_written.remove(&(owner.written_ms, id));
        self.by_used.remove(&(owner.used_ms, id));
        let Some(ids) = self.by_principal.get_mut(&owner.principal) else {
            return;
        };
        ids.remove(&(owner.used_ms, id));
        let count = ids.len();
        if count == 0 {
            self.by_principal.remove(&owner.principal);
        }
        self.by_count.remove(&(count + 1, owner.principal.clone()));
        if count > 0 {
            self.by_count.insert((count, owner.principal));
        }
    }

    /// Notes a use of `id` at `now_ms`: it is its owner's most recently used.
    fn used(&mut self, id: i64, now_ms: i64) {
        let Some(owner) = self.owners.get_mut(&id) else {
            return;
        };
        if now_ms.saturating_sub(owner.used_ms) < USE_RESOLUTION_MS {
            return;
        }
        if let Some(ids) = self.by_principal.get_mut(&owner.principal) {
            ids.remove(&(owner.used_ms, id));
            ids.insert((now_ms, id));
        }
        self.by_used.remove(&(owner.used_ms, id));
        self.by_used.insert((now_ms, id));
        owner.used_ms = now_ms;
    }

    fn forget(&mut self, now_ms: i64, expiration_ms: i64, keep: usize) {
        while let Some(&(at, id)) = self.by_written.first() {
            if now_ms.saturating_sub(at) <= expiration_ms {
                break;
            }
            self.remove(id);
        }
        while self.owners.len() > keep {
            let Some((count, largest)) = self.by_count.last() else {
                return;
            };
            let least_used = if *count > 1 {
                self.by_principal.get(largest).and_then(BTreeSet::first)
            } else {
                self.by_used.first()
            };
            let Some(&(_, id)) = least_used else {
                return;
            };
            self.remove(id);
        }
    }

    fn text(&self) -> String {
        let mut text = format!("{HEADER}\n");
        for &(at, id) in &self.by_written {
            text.push_str(&line(id, at, &self.owners[&id].principal));
        }
        text
    }
}

impl ProducerOwners {
    /// The owners recorded in the file at `path` (none yet if it does not exist), or kept in
    /// memory only when `path` is `None`.
    ///
    /// # Errors
    /// [`FileError`] when the file cannot be read, is not this format, or has a bad line.
    pub fn open(
        path: Option<PathBuf>,
        max_remembered: usize,
        expiration_ms: i64,
        now_ms: i64,
    ) -> Result<Self, FileError> {
        let mut held = Held::default();
        if let Some(path) = &path {
            if let Some(text) = read_text(path)? {
                let torn;
                (held, torn) = parse(&text, path)?;
                if let Some((line, bytes)) = torn {
                    tracing::warn!(
                        file = %path.display(),
                        line,
                        bytes,
                        "dropped a torn last line of producer-owners: an issue a crash interrupted (never handed out), or lost data"
                    );
                }
                held.forget(now_ms, expiration_ms, max_remembered.max(1));
            }
            // Start from a file holding only what is kept (and, for a new one, its header).
            save_atomically(path, &held.text())?;
            held.lines = held.owners.len();
        }
        Ok(Self {
            path,
            max_remembered: max_remembered.max(1),
            expiration_ms,
            held: Mutex::new(held),
        })
    }

    /// Reads the file at `path` without changing it (`minibroker check-data`): how many ids it
    /// names.
    ///
    /// # Errors
    /// As [`Self::open`]: the first line that does not read, or whose checksum fails.
    /// A torn last line is reported as the segments' torn tail is: the next start drops it.
    pub fn check(path: &Path) -> Result<usize, FileError> {
        let Some(text) = read_text(path)? else {
            return Ok(0);
        };
        match parse(&text, path)? {
            (held, None) => Ok(held.owners.len()),
            (_, Some((line, bytes))) => Err(FileError::Line {
                path: path.to_owned(),
                line,
                reason: format!(
                    "a torn last line ({bytes} bytes, no newline); the next start drops it (a crash leaves one; anything else is lost data)"
                ),
            }),
        }
    }

    /// The principal `producer_id` was issued to, if it is remembered.
    #[must_use]
    pub fn owner(&self, producer_id: i64) -> Option<String> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.owners
            .get(&producer_id)
            .map(|owner| owner.principal.clone())
    }

    /// Records that `producer_id` was issued to `principal` at `now_ms`, durably (synced)
    /// before it returns.
    ///
    /// # Errors
    /// [`FileError::Io`] when the file cannot be written: the id must not be handed out.
    pub fn record(&self, producer_id: i64, principal: &str, now_ms: i64) -> Result<(), FileError> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held
            .owners
            .get(&producer_id)
            .is_some_and(|owner| owner.principal == principal)
        {
            // The same owner again (an epoch bump): nothing new to keep.
            return Ok(());
        }
        if let Some(path) = &self.path {
            append(path, &line(producer_id, now_ms, principal))?;
            held.lines += 1;
        }
        held.insert(producer_id, principal.to_owned(), now_ms);
        held.forget(now_ms, self.expiration_ms, self.max_remembered);
        if let Some(path) = &self.path
            && held.lines > 2 * held.owners.len().max(64)
        {
            save_atomically(path, &held.text())?;
            held.lines = held.owners.len();
        }
        Ok(())
    }

    /// Whether `principal` may write with `producer_id` at `now_ms`: its owner may, anyone else
    /// may not. An owner's use keeps its record alive: once half the expiration has passed since
    /// it was written, it is written again (so a producer that runs for longer than the
    /// expiration without a new InitProducerId is not forgotten, across restarts too).
    ///
    /// # Errors
    /// [`FileError::Io`] when a refreshed record cannot be written.
    pub fn check_use(
        &self,
        producer_id: i64,
        principal: &str,
        now_ms: i64,
    ) -> Result<Use, FileError> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(owner) = held.owners.get(&producer_id) else {
            let issued = held.highest.is_some_and(|highest| producer_id <= highest);
            return Ok(if issued { Use::Forgotten } else { Use::Nobody });
        };
        if owner.principal != principal {
            return Ok(Use::Other(owner.principal.clone()));
        }
        let written_ms = owner.written_ms;
        held.used(producer_id, now_ms);
        if now_ms.saturating_sub(written_ms) > self.expiration_ms / 2 {
            if let Some(path) = &self.path {
                append(path, &line(producer_id, now_ms, principal))?;
                held.lines += 1;
            }
            held.insert(producer_id, principal.to_owned(), now_ms);
        }
        Ok(Use::Owner)
    }

    /// How many ids are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .owners
            .len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The ids a file's `text` holds, and its torn last line (its number and length), if any.
fn parse(text: &str, path: &Path) -> Result<(Held, Option<(usize, usize)>), FileError> {
    let bad = |line: usize, reason: String| FileError::Line {
        path: path.to_owned(),
        line,
        reason,
    };
    let mut lines = text.split_inclusive('\n').enumerate();
    let encoded = match lines.next() {
        Some((_, first)) if first.trim_end() == HEADER => true,
        Some((_, first)) if first.trim_end() == HEADER_V1 => false,
        Some((_, first)) => {
            return Err(bad(
                1,
                format!(
                    "not a producer-owners file of this version: {:?}",
                    first.trim_end()
                ),
            ));
        }
        None => return Ok((Held::default(), None)),
    };
    let mut held = Held::default();
    for (index, line) in lines {
        let Some(line) = line.strip_suffix('\n') else {
            // Torn by a crash mid-append: never synced, so never handed out.
            return Ok((held, Some((index + 1, line.len()))));
        };
        let Some((content, checksum)) = line.rsplit_once(' ') else {
            return Err(bad(index + 1, "expected ID ISSUED_MS User:NAME CRC".into()));
        };
        if u32::from_str_radix(checksum, 16).ok() != Some(crc32c::crc32c(content.as_bytes())) {
            return Err(bad(
                index + 1,
                "damaged: its checksum does not match".into(),
            ));
        }
        // Version 1 wrote the principal as it was: it is the rest of the line, spaces and all.
        let mut fields = content.splitn(if encoded { 4 } else { 3 }, ' ');
        let parsed = (|| {
            let id = fields.next()?.parse::<i64>().ok()?;
            let at = fields.next()?.parse::<i64>().ok()?;
            let principal = fields.next()?;
            let principal = if encoded {
                crate::field::decode(principal).ok()?.into_owned()
            } else {
                principal.to_owned()
            };
            (principal.starts_with("User:") && fields.next().is_none())
                .then_some((id, at, principal))
        })();
        let (id, at, principal) =
            parsed.ok_or_else(|| bad(index + 1, "expected ID ISSUED_MS User:NAME CRC".into()))?;
        held.insert(id, principal, at);
        held.lines += 1;
    }
    Ok((held, None))
}

/// One line of the file, checksum and newline included.
fn line(id: i64, at_ms: i64, principal: &str) -> String {
    let content = format!("{id} {at_ms} {}", crate::field::encode(principal));
    let checksum = crc32c::crc32c(content.as_bytes());
    format!("{content} {checksum:08x}\n")
}

fn append(path: &Path, line: &str) -> Result<(), FileError> {
    let io = |what| {
        move |source| FileError::Io {
            what,
            path: path.to_owned(),
            source,
        }
    };
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(io("appending to"))?;
    file.write_all(line.as_bytes())
        .map_err(io("appending to"))?;
    file.sync_data().map_err(io("syncing"))
}
