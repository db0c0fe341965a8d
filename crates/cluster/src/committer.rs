//! A broker's committer: gathers the batches its connections take over a short window and
//! commits them together ([`crate::produce::commit_window`]), on a connection of its own.
//!
//! A window opens with its first batch and closes after `flush` or once it holds `max_bytes`,
//! whichever comes first; while it commits, the next one gathers. One transaction per window
//! rather than per batch is what lets PostgreSQL keep up: its cost is one round trip (two for
//! a producer the committer has not seen write) and one WAL flush, whatever the window holds.
//! Windows commit one after the other, so a partition's windows are judged in the order they
//! were gathered. A second window in flight on a second connection was measured and not kept:
//! the partitions' locks make the server run the two one after the other anyway, and the
//! batches split over three windows (committing, waiting, gathering) instead of two made each
//! window smaller and the whole slower (docs/performance.md).
//!
//! The committer never gives up: when the database cannot be reached, or a commit fails, every
//! batch of the window is answered [`AppendError::Unavailable`] (or
//! [`AppendError::Unknown`] when a COMMIT got no answer), both retriable, and the next window
//! connects again. Nothing is ever answered as stored that the database did not confirm.

use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::produce::{
    Answers, Append, AppendRefused, Appended, CommitError, KnownProducers, Statements,
    commit_window,
};

/// How a committer gathers its windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSettings {
    /// How long a window stays open after its first batch (`cluster_flush_ms`).
    pub flush: Duration,
    /// A window closes early once its batches hold this many bytes.
    pub max_bytes: usize,
    /// How long a connection attempt to the database may take.
    pub connect_timeout: Duration,
}

