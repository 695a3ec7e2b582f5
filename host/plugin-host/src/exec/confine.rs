//! Where an exec command runs, and what it may touch.
//!
//! A credential command runs as vigil's user, so vigil does not start it itself: it starts
//! `vigil exec-sandbox` (its own binary, [`LAUNCHER_COMMAND`]), a launcher that
//!
//! - is a child subreaper: whatever the command starts, `setsid` or not, becomes the
//!   launcher's child when its parent dies, and is killed and reaped when the command ends
//!   or when vigil closes the launcher's standard input (its lifeline, which also closes if
//!   vigil dies). vigil never reaps a process it did not start, so tokio's child handling
//!   keeps every exit status it waits for, even when vigil is PID 1;
//! - starts the command through the same binary once more (`--confined`), which, where
//!   the kernel offers Landlock, restricts itself before it executes the command: read and
//!   execute the system trees ([`SYSTEM_TREES`]), the system files of `/etc` that name
//!   resolution, TLS and user lookups read ([`ETC_FILES`]) and the program; read and write
//!   the command's own home and temporary directory and the harmless devices; nothing else
//!   — not `/proc` (no other process's environment), not `/run` or `/var` (no
//!   service-account token), not the rest of `/etc` (kubeadm's and k3s's admin kubeconfigs
//!   live there), not vigil's database, cache, plugins, kubeconfigs or secrets — and it
//!   sends no signal outside. Landlock also sets `no_new_privs`: a setuid program gains
//!   nothing.
//!
//! Landlock only grants: it cannot carve an exception out of a granted tree. vigil therefore
//! refuses at start to run exec commands when one of its own files lies inside a tree the
//! command may use ([`Confinement::exposes`]).

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;

/// The subcommand of vigil's binary that launches an exec command.
pub const LAUNCHER_COMMAND: &str = "exec-sandbox";

/// The trees an exec command may read and execute under Landlock (those that exist): the
/// system's programs and libraries.
pub const SYSTEM_TREES: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
];

/// What of `/etc` an exec command may read under Landlock (what exists; a link is granted
/// at its target): CA certificates, name resolution, users and groups, the loader's cache,
/// the time zone.
pub const ETC_FILES: &[&str] = &[
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/crypto-policies",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/passwd",
    "/etc/group",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/os-release",
    "/etc/mime.types",
];

/// Devices an exec command may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The launcher's exit status when it could not start the command at all.
const CANNOT_START: u8 = 127;
/// The launcher's exit status when the command was stopped (vigil closed the lifeline).
const STOPPED: u8 = 137;

/// How exec commands are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// The launcher, vigil's own binary. `None`: the command is started directly, in a
    /// process group of its own and nothing more (the plugin host's own tests).
    pub launcher: Option<PathBuf>,
    /// Whether the command runs under Landlock (where the kernel offers it).
    pub landlock: bool,
    /// The commands' directory: `home` in it is their `HOME`, `tmp` their `TMPDIR`.
    pub dir: PathBuf,
    /// More files and directories commands may read under Landlock (an identity's token
    /// file).
    pub read: Vec<PathBuf>,
}

impl Default for Confinement {
    fn default() -> Self {
        Self {
            launcher: None,
            landlock: false,
            dir: default_dir(),
            read: Vec::new(),
        }
    }
}

/// `TMPDIR/vigil-exec-UID`: vigil's user's own, checked by [`Confinement::prepare`].
#[must_use]
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "vigil-exec-{}",
        rustix::process::geteuid().as_raw()
    ))
}

/// A tree a command may use, and what for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// Its real path.
    pub path: PathBuf,
    /// Whether the command may write there.
    pub writable: bool,
}

