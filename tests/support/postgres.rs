//! A real PostgreSQL server for the shared-history tests (issue 15):
//! `initdb` into a temp dir, `postgres` on 127.0.0.1 and a free port (its
//! unix socket in the temp dir too), ready when it logs "database system is
//! ready to accept connections"; on drop SIGQUIT (immediate shutdown), then
//! SIGKILL, by its PID, and the dir is removed.
//!
//! PostgreSQL refuses to run as root: as root, `initdb` and `postgres` run as
//! `nobody` through `setpriv` (which also sets the parent-death signal after
//! changing the credentials, so the server dies with the test), and the temp
//! dir is handed to that user. Binaries: `$TENURE_TEST_PG_BIN` (a directory),
//! else Debian's `/usr/lib/postgresql/15/bin`, else the newest
//! `/usr/lib/postgresql/*/bin`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

/// The user PostgreSQL runs as when the tests run as root.
const UNPRIVILEGED_UID: u32 = 65534;
const UNPRIVILEGED_GID: u32 = 65534;
/// Superuser created by initdb (trust authentication, loopback only).
pub const PG_USER: &str = "tenure";

/// A server that speaks TLS (`ssl = on`) with these PEM files, and the
/// `pg_hba.conf` lines for TCP connections (the unix socket, which the
/// harness's own psql uses, stays `trust`).
pub struct PgTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA for client certificates (`ssl_ca_file`).
    pub ca: PathBuf,
    pub hba: String,
    /// `pg_ident.conf` lines (for `cert map=…`).
    pub ident: String,
}

pub struct Postgres {
    child: Child,
    pub port: u16,
    dir: TempDir,
    logs: Arc<Mutex<Vec<String>>>,
}

/// The directory of `initdb` and `postgres`.
pub fn pg_bin_dir() -> PathBuf {
    find_bin_dir().unwrap_or_else(|| {
        panic!(
            "PostgreSQL is not installed: run `scripts/setup.sh --test` (apt package postgresql)"
        )
    })
}

fn find_bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TENURE_TEST_PG_BIN") {
        return Some(PathBuf::from(d));
    }
    let debian = Path::new("/usr/lib/postgresql/15/bin");
    if debian.join("postgres").exists() {
        return Some(debian.to_owned());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop()
}

/// `initdb`, when PostgreSQL is installed (the benches skip without it; the
/// tests fail).
pub fn initdb() -> Option<PathBuf> {
    find_bin_dir()
        .map(|d| d.join("initdb"))
        .filter(|p| p.exists())
}

fn is_root() -> bool {
    // /proc/self belongs to the process's effective user.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `program args…`, as the unprivileged user when we are root.
fn command(program: &Path, pdeathsig: bool) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={UNPRIVILEGED_UID}"))
            .arg(format!("--regid={UNPRIVILEGED_GID}"))
            .arg("--clear-groups");
        if pdeathsig {
            c.arg("--pdeathsig=KILL");
        }
        c.arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with(None)
    }

    pub fn start_with(tls: Option<PgTls>) -> Postgres {
        let bin = pg_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("tenure-pg-")
            .tempdir()
            .expect("temp dir for PostgreSQL");
        if is_root() {
            std::os::unix::fs::chown(dir.path(), Some(UNPRIVILEGED_UID), Some(UNPRIVILEGED_GID))
                .expect("hand the temp dir to the unprivileged user");
        }
        let data = dir.path().join("data");
        let out = command(&bin.join("initdb"), false)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                PG_USER,
                "--auth=trust",
                "--locale=C",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .current_dir(dir.path())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut ssl_args: Vec<String> = Vec::new();
        if let Some(tls) = &tls {
            // The server reads its key only if the server's user owns it
            // and nobody else can read it.
            for (from, to) in [
                (&tls.cert, "server.crt"),
                (&tls.key, "server.key"),
                (&tls.ca, "ca.crt"),
            ] {
                let dest = data.join(to);
                std::fs::copy(from, &dest).expect("copy a TLS file into the data dir");
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod");
                if is_root() {
                    std::os::unix::fs::chown(&dest, Some(UNPRIVILEGED_UID), Some(UNPRIVILEGED_GID))
                        .expect("chown a TLS file");
                }
            }
            std::fs::write(
                data.join("pg_hba.conf"),
                format!("local all all trust\n{}\n", tls.hba),
            )
            .expect("write pg_hba.conf");
            std::fs::write(data.join("pg_ident.conf"), format!("{}\n", tls.ident))
                .expect("write pg_ident.conf");
            for arg in [
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
                "ssl_ca_file=ca.crt",
            ] {
                ssl_args.extend(["-c".to_owned(), arg.to_owned()]);
            }
        }
        let port = super::free_port();
        let mut child = command(&bin.join("postgres"), true)
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=100",
                "-c",
                "log_min_messages=warning",
            ])
            .args(&ssl_args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn postgres");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = logs.clone();
        std::thread::spawn(move || {
            let mut ready = Some(ready_tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("database system is ready to accept connections") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                if let Ok(mut l) = sink.lock() {
                    l.push(line);
                }
            }
        });
        let pg = Postgres {
            child,
            port,
            dir,
            logs,
        };
        if ready_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            panic!("postgres never became ready: {:?}", pg.logs());
        }
        pg
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The URL of database `db` (see [`Postgres::create_database`]).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{PG_USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""));
        self.url(name)
    }

    /// Runs `sql` in `db` with psql; the unaligned, tuples-only output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new("psql")
            // Over the unix socket (always `trust`), so a TLS-only server's
            // TCP rules do not apply to the harness's own statements.
            .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                PG_USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Our own server, by its PID: immediate shutdown (it ends its
        // backends), then SIGKILL if it is still there.
        let pid = Pid::from_raw(self.pid());
        let _ = kill(pid, Signal::SIGQUIT);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                _ => return,
            }
        }
        let _ = kill(pid, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// For a writer opened without etcd (tests, benches): etcd's revision as a
/// constant. `i64::MAX`: every token belongs to the current timeline and
/// the fence is never reset (the claim compares tokens only).
pub fn revision_at(revision: i64) -> tenure::history::RevisionSource {
    Box::new(move || Ok(revision))
}