impl Default for WindowSettings {
    fn default() -> Self {
        Self {
            flush: Duration::from_millis(2),
            max_bytes: 4 << 20,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a batch was not answered with a verdict.
#[derive(Debug, Clone, Error)]
pub enum AppendError {
    /// The batch itself was refused; the rest of its window was stored.
    #[error(transparent)]
    Refused(#[from] AppendRefused),
    /// Its window was not stored: the database is unreachable or refused it. Retriable.
    #[error("the cluster's database is unavailable: {0}")]
    Unavailable(Arc<str>),
    /// Its window's COMMIT got no answer: it may be stored or not. Retriable: a retry meets
    /// the rule.
    #[error("the cluster's database did not confirm the commit: {0}")]
    Unknown(Arc<str>),
}

/// Where a batch's answer goes.
type Answer = oneshot::Sender<Result<Appended, AppendError>>;

struct Waiting {
    append: Append,
    answer: Answer,
    /// When it was submitted: a window is open for `flush` from its first batch's arrival,
    /// however long that batch waited for the window before to commit.
    arrived: Instant,
}

/// The handle to a committer task; cloned by every connection of the broker.
#[derive(Debug, Clone)]
pub struct Committer {
    sender: mpsc::Sender<Waiting>,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting").finish_non_exhaustive()
    }
}

/// Batches waiting for a window at most; a connection's append waits for room beyond that.
const QUEUE: usize = 4096;

impl Committer {
    /// Starts a committer on the current runtime, connecting to the database at `url` (once
    /// its first window is ready, and again after any failure).
    #[must_use]
    pub fn start(url: &str, settings: WindowSettings) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(run(url.to_owned(), settings, receiver));
        Self { sender }
    }

    /// Judges and stores `append` in the next window, and answers it once the window's
    /// transaction has committed.
    ///
    /// # Errors
    /// [`AppendError`]: the batch is not stored, or not known to be.
    pub async fn append(&self, append: Append) -> Result<Appended, AppendError> {
        self.submit(append).await?.outcome().await
    }

    /// Puts `append` in the next window, waiting only for room in the queue; its outcome comes
    /// once the window has committed ([`Pending::outcome`]), so a connection can submit the
    /// batches of several requests before it waits for any.
    ///
    /// # Errors
    /// [`AppendError::Unavailable`] when the committer has stopped.
    pub async fn submit(&self, append: Append) -> Result<Pending, AppendError> {
        let (answer, answered) = oneshot::channel();
        self.sender
            .send(Waiting {
                append,
                answer,
                arrived: Instant::now(),
            })
            .await
            .map_err(|_| stopped())?;
        Ok(Pending(answered))
    }
}

/// A batch submitted to a committer, its outcome to come.
#[derive(Debug)]
pub struct Pending(oneshot::Receiver<Result<Appended, AppendError>>);

impl Pending {
    /// The batch's outcome, once its window has committed (or failed).
    ///
    /// # Errors
    /// [`AppendError`]: the batch is not stored, or not known to be.
    pub async fn outcome(self) -> Result<Appended, AppendError> {
        self.0.await.unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> AppendError {
    AppendError::Unavailable(Arc::from("the committer has stopped"))
}

/// The committer's connection, made when a window needs it.
struct Connection {
    client: tokio_postgres::Client,
    statements: Statements,
}

async fn run(url: String, settings: WindowSettings, mut receiver: mpsc::Receiver<Waiting>) {
    let mut connection = None;
    let known = KnownProducers::new();
    while let Some(first) = receiver.recv().await {
        let opened = first.arrived;
        let window = gather(first, &mut receiver, &settings, opened, |waiting| {
            waiting.append.bytes.len()
        })
        .await;
        let (appends, answers): (Vec<_>, Vec<_>) = window
            .into_iter()
            .map(|Waiting { append, answer, .. }| (append, answer))
            .unzip();
        let committed = commit(&url, &settings, &mut connection, &known, &appends).await;
        // A connection that stopped waiting has gone; its batch is stored all the same.
        match committed {
            Ok(answered) => {
                for (answer, answered) in answers.into_iter().zip(answered) {
                    let _gone = answer.send(answered.map_err(AppendError::from));
                }
            }
            Err(error) => {
                for answer in answers {
                    let _gone = answer.send(Err(error.clone()));
                }
            }
        }
    }
}

/// The window `first` opens: it and everything `receiver` brings until the window closes,
/// `settings.flush` after `opened` (when `first` arrived: a batch that waited for the window
/// before it to commit has waited its flush already, as a producer's linger counts from its
/// first record), or once what it holds is `settings.max_bytes` long by `bytes_of` (a
/// committer's batches; a benchmark's raw inserts, gathered the same way).
pub async fn gather<T>(
    first: T,
    receiver: &mut mpsc::Receiver<T>,
    settings: &WindowSettings,
    opened: Instant,
    bytes_of: impl Fn(&T) -> usize,
) -> Vec<T> {
    let closes = opened + settings.flush;
    let mut bytes = 0;
    let mut window = Vec::new();
    let mut next = Some(first);
    while let Some(item) = next.take() {
        bytes += bytes_of(&item);
        window.push(item);
        if bytes < settings.max_bytes
            && let Ok(waiting) = tokio::time::timeout_at(closes, receiver.recv()).await
        {
            next = waiting;
        }
    }
    window
}

/// Commits one window on the committer's connection, connecting first when it has none; a
/// connection that broke is dropped, for the next window to make another.
async fn commit(
    url: &str,
    settings: &WindowSettings,
    connection: &mut Option<Connection>,
    known: &KnownProducers,
    appends: &[Append],
) -> Result<Answers, AppendError> {
    let open = match connection {
        Some(open) => open,
        None => connection.insert(
            connect(url, settings)
                .await
                .map_err(|error| AppendError::Unavailable(Arc::from(error.to_string())))?,
        ),
    };
    match commit_window(&mut open.client, &open.statements, known, appends).await {
        Ok(answers) => Ok(answers),
        Err(error) => {
            tracing::warn!(%error, batches = appends.len(), "a cluster window was not stored");
            if open.client.is_closed() {
                *connection = None;
            }
            Err(match error {
                CommitError::Unknown(_) => AppendError::Unknown(Arc::from(error.to_string())),
                CommitError::Failed(_) | CommitError::Damaged { .. } => {
                    AppendError::Unavailable(Arc::from(error.to_string()))
                }
            })
        }
    }
}

async fn connect(
    url: &str,
    settings: &WindowSettings,
) -> Result<Connection, tokio_postgres::Error> {
    let client = crate::connect_with_timeout(url, settings.connect_timeout).await?;
    // A window's statements are planned once, when first run: planned again for each window
    // (PostgreSQL's choice for statements with parameters, at first) their planning cost more
    // than running them (docs/performance.md).
    client
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .await?;
    let statements = Statements::prepare(&client).await?;
    Ok(Connection { client, statements })
}