impl Confinement {
    /// The commands' `HOME`.
    #[must_use]
    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// The commands' `TMPDIR`.
    #[must_use]
    pub fn temp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// Creates the commands' directory, its home and its temporary directory (mode 0700),
    /// and checks that each is a directory of this user that no other user may enter (in a
    /// shared `/tmp`, another user could have made it first, or a link in its place).
    ///
    /// # Errors
    ///
    /// What is wrong, naming the directory.
    pub fn prepare(&self) -> Result<(), String> {
        use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
        if let Some(parent) = self.dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|error| format!("{} cannot be created: {error}", parent.display()))?;
        }
        let me = rustix::process::geteuid().as_raw();
        for dir in [self.dir.clone(), self.home(), self.temp()] {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    return Err(format!("{} cannot be created: {error}", dir.display()));
                }
            }
            let metadata = std::fs::symlink_metadata(&dir)
                .map_err(|error| format!("{}: {error}", dir.display()))?;
            if !metadata.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            if metadata.uid() != me {
                return Err(format!(
                    "{} belongs to user {}, not to vigil's ({me})",
                    dir.display(),
                    metadata.uid()
                ));
            }
            if metadata.mode() & 0o077 != 0 {
                return Err(format!(
                    "{} may be entered by other users (mode {:o}); make it 0700",
                    dir.display(),
                    metadata.mode() & 0o7777
                ));
            }
        }
        Ok(())
    }

    /// The trees a command may use under Landlock: its home and temporary directory (read
    /// and write), [`SYSTEM_TREES`], [`ETC_FILES`], [`Confinement::read`] and `programs`
    /// (read). Without Landlock every file vigil's user can open is readable: `None`.
    #[must_use]
    pub fn trees(&self, programs: &[PathBuf]) -> Option<Vec<Tree>> {
        if !self.landlock {
            return None;
        }
        let real = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_owned());
        let mut trees: Vec<Tree> = [self.home(), self.temp()]
            .into_iter()
            .map(|dir| Tree {
                path: real(&dir),
                writable: true,
            })
            .collect();
        let readable = readable_system()
            .into_iter()
            .chain(self.read.iter().map(|path| real(path)))
            .chain(programs.iter().map(|program| real(program)));
        trees.extend(readable.map(|path| Tree {
            path,
            writable: false,
        }));
        Some(trees)
    }

    /// The tree of `trees` that holds `path` (compared by real path), if any.
    #[must_use]
    pub fn exposes<'a>(trees: &'a [Tree], path: &Path) -> Option<&'a Tree> {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
        trees
            .iter()
            .find(|tree| path.starts_with(&tree.path) || tree.path.starts_with(&path))
    }

    /// The command that runs `program` with `args`: through the launcher, or directly.
    /// Its environment and standard streams are the caller's to set; its standard input is
    /// the launcher's lifeline (see [`Confinement`]) and must be a pipe kept open while the
    /// command may run.
    pub(crate) fn command(&self, program: &Path, args: &[String]) -> tokio::process::Command {
        let Some(launcher) = &self.launcher else {
            let mut command = tokio::process::Command::new(program);
            command.args(args).current_dir(self.home());
            return command;
        };
        let mut command = tokio::process::Command::new(launcher);
        command
            .arg(LAUNCHER_COMMAND)
            .args(self.launcher_args())
            .arg("--")
            .arg(program)
            .args(args)
            .current_dir(self.home());
        command
    }

    fn launcher_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if self.landlock {
            args.push("--landlock".into());
        }
        args.push("--home".into());
        args.push(self.home().into_os_string());
        args.push("--temp".into());
        args.push(self.temp().into_os_string());
        for path in &self.read {
            args.push("--read".into());
            args.push(path.clone().into_os_string());
        }
        args
    }
}

/// The real paths of [`SYSTEM_TREES`] and [`ETC_FILES`] that exist.
fn readable_system() -> Vec<PathBuf> {
    SYSTEM_TREES
        .iter()
        .chain(ETC_FILES)
        .filter_map(|path| Path::new(path).canonicalize().ok())
        .collect()
}

/// Whether the running kernel offers Landlock (its ABI version, when it does).
#[must_use]
pub fn landlock_abi() -> Option<i32> {
    use landlock::{
        ABI, Access as _, AccessFs, CompatLevel, Compatible as _, Ruleset, RulesetAttr as _,
    };
    // A ruleset created, never enforced: it only asks the kernel.
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(Ruleset::create);
    if created.is_err() {
        return None;
    }
    // The highest version the crate knows that the kernel accepts.
    [ABI::V6, ABI::V5, ABI::V4, ABI::V3, ABI::V2]
        .into_iter()
        .find(|abi| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(*abi))
                .and_then(Ruleset::create)
                .is_ok()
        })
        .map_or(Some(1), |abi| Some(abi as i32))
}

