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
        let output = Command::new(script())
            .arg("start")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "scripts/postgres start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let url = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        Self { url, dir }
    }
}

impl Postgres {
    /// Stops it at once, as a crash would (`pg_ctl stop -m immediate`): what it committed is
    /// in its WAL, nothing else.
    #[allow(dead_code)] // not every test binary stops its server
    pub fn stop(&self) {
        self.run("stop");
    }

    /// Starts it again after [`Self::stop`], on the same port.
    #[allow(dead_code)]
    pub fn restart(&self) {
        self.run("start");
    }

    fn run(&self, command: &str) {
        let output = Command::new(script())
            .arg(command)
            .arg(self.dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "scripts/postgres {command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}
