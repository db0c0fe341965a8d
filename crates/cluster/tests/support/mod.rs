//! A throwaway PostgreSQL server for one test, started by the project's `scripts/postgres` (which
//! installs Debian's package when it is missing) and stopped when the test ends.

use std::path::PathBuf;
use std::process::Command;

/// A running server in a scratch directory; stopped and removed on drop.
pub struct Postgres {
    /// Its URL: `postgresql://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
    dir: tempfile::TempDir,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres")
}

impl Postgres {
    /// Starts one.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = run_script("start", &dir).trim().to_owned();
        Self { url, dir }
    }

    /// Stops it at once, as a crash would (`pg_ctl stop -m immediate`): what it committed is
    /// in its WAL, nothing else.
    #[allow(dead_code)] // not every test binary stops its server
    pub fn stop(&self) {
        run_script("stop", &self.dir);
    }

    /// Starts it again after [`Self::stop`], on the same port.
    #[allow(dead_code)]
    pub fn restart(&self) {
        run_script("start", &self.dir);
    }
}

/// Runs `scripts/postgres COMMAND DIR`; what it printed.
fn run_script(command: &str, dir: &tempfile::TempDir) -> String {
    let output = Command::new(script())
        .arg(command)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "scripts/postgres {command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// How many batches the cluster stores, in every partition.
#[allow(dead_code)]
pub async fn stored_batches(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM minibroker.batches", &[])
        .await
        .unwrap()
        .get(0)
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}