/// What the launcher was asked to do.
struct Launch {
    confined: bool,
    landlock: bool,
    home: PathBuf,
    temp: PathBuf,
    read: Vec<PathBuf>,
    program: PathBuf,
    args: Vec<OsString>,
}

impl Launch {
    fn parse(args: &[OsString]) -> Result<Self, String> {
        let mut launch = Self {
            confined: false,
            landlock: false,
            home: PathBuf::new(),
            temp: PathBuf::new(),
            read: Vec::new(),
            program: PathBuf::new(),
            args: Vec::new(),
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            match arg.to_str() {
                Some("--confined") => launch.confined = true,
                Some("--landlock") => launch.landlock = true,
                Some("--home") => launch.home = rest.next().ok_or("--home needs a value")?.into(),
                Some("--temp") => launch.temp = rest.next().ok_or("--temp needs a value")?.into(),
                Some("--read") => launch
                    .read
                    .push(rest.next().ok_or("--read needs a value")?.into()),
                Some("--") => {
                    launch.program = rest.next().ok_or("no program after --")?.into();
                    launch.args = rest.cloned().collect();
                    break;
                }
                _ => return Err(format!("unexpected argument {}", arg.to_string_lossy())),
            }
        }
        if launch.program.as_os_str().is_empty() || launch.home.as_os_str().is_empty() {
            return Err("usage: vigil exec-sandbox [--landlock] --home DIR --temp DIR [--read PATH]… -- PROGRAM [ARG…] (vigil starts it; it is not for direct use)".to_owned());
        }
        Ok(launch)
    }

    fn forwarded(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![LAUNCHER_COMMAND.into(), "--confined".into()];
        if self.landlock {
            args.push("--landlock".into());
        }
        args.extend([
            "--home".into(),
            self.home.clone().into_os_string(),
            "--temp".into(),
            self.temp.clone().into_os_string(),
        ]);
        for path in &self.read {
            args.push("--read".into());
            args.push(path.clone().into_os_string());
        }
        args.extend(["--".into(), self.program.clone().into_os_string()]);
        args.extend(self.args.iter().cloned());
        args
    }
}

/// `vigil exec-sandbox ARGS`: runs before anything else of vigil (no thread, no runtime).
/// Returns the command's exit status: its code, 128 plus its signal, [`STOPPED`] when vigil
/// stopped it, or [`CANNOT_START`] (with the reason on standard error).
#[must_use]
pub fn launcher_main(args: &[OsString]) -> ExitCode {
    let launch = match Launch::parse(args) {
        Ok(launch) => launch,
        Err(message) => {
            eprintln!("vigil {LAUNCHER_COMMAND}: {message}");
            return ExitCode::from(CANNOT_START);
        }
    };
    if launch.confined {
        confine_and_exec(&launch)
    } else {
        supervise(&launch)
    }
}

enum Ended {
    Exited(std::io::Result<ExitStatus>),
    Stopped,
}

/// The first stage: a subreaper that runs the second stage and, when it ends or vigil
/// stops it, kills and reaps every process left below it.
fn supervise(launch: &Launch) -> ExitCode {
    if let Err(error) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("vigil {LAUNCHER_COMMAND}: cannot become a subreaper: {error}");
        return ExitCode::from(CANNOT_START);
    }
    // `/proc/self/exe`: this very binary, even if a newer one replaced it on disk.
    let child = Command::new("/proc/self/exe")
        .args(launch.forwarded())
        .stdin(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            eprintln!("vigil {LAUNCHER_COMMAND}: cannot start: {error}");
            return ExitCode::from(CANNOT_START);
        }
    };
    let (sender, ended) = mpsc::channel();
    let lifeline = sender.clone();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut sink = [0_u8; 64];
        while matches!(stdin.read(&mut sink), Ok(read) if read > 0) {}
        let _ = lifeline.send(Ended::Stopped);
    });
    std::thread::spawn(move || {
        let _ = sender.send(Ended::Exited(child.wait()));
    });
    let first = ended.recv().unwrap_or(Ended::Stopped);
    end_descendants();
    match first {
        Ended::Exited(Ok(status)) => ExitCode::from(exit_code(status)),
        Ended::Exited(Err(error)) => {
            eprintln!("vigil {LAUNCHER_COMMAND}: cannot wait for the command: {error}");
            ExitCode::from(CANNOT_START)
        }
        Ended::Stopped => ExitCode::from(STOPPED),
    }
}

