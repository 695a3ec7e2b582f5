//! A throwaway PostgreSQL server for tests: one per test binary, started on first use, with
//! a fresh database per test.
//!
//! The server comes from the installed PostgreSQL (`pg_config --bindir` names its binaries;
//! Debian does not put `initdb` and `postgres` on the `PATH`). It lives in a short directory
//! under `/tmp` (`/tmp/vpg-PID`, since a Unix socket's path is capped at 107 bytes), which
//! holds its data (`data/`), its log (`log`) and its socket: it listens on that Unix socket
//! only, never on TCP, and trusts every local connection as the superuser `postgres`.
//! Durability is off (`fsync`, `synchronous_commit`, `full_page_writes`): a crash loses a
//! test's data, never anything else.
//!
//! `initdb` and `postgres` refuse to run as root: a test process running as root hands them
//! to the `postgres` system user (which Debian's `postgresql` package creates) and gives
//! that user the directory. Any other user runs them itself.
//!
//! # Cleanup
//!
//! Static values are never dropped, and a test process may be killed (`SIGKILL`, a
//! timeout), so the server does not rely on this process to stop it. `postgres` runs under a
//! small supervising shell whose standard input is a pipe, and the process keeps the pipe's
//! write end open in the server's static for its whole life. However the process ends, the
//! kernel then closes that end: the shell reads end of file, sends `SIGINT` (a fast
//! shutdown: open sessions are rolled back and closed) to `postgres`, waits for it to exit
//! and removes the directory. The shell and the server are in a process group of their own,
//! so a Ctrl-C at the terminal reaches the test process alone, and the server then stops
//! through the pipe like any other time.

use std::fs;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The port in the socket's name (`.s.PGSQL.5432`); no TCP port is opened.
const PORT: u16 = 5432;
/// The superuser `initdb` creates, whom every local connection is trusted to be.
const SUPERUSER: &str = "postgres";
/// How long a server may take to accept connections once started: generous, since test
/// binaries start theirs while others compile and run on the same cores.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of the server's log an error quotes (the supervising shell quotes as much).
const LOG_TAIL_LINES: usize = 40;

/// The settings the server runs with, as `postgres -c` arguments (the socket directory is
/// added to them).
const SETTINGS: &[&str] = &[
    // The Unix socket only: no TCP listener at all.
    "listen_addresses=",
    // A test's data need not survive a crash of the machine.
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    // Tests run in parallel, each with a pool of its own.
    "max_connections=300",
    "shared_buffers=32MB",
    // Statement statistics, which the replica benchmark reads (`CREATE EXTENSION
    // pg_stat_statements` in its database).
    "shared_preload_libraries=pg_stat_statements",
];

/// The supervising shell (`sh -c`; `$1` is the directory, the rest the `postgres` command).
/// File descriptor 3 is the pipe from the test process, which writes nothing to it: its end
/// of file means the test process is gone. A background job starts with `SIGINT` ignored
/// until `postgres` installs its handlers, so the watcher repeats the signal until
/// `postgres` has exited rather than send it once. When `postgres` exits on its own (it
/// failed to start, or crashed), the watcher is still reading: the shell then ends it and
/// writes the end of the log to its standard error, which the test process reads when it
/// is still waiting for the server. A broken pipe there must not stop the cleanup, hence
/// `SIGPIPE` is ignored.
const SUPERVISOR: &str = r#"
trap '' PIPE
dir=$1
shift
exec 3<&0 </dev/null
"$@" >"$dir/log" 2>&1 3<&- &
postgres=$!
{
    while read -r _; do :; done
    while kill -INT "$postgres" 2>/dev/null; do sleep 1; done
} <&3 &
watcher=$!
exec 3<&-
wait "$postgres"
status=$?
if kill "$watcher" 2>/dev/null; then
    tail -n 40 "$dir/log" >&2
fi
rm -rf "$dir"
exit "$status"
"#;

/// The server of this test binary, started on the first call. Panics, saying why, when it
/// cannot start (then at every call: it is tried once per process).
pub fn server() -> &'static PgServer {
    static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
    match SERVER.get_or_init(PgServer::start) {
        Ok(server) => server,
        Err(message) => panic!("the test PostgreSQL server did not start: {message}"),
    }
}

