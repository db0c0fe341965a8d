//! Which principal each producer id was issued to — a guarantee no Kafka broker gives.
//!
//! Kafka lets any principal with Write on a topic write with any producer id, and minibroker's
//! epoch bump (KIP-360) lets anyone fence anyone. With authorisation on, the broker records the
//! principal at every InitProducerId and refuses a batch whose producer id was issued to someone
//! else (or to no one), and an epoch bump of another principal's id gets a new id instead. So a
//! zombie or an intruder can neither write as a producer nor fence it.
//!
//! The record survives restarts: a durable broker appends one record per issue to
//! `producer-owners` in its data directory and syncs it before the id is handed out. The file is
//! [`KeyedLines`] records (magic `\0MBO`, version 1: the checksummed envelope of every small file
//! of a broker), a line per id keyed by the id, written through [`Storage`] so the simulated disk
//! crashes it like any other file:
//!
//! ```text
//! "\0MBO" 1 "1000 1796190000000 User:alice\n"        the whole list
//! "\0MBo" 1 "+1001 1796190000150 User:Jane%20Doe\n"  an issue
//! ```
//!
//! (id, when issued in ms, principal). The principal is written by [`crate::field`], so any
//! name a login or a certificate gives (`CN=Jane Doe`) reads back as it was. The text files of
//! older brokers (`minibroker producer-owners 1` or `2`, a line per issue with its own CRC-32C;
//! version 1 with the principal as it was, a principal holding spaces taken whole) are read and
//! rewritten in this format at start. A torn last record (a crash mid-append: that id was never
//! handed out) is dropped; any other record that does not read, or whose checksum fails, is an
//! error naming the file: a flipped byte must not hand an id to someone else. The file is
//! rewritten, without the forgotten ids, when it has grown to twice what it holds. Each id is kept until
//! `expiration` after it was issued (or last refreshed by use), and at most `max_remembered`
//! ids are kept: beyond that, the principal holding the most ids forgets its least recently
//! used, so one principal taking ids by the thousand cannot make the broker forget another's
//! id in use. A batch with a forgotten id is refused UNKNOWN_PRODUCER_ID, on which Kafka's
//! producers ask for a new id and go on (a never-issued or another principal's id stays an
//! authorisation failure).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use minibroker_storage::keyed_lines::{KeyedLines, TornTail};
use minibroker_storage::{FsStorage, Storage};

use crate::file::{FileError, read_bytes, read_records, save_lines};

/// The file's records: a line per id, `<id> <issued ms> <principal>`, keyed by the id.
fn file() -> KeyedLines {
    KeyedLines::new(b"\0MBO", |line| {
        line.split_once(' ').map_or(line, |(id, _)| id)
    })
    .owner_only()
}

/// What every text file of older brokers starts with: `minibroker producer-owners 1` or `2`.
const TEXT_HEADER: &str = "minibroker producer-owners ";