/// A status as a shell reports it: the code, or 128 plus the signal.
fn exit_code(status: ExitStatus) -> u8 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .and_then(|code| u8::try_from(code).ok())
        .unwrap_or(CANNOT_START)
}

/// Kills every descendant of this process and reaps them all. Each is this process's
/// child or becomes it when its parent dies (it is their subreaper), so once no child is
/// left, no descendant is: a process forked between a scan and the kills is found by the
/// next scan.
fn end_descendants() {
    let me = std::process::id();
    loop {
        for pid in descendants(me) {
            if let Some(pid) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                // Already gone is fine.
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

/// The processes below `root`, from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`: the command name may hold anything but its last `)`.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// The second stage: restricts itself (Landlock), then becomes the command.
fn confine_and_exec(launch: &Launch) -> ExitCode {
    if launch.landlock
        && let Err(error) = restrict(launch)
    {
        eprintln!("vigil {LAUNCHER_COMMAND}: Landlock: {error}");
        return ExitCode::from(CANNOT_START);
    }
    let error = Command::new(&launch.program)
        .args(&launch.args)
        .current_dir(&launch.home)
        .exec();
    eprintln!(
        "vigil {LAUNCHER_COMMAND}: cannot execute {}: {error}",
        launch.program.display()
    );
    ExitCode::from(CANNOT_START)
}

/// Restricts this process and what it executes to the command's trees (see the module's
/// documentation). A kernel without Landlock leaves it unrestricted (vigil warned at start).
fn restrict(launch: &Launch) -> Result<(), landlock::RulesetError> {
    use landlock::{
        ABI, Access as _, AccessFs, Ruleset, RulesetAttr as _, RulesetCreatedAttr as _, Scope,
        path_beneath_rules,
    };
    let abi = ABI::V6;
    let mut readable = readable_system();
    readable.extend(launch.read.iter().cloned());
    readable.push(launch.program.clone());
    let own: Vec<&OsStr> = vec![launch.home.as_os_str(), launch.temp.as_os_str()];
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::Signal)?
        .create()?
        .add_rules(path_beneath_rules(&readable, AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(&own, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(
            DEVICES.iter().filter(|device| Path::new(device).exists()),
            AccessFs::ReadFile | AccessFs::WriteFile,
        ))?
        .restrict_self()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_refuses_what_it_does_not_understand() {
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(Launch::parse(&args(&["--home", "/h", "--temp", "/t"])).is_err());
        assert!(Launch::parse(&args(&["--what", "--", "/bin/true"])).is_err());
        let launch = Launch::parse(&args(&[
            "--landlock",
            "--home",
            "/h",
            "--temp",
            "/t",
            "--",
            "/bin/echo",
            "--home",
            "x",
        ]))
        .unwrap();
        assert!(launch.landlock && !launch.confined);
        assert_eq!(launch.program, Path::new("/bin/echo"));
        assert_eq!(launch.args, args(&["--home", "x"]));
        let forwarded = launch.forwarded();
        assert_eq!(forwarded[0], LAUNCHER_COMMAND);
        assert_eq!(forwarded[1], "--confined");
        assert_eq!(
            &forwarded[forwarded.len() - 3..],
            &args(&["/bin/echo", "--home", "x"])[..]
        );
    }

    #[test]
    fn a_tree_exposes_what_lies_inside_it_and_what_holds_it() {
        let trees = vec![
            Tree {
                path: PathBuf::from("/srv/exec/home"),
                writable: true,
            },
            Tree {
                path: PathBuf::from("/usr"),
                writable: false,
            },
        ];
        let found =
            |path: &str| Confinement::exposes(&trees, Path::new(path)).map(|t| t.path.clone());
        assert_eq!(found("/usr/share/vigil/db"), Some(PathBuf::from("/usr")));
        // A home inside vigil's data directory exposes nothing of it but the home itself;
        // vigil's data directory holding the home is refused (the command writes there).
        assert_eq!(found("/srv/exec"), Some(PathBuf::from("/srv/exec/home")));
        assert_eq!(found("/srv/other/db"), None);
        assert_eq!(found("/usrx/db"), None);
    }
}
