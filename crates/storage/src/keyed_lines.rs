//! A small file of text lines, each with a key, kept by appending what changed: a change writes
//! the lines it added or replaced and the keys it removed, never the whole list again, so
//! creating the ten-thousandth topic costs what one topic costs. The topic list (a line per
//! topic), the topics' settings (a line per topic and setting) and the producer owners (a line
//! per producer id) are such files; the users and the ACLs are written whole in the same shape.
//!
//! The file is framed records ([`minibroker_envelope::framed`]): the whole list first (the
//! sealed body older brokers wrote as the whole file, under the file's magic), then changes
//! under the magic with its last byte lower-cased, each line `+<line>` or `-<key>`:
//!
//! ```text
//! "\0MBT" 1 "orders 3\nclicks 12\n"              the whole list
//! "\0MBt" 1 "+payments 6\n-clicks\n"             payments created, clicks deleted
//! ```
//!
//! It is replaced by the whole list (written aside, synced, renamed) at the first write after a
//! start and whenever it has grown to twice the list and 4 KiB. A torn last record (a crash in
//! the middle of an append, never synced, so never answered) is left out and reported, for the
//! caller to warn about and for `check-data`. Files of older brokers (one sealed whole list, or
//! plain text lines) are read as they are; a record of another version is refused.

use crate::{Access, Storage, write_atomically_as};
pub use minibroker_envelope::framed::TornTail;
use minibroker_envelope::framed::{LENGTH_LEN, frame, read_framed};
use minibroker_envelope::{SealError, seal, unseal};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

const VERSION: u8 = 1;

/// A file is never replaced for its size alone below this.
const COMPACT_BYTES: u64 = 4096;

/// What a file holds: its lines by key, and a torn tail left out.
pub type Read = (Vec<String>, Option<TornTail>);

/// Why a keyed-lines file does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyedLinesError {
    /// Its text is not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// A sealed body that does not open.
    #[error(transparent)]
    Sealed(#[from] SealError),
    /// A change with no whole list before it.
    #[error("a change before the whole list")]
    ChangeBeforeList,
    /// A change line that neither adds (`+`) nor removes (`-`).
    #[error("a change of a bad line {0:?}")]
    BadChange(String),
    /// A framed record that does not read, with whole records after it.
    #[error("damaged at byte {at}: {}", why.as_ref().map_or_else(
        || "its length is damaged: whole records follow it".to_owned(),
        ToString::to_string,
    ))]
    DamagedAt {
        /// Where the record begins.
        at: usize,
        /// What is wrong with it; `None` for a damaged length.
        why: Option<Box<KeyedLinesError>>,
    },
    /// Framed records, none of them the whole list.
    #[error("holds no whole list")]
    NoWholeList,
}

/// One keyed-lines file: its magics and how a line's key is read, and what was last written.
#[derive(Debug)]
pub struct KeyedLines {
    magic: &'static [u8; 4],
    change_magic: [u8; 4],
    key_of: fn(&str) -> &str,
    /// Who may read the file.
    access: Access,
    /// The lines the file holds, by key, and its size: known once the broker wrote it whole.
    written: Mutex<Option<(BTreeMap<String, String>, u64)>>,
}

impl KeyedLines {
    /// The file of `magic` whose lines have the key `key_of` reads.
    pub fn new(magic: &'static [u8; 4], key_of: fn(&str) -> &str) -> Self {
        let mut change_magic = *magic;
        change_magic[3] = change_magic[3].to_ascii_lowercase();
        Self {
            magic,
            change_magic,
            key_of,
            access: Access::Default,
            written: Mutex::new(None),
        }
    }

    /// The same file, readable by its owner only (a file of secrets).
    #[must_use]
    pub fn owner_only(mut self) -> Self {
        self.access = Access::OwnerOnly;
        self
    }

    /// Whether `bytes` are this file's records (or the single sealed list of older brokers),
    /// rather than plain text.
    #[must_use]
    pub fn holds_records(&self, bytes: &[u8]) -> bool {
        let magic = |at: usize| bytes.get(at..at + 4);
        bytes.starts_with(self.magic)
            || magic(LENGTH_LEN) == Some(&self.magic[..])
            || magic(LENGTH_LEN) == Some(&self.change_magic[..])
    }