/// The first line of version 2, still read: lines with their own checksums.
const HEADER_V2: &str = "minibroker producer-owners 2";

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
    storage: Arc<dyn Storage>,
    file: KeyedLines,
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
    /// A write failed since the file was last written whole: what it appended may or may not be
    /// on the disk, and a later sync would make it durable, so the next write replaces the file
    /// with what was answered instead of appending after it.
    unsettled: bool,
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

    /// Every line of the file, oldest written first.
    fn lines(&self) -> Vec<String> {
        self.by_written
            .iter()
            .map(|&(at, id)| line(id, at, &self.owners[&id].principal))
            .collect()
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
        Self::open_on(
            Arc::new(FsStorage),
            path,
            max_remembered,
            expiration_ms,
            now_ms,
        )
    }

    /// [`Self::open`], the file on `storage`.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_on(
        storage: Arc<dyn Storage>,
        path: Option<PathBuf>,
        max_remembered: usize,
        expiration_ms: i64,
        now_ms: i64,
    ) -> Result<Self, FileError> {
        let file = file();
        let mut held = Held::default();
        if let Some(path) = &path {
            if let Some(bytes) = read_bytes(storage.as_ref(), path)? {
                let torn;
                (held, torn) = parse(&file, &bytes, path)?;
                if let Some(torn) = torn {
                    tracing::warn!(
                        file = %path.display(),
                        %torn,
                        "dropped a torn last record of producer-owners: an issue a crash interrupted (never handed out), or lost data"
                    );
                }
                held.forget(now_ms, expiration_ms, max_remembered.max(1));
            }
            // Start from a file holding only what is kept, in this version.
            write_whole(storage.as_ref(), &file, path, &mut held)?;
        }
        Ok(Self {
            storage,
            file,
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
        let Some(bytes) = read_bytes(&FsStorage, path)? else {
            return Ok(0);
        };
        match parse(&file(), &bytes, path)? {
            (held, None) => Ok(held.owners.len()),
            (_, Some(torn)) => Err(FileError::Torn {
                path: path.to_owned(),
                torn,
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
        self.settle(&mut held)?;
        if held
            .owners
            .get(&producer_id)
            .is_some_and(|owner| owner.principal == principal)
        {
            // The same owner again (an epoch bump): nothing new to keep.
            return Ok(());
        }
        self.append(&mut held, producer_id, principal, now_ms)?;
        held.insert(producer_id, principal.to_owned(), now_ms);
        held.forget(now_ms, self.expiration_ms, self.max_remembered);
        if let Some(path) = &self.path
            && held.lines > 2 * held.owners.len().max(64)
        {
            write_whole(self.storage.as_ref(), &self.file, path, &mut held)?;
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
            self.append(&mut held, producer_id, principal, now_ms)?;
            held.insert(producer_id, principal.to_owned(), now_ms);
        }
        Ok(Use::Owner)
    }

    /// Appends `producer_id`'s line to the file (if there is one) and syncs it.
    fn append(
        &self,
        held: &mut Held,
        producer_id: i64,
        principal: &str,
        now_ms: i64,
    ) -> Result<(), FileError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        self.settle(held)?;
        let line = line(producer_id, now_ms, principal);
        self.file
            .append_change(self.storage.as_ref(), path, [line.as_str()], [])
            .map_err(|source| {
                held.unsettled = true;
                FileError::Io {
                    what: "appending to",
                    path: path.clone(),
                    source,
                }
            })?;
        held.lines += 1;
        Ok(())
    }

    /// After a failed write, replaces the file with what `held` keeps (what was answered).
    fn settle(&self, held: &mut Held) -> Result<(), FileError> {
        match &self.path {
            Some(path) if held.unsettled => {
                write_whole(self.storage.as_ref(), &self.file, path, held)
            }
            _ => Ok(()),
        }
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

/// Replaces the file at `path` with what `held` keeps.
fn write_whole(
    storage: &dyn Storage,
    file: &KeyedLines,
    path: &Path,
    held: &mut Held,
) -> Result<(), FileError> {
    save_lines(storage, path, file, &held.lines())?;
    held.lines = held.owners.len();
    held.unsettled = false;
    Ok(())
}

/// What the file's `bytes` hold (and, after, how many lines it has), and a torn last record.
fn parse(
    file: &KeyedLines,
    bytes: &[u8],
    path: &Path,
) -> Result<(Held, Option<TornTail>), FileError> {
    if bytes.starts_with(TEXT_HEADER.as_bytes()) {
        return parse_text(&String::from_utf8_lossy(bytes), path);
    }
    if bytes.is_empty() {
        return Ok((Held::default(), None));
    }
    if !file.holds_records(bytes) {
        let first = String::from_utf8_lossy(bytes.split(|b| *b == b'\n').next().unwrap_or(bytes));
        return Err(FileError::Line {
            path: path.to_owned(),
            line: 1,
            reason: format!("not a producer-owners file of a version this broker reads: {first:?}"),
        });
    }
    let (lines, torn) = read_records(path, file, bytes)?;
    let mut held = Held::default();
    for (index, line) in lines.iter().enumerate() {
        let (id, at, principal) = fields(line, true).ok_or_else(|| FileError::Line {
            path: path.to_owned(),
            line: index + 1,
            reason: format!("expected ID ISSUED_MS User:NAME, not {line:?}"),
        })?;
        held.insert(id, principal, at);
    }
    held.lines = held.owners.len();
    Ok((held, torn))
}

/// An id's fields: its id, when it was issued and its principal (`encoded` by [`crate::field`]
/// since version 2; version 1 wrote it as it was, so it is the rest of the line, spaces and
/// all).
fn fields(content: &str, encoded: bool) -> Option<(i64, i64, String)> {
    let mut fields = content.splitn(if encoded { 4 } else { 3 }, ' ');
    let id = fields.next()?.parse::<i64>().ok()?;
    let at = fields.next()?.parse::<i64>().ok()?;
    let principal = fields.next()?;
    let principal = if encoded {
        crate::field::decode(principal).ok()?.into_owned()
    } else {
        principal.to_owned()
    };
    (principal.starts_with("User:") && fields.next().is_none()).then_some((id, at, principal))
}

/// The ids an older broker's text file holds (versions 1 and 2: a header line, then a line per
/// issue with its own CRC-32C), and its torn last line as a torn tail.
fn parse_text(text: &str, path: &Path) -> Result<(Held, Option<TornTail>), FileError> {
    let bad = |line: usize, reason: String| FileError::Line {
        path: path.to_owned(),
        line,
        reason,
    };
    let mut lines = text.split_inclusive('\n').enumerate();
    let encoded = match lines.next() {
        Some((_, first)) if first.trim_end() == HEADER_V2 => true,
        Some((_, first)) if first.trim_end() == HEADER_V1 => false,
        Some((_, first)) => {
            return Err(bad(
                1,
                format!(
                    "not a producer-owners file of a version this broker reads: {:?}",
                    first.trim_end()
                ),
            ));
        }
        None => return Ok((Held::default(), None)),
    };
    let mut held = Held::default();
    let mut at_byte = text.find('\n').map_or(text.len(), |end| end + 1);
    for (index, line) in lines {
        let Some(line) = line.strip_suffix('\n') else {
            // Torn by a crash mid-append: never synced, so never handed out.
            let torn = TornTail {
                at: at_byte,
                bytes: line.len(),
            };
            return Ok((held, Some(torn)));
        };
        at_byte += line.len() + 1;
        let Some((content, checksum)) = line.rsplit_once(' ') else {
            return Err(bad(index + 1, "expected ID ISSUED_MS User:NAME CRC".into()));
        };
        if u32::from_str_radix(checksum, 16).ok() != Some(crc32c::crc32c(content.as_bytes())) {
            return Err(bad(
                index + 1,
                "damaged: its checksum does not match".into(),
            ));
        }
        let (id, at, principal) = fields(content, encoded)
            .ok_or_else(|| bad(index + 1, "expected ID ISSUED_MS User:NAME CRC".into()))?;
        held.insert(id, principal, at);
        held.lines += 1;
    }
    Ok((held, None))
}

/// One line of the file: the id, when it was written, and the principal as one field.
fn line(id: i64, at_ms: i64, principal: &str) -> String {
    format!("{id} {at_ms} {}", crate::field::encode(principal))
}