/// A running PostgreSQL server, reached over its Unix socket. See the [module](self) for
/// how it is set up and how it is stopped.
#[derive(Debug)]
pub struct PgServer {
    bindir: PathBuf,
    dir: PathBuf,
    /// Numbers the databases [`PgServer::fresh_database`] creates.
    databases: AtomicU64,
    /// The write end of the supervising shell's standard input, never written to: closed by
    /// the kernel when this process ends, which stops the server.
    _lifeline: ChildStdin,
}

/// A database of its own for one test, on the [`server`]. It is never dropped: it goes
/// with the server when the test binary ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgDatabase {
    /// Its name, `t_PID_N`.
    pub name: String,
    /// Its URL for sqlx and libpq (`psql`), over the Unix socket:
    /// `postgres://postgres@localhost:5432/NAME?host=/tmp/vpg-PID&sslmode=disable`.
    pub url: String,
}

impl PgServer {
    /// The directory of the server's Unix socket (`.s.PGSQL.5432`), under `/tmp`.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of the PostgreSQL binaries (`pg_config --bindir`): `psql`,
    /// `pg_dump`, … of the server's own version.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The URL of the `postgres` database, for the superuser.
    pub fn admin_url(&self) -> String {
        self.url("postgres")
    }

    /// Creates a new, empty database. Blocks (it runs `psql`), so an async test may call it
    /// before or between its awaits.
    pub fn fresh_database(&self) -> PgDatabase {
        let number = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("t_{}_{number}", std::process::id());
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        PgDatabase {
            url: self.url(&name),
            name,
        }
    }

    /// Runs `sql` with `psql` on `database` as the superuser and returns what it printed,
    /// unaligned and without headers (`psql -A -t`: one line per row, columns joined by
    /// `|`), without the last line break. Panics, quoting `psql`, when it fails.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let mut command = client(&self.bindir, "psql");
        command
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args([
                "-p",
                &PORT.to_string(),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-c",
                sql,
            ]);
        run(&mut command).unwrap_or_else(|message| panic!("{message}"))
    }

    /// The URL of `database`. The port and `sslmode` are spelled out so that `PGPORT` or
    /// `PGSSLMODE` in the environment cannot change them; the socket directory is the `host`
    /// parameter, which both sqlx and libpq take for a Unix socket when it is a path.
    fn url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@localhost:{PORT}/{database}?host={}&sslmode=disable",
            self.dir.display()
        )
    }

    fn start() -> Result<Self, String> {
        let bindir = bindir()?;
        let owner = server_owner()?;
        let dir = server_dir(owner)?;
        if let Err(message) = initdb(&bindir, &dir, owner) {
            // The supervising shell, which would remove the directory, is not started yet.
            let _ = fs::remove_dir_all(&dir);
            return Err(message);
        }
        let mut supervisor = Command::new("sh");
        supervisor
            .args(["-c", SUPERVISOR, "vigil-test-postgres"])
            .arg(&dir)
            .arg(bindir.join("postgres"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &PORT.to_string()])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()));
        for setting in SETTINGS {
            supervisor.args(["-c", setting]);
        }
        supervisor
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        without_pg_environment(&mut supervisor);
        run_as(&mut supervisor, owner);
        let mut shell = supervisor
            .spawn()
            .map_err(|error| format!("cannot run sh: {error}"))?;
        let lifeline = shell.stdin.take().expect("the shell's stdin is piped");
        let server = Self {
            bindir,
            dir,
            databases: AtomicU64::new(0),
            _lifeline: lifeline,
        };
        // On an error below, dropping `server` closes the pipe: the shell stops `postgres`
        // and removes the directory.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = shell.try_wait().map_err(|error| error.to_string())? {
                let mut log = String::new();
                if let Some(mut stderr) = shell.stderr.take() {
                    let _ = stderr.read_to_string(&mut log);
                }
                return Err(format!(
                    "postgres exited ({status}) before accepting connections; its log ends with:\n{log}"
                ));
            }
            if server.accepts_connections() {
                // The shell is not waited for: it outlives this process, whose end it awaits.
                drop(shell);
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "postgres did not accept connections on {} within {} s; its log ends with:\n{}",
                    server.dir.display(),
                    READY_TIMEOUT.as_secs(),
                    log_tail(&server.dir.join("log")),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn accepts_connections(&self) -> bool {
        let mut command = client(&self.bindir, "pg_isready");
        command.args(["-q", "-t", "5", "-h"]).arg(&self.dir).args([
            "-p",
            &PORT.to_string(),
            "-U",
            SUPERUSER,
            "-d",
            "postgres",
        ]);
        run(&mut command).is_ok()
    }
}