    /// The lines of the file's `bytes`, in key order, and its torn tail; why not, otherwise.
    pub fn read(&self, bytes: &[u8]) -> Result<Read, KeyedLinesError> {
        if !self.holds_records(bytes) {
            // An older broker's file: plain text.
            let text = std::str::from_utf8(bytes).map_err(|_| KeyedLinesError::NotUtf8)?;
            if text.contains(|c: char| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
                return Err(KeyedLinesError::NotUtf8);
            }
            return Ok((lines(text).map(str::to_owned).collect(), None));
        }
        if bytes.starts_with(self.magic) {
            // An older broker's file: the whole list, sealed, unframed.
            let body = unseal(self.magic, VERSION, bytes)?;
            let text = std::str::from_utf8(body).map_err(|_| KeyedLinesError::NotUtf8)?;
            return Ok((lines(text).map(str::to_owned).collect(), None));
        }
        let mut held: Option<BTreeMap<String, String>> = None;
        let apply = |_at: usize, record: &[u8]| -> Result<(), KeyedLinesError> {
            let (text, whole) = self.body(record)?;
            if whole {
                held = Some(self.by_key(text));
                return Ok(());
            }
            let held = held.as_mut().ok_or(KeyedLinesError::ChangeBeforeList)?;
            for line in lines(text) {
                match line.split_at(1) {
                    ("+", line) => {
                        held.insert((self.key_of)(line).to_owned(), line.to_owned());
                    }
                    ("-", key) => {
                        held.remove(key);
                    }
                    _ => return Err(KeyedLinesError::BadChange(line.to_owned())),
                }
            }
            Ok(())
        };
        let reads_whole = |record: &[u8]| self.body(record).is_ok();
        let magics = [self.magic, &self.change_magic];
        let torn = read_framed(bytes, &magics, apply, reads_whole).map_err(|error| {
            KeyedLinesError::DamagedAt {
                at: error.at,
                why: error.source.map(Box::new),
            }
        })?;
        let held = held.ok_or(KeyedLinesError::NoWholeList)?;
        Ok((held.into_values().collect(), torn))
    }

    /// A record's text, and whether it is the whole list (or a change).
    fn body<'a>(&self, record: &'a [u8]) -> Result<(&'a str, bool), KeyedLinesError> {
        let (body, whole) = match unseal(self.magic, VERSION, record) {
            Ok(body) => (body, true),
            Err(_) => (unseal(&self.change_magic, VERSION, record)?, false),
        };
        let text = std::str::from_utf8(body).map_err(|_| KeyedLinesError::NotUtf8)?;
        Ok((text, whole))
    }

    fn by_key(&self, text: &str) -> BTreeMap<String, String> {
        lines(text)
            .map(|line| ((self.key_of)(line).to_owned(), line.to_owned()))
            .collect()
    }

    /// Makes `lines` (every line, each key once) what the file at `path` holds, durably:
    /// appends what changed since the last write, or writes the whole list.
    ///
    /// # Errors
    /// As the file system reports; the next write then writes the whole list.
    pub fn save(
        &self,
        storage: &dyn Storage,
        path: &Path,
        lines: impl IntoIterator<Item = String>,
    ) -> io::Result<()> {
        let wanted: BTreeMap<String, String> = lines
            .into_iter()
            .map(|line| ((self.key_of)(&line).to_owned(), line))
            .collect();
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let whole_size: u64 = wanted.values().map(|line| line.len() as u64 + 1).sum();
        let appended = match written.take() {
            Some((held, bytes)) if bytes <= COMPACT_BYTES.max(2 * whole_size) => self
                .append_changes(storage, path, &held, &wanted)
                .map(|added| bytes + added),
            _ => Err(io::Error::other("the whole list is due")),
        };
        let bytes = match appended {
            Ok(bytes) => bytes,
            Err(_) => self.write_whole(storage, path, wanted.values())?,
        };
        *written = Some((wanted, bytes));
        Ok(())
    }

    /// Replaces the file at `path` with the whole list `lines` (each key once), atomically
    /// (written aside, synced, renamed, the directory synced); returns the file's size.
    ///
    /// # Errors
    /// As the file system reports; the file is unchanged then.
    pub fn write_whole<'a>(
        &self,
        storage: &dyn Storage,
        path: &Path,
        lines: impl IntoIterator<Item = &'a String>,
    ) -> io::Result<u64> {
        let text: String = lines.into_iter().map(|line| format!("{line}\n")).collect();
        let framed = frame(&seal(self.magic, VERSION, text.as_bytes()));
        write_atomically_as(storage, path, &framed, self.access)?;
        Ok(framed.len() as u64)
    }

    /// Appends the change from `held` to `wanted` to the file at `path` and syncs it; returns
    /// what it added (nothing when nothing changed).
    fn append_changes(
        &self,
        storage: &dyn Storage,
        path: &Path,
        held: &BTreeMap<String, String>,
        wanted: &BTreeMap<String, String>,
    ) -> io::Result<u64> {
        let added = wanted
            .iter()
            .filter(|(key, line)| held.get(*key) != Some(*line))
            .map(|(_, line)| line.as_str());
        let removed = held
            .keys()
            .filter(|key| !wanted.contains_key(*key))
            .map(String::as_str);
        self.append_change(storage, path, added, removed)
    }

    /// Appends one change to the file at `path` (which holds a whole list already) and syncs
    /// it: the `added` lines (a line replaces the one of its key) and the `removed` keys. Returns
    /// what it added (nothing when the change is empty). A failed append is cut off again, so
    /// the file ends with whole records.
    ///
    /// # Errors
    /// As the file system reports: the change may then be lost, and must not be answered.
    pub fn append_change<'a>(
        &self,
        storage: &dyn Storage,
        path: &Path,
        added: impl IntoIterator<Item = &'a str>,
        removed: impl IntoIterator<Item = &'a str>,
    ) -> io::Result<u64> {
        let mut text = String::new();
        for line in added {
            text.push_str(&format!("+{line}\n"));
        }
        for key in removed {
            text.push_str(&format!("-{key}\n"));
        }
        if text.is_empty() {
            return Ok(0);
        }
        let framed = frame(&seal(&self.change_magic, VERSION, text.as_bytes()));
        let file = storage.open(path)?;
        let size = file.len()?;
        if let Err(error) = file.append(&framed) {
            let _ = file.truncate(size);
            return Err(error);
        }
        file.sync()?;
        Ok(framed.len() as u64)
    }
}

fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|line| !line.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimStorage;
    use std::sync::atomic::Ordering;

    fn topics() -> KeyedLines {
        KeyedLines::new(b"\0MBT", |line| {
            line.split_once(' ').map_or(line, |(key, _)| key)
        })
    }

    fn read(file: &KeyedLines, storage: &SimStorage, path: &Path) -> Read {
        file.read(&storage.contents(path).unwrap()).unwrap()
    }

    #[test]
    fn a_change_appends_what_changed_and_reads_back_through_a_crash() {
        let storage = SimStorage::new();
        let path = Path::new("/data/topics");
        let file = topics();
        let mut list: Vec<String> = (0..1000).map(|n| format!("topic-{n:04} 3")).collect();
        file.save(&storage, path, list.clone()).unwrap();
        let before = storage.faults.bytes_written.load(Ordering::Relaxed);
        list.push("topic-1000 3".into());
        list[7] = "topic-0007 6".into();
        list.remove(0);
        file.save(&storage, path, list.clone()).unwrap();
        let one_change = storage.faults.bytes_written.load(Ordering::Relaxed) - before;
        assert!(
            one_change < 100,
            "a change of three lines wrote {one_change} bytes"
        );
        list.sort();
        let crashed = storage.crash(3);
        assert_eq!(read(&topics(), &crashed, path), (list, None));
    }

    #[test]
    fn a_torn_change_is_left_out_and_older_files_still_read() {
        let storage = SimStorage::new();
        let path = Path::new("/data/topics");
        let file = topics();
        file.save(&storage, path, ["a 1".to_owned()]).unwrap();
        file.save(&storage, path, ["a 1".to_owned(), "b 2".to_owned()])
            .unwrap();
        let mut bytes = storage.contents(path).unwrap();
        let whole = bytes.len();
        bytes.extend_from_slice(&[0, 0, 0, 20, 0, b'M', b'B', b't']);
        let (lines, torn) = topics().read(&bytes).unwrap();
        assert_eq!(lines, ["a 1", "b 2"]);
        assert_eq!(
            torn,
            Some(TornTail {
                at: whole,
                bytes: 8
            })
        );
        // What older brokers wrote: a sealed whole list, or plain text.
        let sealed = seal(b"\0MBT", 1, b"b 2\na 1\n");
        assert_eq!(topics().read(&sealed).unwrap().0, ["b 2", "a 1"]);
        assert_eq!(topics().read(b"a 1\n").unwrap().0, ["a 1"]);
        // A change with no whole list before it is damage.
        let alone = frame(&seal(b"\0MBt", 1, b"+a 1\n"));
        assert!(topics().read(&alone).is_err());
    }
}