/// The user who runs `initdb` and `postgres`, when it is not the current one.
#[derive(Debug, Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

/// `None` for the current user, or, when that is root, the `postgres` system user.
fn server_owner() -> Result<Option<Owner>, String> {
    if id(&["-u"])? != 0 {
        return Ok(None);
    }
    let owner = Owner {
        uid: id(&["-u", SUPERUSER])?,
        gid: id(&["-g", SUPERUSER])?,
    };
    Ok(Some(owner))
}

/// A number `id ARGS` prints.
fn id(args: &[&str]) -> Result<u32, String> {
    let printed = run(Command::new("id").args(args)).map_err(|message| {
        format!(
            "{message}\n(as root, the server runs as the `{SUPERUSER}` system user, which \
             Debian's postgresql package creates)"
        )
    })?;
    printed
        .trim()
        .parse()
        .map_err(|_| format!("`id {}` printed {printed:?}", args.join(" ")))
}

/// The directory of the PostgreSQL binaries.
fn bindir() -> Result<PathBuf, String> {
    let printed = run(Command::new("pg_config").arg("--bindir")).map_err(|message| {
        format!(
            "{message}\n{}",
            crate::tools::missing("pg_config", "postgresql")
        )
    })?;
    let bindir = PathBuf::from(printed.trim());
    if !bindir.join("initdb").is_file() {
        return Err(format!(
            "`pg_config --bindir` names {}, which has no initdb: PostgreSQL's client is \
             installed, not its server; {}",
            bindir.display(),
            crate::tools::missing("initdb", "postgresql")
        ));
    }
    Ok(bindir)
}

/// Creates the server's directory, `/tmp/vpg-PID` (with a suffix when a directory of a
/// former process with the same id is still there), readable by its owner only.
fn server_dir(owner: Option<Owner>) -> Result<PathBuf, String> {
    let pid = std::process::id();
    for attempt in 0..100 {
        let dir = match attempt {
            0 => PathBuf::from(format!("/tmp/vpg-{pid}")),
            _ => PathBuf::from(format!("/tmp/vpg-{pid}-{attempt}")),
        };
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                if let Some(owner) = owner {
                    std::os::unix::fs::chown(&dir, Some(owner.uid), Some(owner.gid)).map_err(
                        |error| format!("cannot give {} to {SUPERUSER}: {error}", dir.display()),
                    )?;
                }
                return Ok(dir);
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(format!("cannot create {}: {error}", dir.display())),
        }
    }
    Err(format!("/tmp/vpg-{pid} and the next 99 names are taken"))
}

/// Creates the cluster in `dir/data`: UTF-8 with the C locale (the same on every machine),
/// and local connections trusted.
fn initdb(bindir: &Path, dir: &Path, owner: Option<Owner>) -> Result<(), String> {
    let mut command = Command::new(bindir.join("initdb"));
    command
        .arg("--pgdata")
        .arg(dir.join("data"))
        .args([
            "--auth=trust",
            &format!("--username={SUPERUSER}"),
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .current_dir(dir);
    without_pg_environment(&mut command);
    run_as(&mut command, owner);
    run(&mut command).map(drop)
}

/// A PostgreSQL client from `bindir`, run as the current user.
fn client(bindir: &Path, name: &str) -> Command {
    let mut command = Command::new(bindir.join(name));
    without_pg_environment(&mut command);
    command
}

/// Removes the `PG…` variables (`PGDATA`, `PGOPTIONS`, `PGSSLMODE`, …) from the command's
/// environment, so that the developer's settings for other servers do not leak into this
/// one or its clients.
fn without_pg_environment(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PG") {
            command.env_remove(name);
        }
    }
}

fn run_as(command: &mut Command, owner: Option<Owner>) {
    if let Some(owner) = owner {
        command.uid(owner.uid).gid(owner.gid);
    }
}

/// Runs `command` to completion and returns its standard output without the last line
/// break, or an error naming it and quoting its standard error.
fn run(command: &mut Command) -> Result<String, String> {
    let name = Path::new(command.get_program())
        .file_name()
        .unwrap_or(command.get_program())
        .to_string_lossy()
        .into_owned();
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run {name}: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{name} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        ));
    }
    let mut stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if stdout.ends_with('\n') {
        stdout.pop();
    }
    Ok(stdout)
}

/// The last lines of the file at `path`, or why it cannot be read.
fn log_tail(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::thread;

    use super::*;

    /// When set, [`holds_a_server_when_asked`] starts a server and waits for its standard
    /// input to close: the process that [`a_killed_process_leaves_no_server_behind`] kills.
    const HOLD: &str = "VIGIL_TEST_HOLD_POSTGRES";

    /// `psql` on `url`, as a test would connect: through the URL alone.
    fn psql_url(url: &str, sql: &str) -> String {
        let mut command = client(server().bindir(), "psql");
        command.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ]);
        run(&mut command).unwrap_or_else(|message| panic!("{message}"))
    }

    #[test]
    fn one_server_per_process_on_a_short_socket_path_under_tmp() {
        assert!(std::ptr::eq(server(), server()));
        let dir = server().socket_dir();
        assert!(dir.starts_with("/tmp"), "{}", dir.display());
        let socket = dir.join(format!(".s.PGSQL.{PORT}"));
        assert!(socket.as_os_str().len() <= 107, "{}", socket.display());
        assert_eq!(
            server().psql("postgres", "SHOW unix_socket_directories"),
            dir.display().to_string()
        );
        assert!(server().bindir().join("psql").is_file());
    }

    #[test]
    fn listens_on_no_tcp_address() {
        assert_eq!(server().psql("postgres", "SHOW listen_addresses"), "");
    }

    #[test]
    fn runs_with_the_settings_for_tests() {
        for (setting, value) in [
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("full_page_writes", "off"),
            ("max_connections", "300"),
            ("shared_buffers", "32MB"),
        ] {
            assert_eq!(
                server().psql("postgres", &format!("SHOW {setting}")),
                value,
                "{setting}"
            );
        }
    }

    #[test]
    fn fresh_databases_are_distinct_and_reached_through_their_urls() {
        let first = server().fresh_database();
        let second = server().fresh_database();
        assert_ne!(first.name, second.name);
        for database in [&first, &second] {
            // No server address: the connection is on the Unix socket.
            assert_eq!(
                psql_url(
                    &database.url,
                    "SELECT current_database(), inet_server_addr() IS NULL, 1"
                ),
                format!("{}|t|1", database.name)
            );
        }
        psql_url(&first.url, "CREATE TABLE only_here (id integer)");
        assert_eq!(
            psql_url(&second.url, "SELECT to_regclass('only_here') IS NULL"),
            "t"
        );
        assert_eq!(
            psql_url(&server().admin_url(), "SELECT current_database()"),
            "postgres"
        );
    }

    #[test]
    fn fresh_databases_from_many_threads_at_once() {
        let databases: Vec<PgDatabase> = thread::scope(|scope| {
            let threads: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| server().fresh_database()))
                .collect();
            threads
                .into_iter()
                .map(|thread| thread.join().unwrap())
                .collect()
        });
        for database in &databases {
            assert_eq!(psql_url(&database.url, "SELECT 1"), "1");
        }
    }

    #[test]
    fn holds_a_server_when_asked() {
        if std::env::var_os(HOLD).is_none() {
            return;
        }
        println!("socket dir: {}", server().socket_dir().display());
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }

    #[test]
    fn a_killed_process_leaves_no_server_behind() {
        let test = format!("{}::holds_a_server_when_asked", module_path!());
        let test = test.split_once("::").expect("a module path").1;
        let mut holder = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(HOLD, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(holder.stdout.take().unwrap());
        let dir = stdout
            .lines()
            .map(|line| line.unwrap())
            // After libtest's `test NAME ... ` on the same line.
            .find_map(|line| {
                let (_, dir) = line.split_once("socket dir: ")?;
                Some(PathBuf::from(dir))
            })
            .expect("the holding process names its server's directory");
        let socket = dir.join(format!(".s.PGSQL.{PORT}"));
        assert!(socket.exists(), "{}", socket.display());
        holder.kill().unwrap(); // SIGKILL: no destructor, no handler runs.
        holder.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while dir.exists() {
            assert!(
                Instant::now() < deadline,
                "{} is still there 30 s after its process was killed",
                dir.display()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}
