//! Taking a shell snapshot ([`crate::shell`]): the user's login shell runs
//! once through the executor itself (a contained process tree with a
//! timeout, killed whole when it runs over) and writes its state to
//! in-memory files it inherits by descriptor, one per part: its
//! environment (`env -0`), its functions (each on its own, completion
//! functions `_*` left out), its aliases and, for bash, its options. The
//! server then keeps what bash can use, scrubbed:
//!
//! - variables: valid names only, not the shell's own bookkeeping (`PWD`,
//!   `SHLVL`, prompts, history), not what every command gets set anyway
//!   (`TERM`, `TMPDIR`, the proxy), not credentials (the executor's scrub
//!   rules, by name and by value, `--keep-env` honoured), and only those
//!   that differ from the server's own; `PATH` without repeated entries;
//! - functions and aliases that bash parses (`bash -n`, one at a time: a
//!   zsh function bash cannot read is dropped by name, not the lot) and
//!   that carry no credential;
//! - the glob options of `shopt` (`extglob`, `globstar`, `nullglob`, …),
//!   with `expand_aliases` on so the aliases apply.
//!
//! The finished script is sealed in memory and checked by sourcing it
//! once, the way every command will.
//!
//! With a sandbox provider the shell runs confined (`read-only`, its
//! workspace an empty directory of its own; network off; credential files
//! hidden; under bubblewrap an in-memory `/tmp`): nothing in the home is writable, so a start-up file that takes a
//! lock (`pyenv init`'s rehash), writes a history or a cache simply fails
//! there, and a snapshot stopped at any moment (by its bound, or by a
//! client restarting the server) leaves the home exactly as it was. With
//! none, or none usable on this host, it runs unconfined and its summary
//! says so (`confined: false`).

use std::collections::{BTreeMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor, BashRunResult};
use dsh_sandbox::SandboxProvider;

use crate::shell::{ShellSnapshot, SnapshotError, SnapshotSource, SnapshotSummary};
use crate::{Invocation, LocalBashExecutor};

/// The most bytes read of each part the shell wrote.
const MAX_PART_BYTES: u64 = 8 << 20;

/// Variables a snapshot never carries: the shell's own bookkeeping, and
/// what every command is given anyway.
const NOT_CARRIED: [&str; 36] = [
    "PWD", "OLDPWD", "SHLVL", "_", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS",
    "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "HISTFILE", "HISTSIZE", "HISTFILESIZE",
    "HISTCONTROL", "TERM", "COLUMNS", "LINES", "TMPDIR", "TMP", "TEMP", "TMOUT",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
    "all_proxy", "no_proxy", "NO_COLOR", "PAGER", "GIT_PAGER", "BASH_XTRACEFD",
];

/// The `shopt` options carried: the ones that change how a command's
/// words are globbed.
const CARRIED_OPTIONS: [&str; 8] = [
    "extglob", "globstar", "nullglob", "dotglob", "nocaseglob", "failglob", "globasciiranges",
    "nocasematch",
];

/// The parts a shell writes, each to its own descriptor.
const PARTS: [&str; 5] = ["ENV", "FUNCTIONS", "ALIASES", "OPTIONS", "COMPLETIONS"];

/// What bash runs to write its state (after its start-up files).
const BASH_DUMP: &str = r#"builtin command -p env -0 >&"$DSH_SNAP_ENV" || builtin exit 3
for __dsh_f in $(builtin compgen -A function); do
  builtin declare -f -- "$__dsh_f"; builtin printf '\0'
done >&"$DSH_SNAP_FUNCTIONS"
for __dsh_a in "${!BASH_ALIASES[@]}"; do
  builtin printf 'alias %s=%q\0' "$__dsh_a" "${BASH_ALIASES[$__dsh_a]}"
done >&"$DSH_SNAP_ALIASES"
builtin shopt -p >&"$DSH_SNAP_OPTIONS"
builtin complete -p >&"$DSH_SNAP_COMPLETIONS" 2>/dev/null
builtin exit 0
"#;

/// What zsh runs to write its state (after its start-up files).
const ZSH_DUMP: &str = r#"builtin command -p env -0 >&"$DSH_SNAP_ENV" || builtin exit 3
for __dsh_f in ${(k)functions}; do
  case $__dsh_f in _[a-z]*|-*) builtin continue ;; esac
  builtin functions -- "$__dsh_f"; builtin printf '\0'
done >&"$DSH_SNAP_FUNCTIONS"
builtin alias -rL >&"$DSH_SNAP_ALIASES"
builtin exit 0
"#;

/// Which shell's syntax a snapshot is taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bash,
    Zsh,
}

/// Takes a snapshot of `source` through `executor`, each attempt bounded
/// by `timeout`: an interactive login shell first, then, if it runs over,
/// a login shell that skips the interactive rc file; a file is sourced by
/// bash once.
///
/// # Errors
///
/// When the shell is not bash or zsh, runs over both times, fails, or the
/// result does not source in bash.
pub async fn take_shell_snapshot(
    executor: &LocalBashExecutor,
    source: &SnapshotSource,
    timeout: Duration,
    sandbox: Option<&dyn SandboxProvider>,
) -> Result<ShellSnapshot, SnapshotError> {
    let (name, kind, attempts) = attempts(executor, source)?;
    let mut without_rc = false;
    let mut parts = None;
    let mut confined = sandbox.is_some();
    for (index, argv) in attempts.iter().enumerate() {
        let shell = Shell {
            argv,
            file: file_environment(source),
            timeout,
            name: &name,
            sandbox: sandbox.filter(|_| confined),
        };
        let dumped = match dump(executor, &shell).await {
            Err(SnapshotError::Unconfinable { detail }) => {
                tracing::warn!(shell = %name, "the shell snapshot runs unconfined: no sandbox here ({detail})");
                confined = false;
                let shell = Shell { sandbox: None, ..shell };
                dump(executor, &shell).await?
            }
            other => other?,
        };
        match dumped {
            Some(written) => {
                without_rc = index > 0;
                parts = Some(written);
                break;
            }
            None => tracing::warn!(shell = %name, "the shell snapshot ran over {} s; trying again without the rc file", timeout.as_secs()),
        }
    }
    let Some([env, functions, aliases, options, completions]) = parts else {
        return Err(SnapshotError::TimedOut {
            shell: name,
            secs: timeout.as_secs(),
        });
    };
    let scrub = &executor.config().scrub;
    let mut summary = SnapshotSummary {
        source: name,
        without_rc,
        confined,
        ..SnapshotSummary::default()
    };
    let vars = variables(&env, scrub, &mut summary);
    let mut chunks = chunks(&functions, &aliases, kind);
    drop_completions(&mut chunks, &completions);
    keep_parsable(executor, &mut chunks, &mut summary).await?;
    let (script, definitions) = script(&chunks, &options, &mut summary);
    let seal = |text: &str| {
        crate::sys::sealed_text(text.as_bytes())
            .map(Arc::new)
            .map_err(io_error("seal the script"))
    };
    let snapshot = ShellSnapshot {
        vars,
        script: seal(&script)?,
        definitions: if definitions.is_empty() {
            None
        } else {
            Some(seal(&definitions)?)
        },
        summary,
    };
    check_sources(executor, &snapshot).await?;
    Ok(snapshot)
}

fn io_error(what: &'static str) -> impl Fn(std::io::Error) -> SnapshotError {
    move |err| SnapshotError::Io {
        detail: format!("{what}: {err}"),
    }
}

type Attempts = (String, Kind, Vec<Vec<OsString>>);

/// The shell's name, its syntax, and the argv of each attempt.
fn attempts(executor: &LocalBashExecutor, source: &SnapshotSource) -> Result<Attempts, SnapshotError> {
    match source {
        SnapshotSource::File(path) => {
            let bash = executor.config().shell.clone().into_os_string();
            let text = format!("builtin source \"$DSH_SNAP_FILE\" || builtin exit 4\n{BASH_DUMP}");
            let argv = vec![bash, "--noprofile".into(), "--norc".into(), "-c".into(), text.into()];
            Ok((path.display().to_string(), Kind::Bash, vec![argv]))
        }
        SnapshotSource::Login { shell } => {
            let name = shell.display().to_string();
            let kind = match shell.file_name().and_then(OsStr::to_str) {
                Some("bash") => Kind::Bash,
                Some("zsh") => Kind::Zsh,
                _ => return Err(SnapshotError::UnsupportedShell { shell: name }),
            };
            let (plain, rc) = match kind {
                Kind::Bash => (BASH_DUMP, bashrc_line()),
                Kind::Zsh => (ZSH_DUMP, ""),
            };
            let dump = format!("{rc}{plain}");
            let program = shell.clone().into_os_string();
            let argv = |flags: &[&str], text: &str| {
                let mut argv = vec![program.clone()];
                argv.extend(flags.iter().map(OsString::from));
                argv.push(text.into());
                argv
            };
            Ok((name, kind, vec![argv(&["-l", "-i", "-c"], &dump), argv(&["-l", "-c"], plain)]))
        }
    }
}

/// bash as a login shell reads its profile, not `~/.bashrc`, unless the
/// profile sources it (Debian's does): the line that reads it then.
fn bashrc_line() -> &'static str {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let reads_bashrc = home.as_ref().is_some_and(|home| {
        [".bash_profile", ".bash_login", ".profile"]
            .iter()
            .map(|name| home.join(name))
            .find(|path| path.exists())
            .and_then(|path| std::fs::read_to_string(path).ok())
            .is_some_and(|text| text.contains("bashrc"))
    });
    if reads_bashrc {
        ""
    } else {
        "[ -r ~/.bashrc ] && builtin source ~/.bashrc\n"
    }
}

/// One attempt: the shell's argv, the file it sources (if any), its
/// bound, its name for errors, and the sandbox it runs in.
struct Shell<'a> {
    argv: &'a [OsString],
    file: Option<(OsString, Option<OsString>)>,
    timeout: Duration,
    name: &'a str,
    sandbox: Option<&'a dyn SandboxProvider>,
}

/// Runs one attempt; `None` when it ran over its time.
async fn dump(
    executor: &LocalBashExecutor,
    shell: &Shell<'_>,
) -> Result<Option<[Vec<u8>; 5]>, SnapshotError> {
    let files = PARTS
        .iter()
        .map(|_| crate::sys::memory_file().map(Arc::new))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_error("make the in-memory files"))?;
    let mut environment: Vec<(OsString, Option<OsString>)> = PARTS
        .iter()
        .zip(&files)
        .map(|(part, file)| {
            (
                format!("DSH_SNAP_{part}").into(),
                Some(file.as_raw_fd().to_string().into()),
            )
        })
        .collect();
    environment.extend(shell.file.clone());
    let invocation = plain(shell.argv.to_vec(), files.clone(), environment);
    let result = match shell.sandbox {
        Some(sandbox) => run_confined(executor, sandbox, invocation, shell.timeout).await?,
        None => launch(executor, invocation, shell.timeout).await?,
    };
    if result.timed_out {
        return Ok(None);
    }
    if result.exit_code != Some(0) {
        let status = result
            .signal
            .clone()
            .unwrap_or_else(|| format!("exit code {}", result.exit_code.unwrap_or(-1)));
        let stderr = result.stderr.text.trim();
        let tail = &stderr[stderr.len().saturating_sub(600)..];
        return Err(SnapshotError::Failed {
            shell: shell.name.to_owned(),
            status,
            stderr: tail.chars().filter(|c| !c.is_control() || *c == '\n').collect(),
        });
    }
    let mut parts: [Vec<u8>; 5] = Default::default();
    for (part, file) in parts.iter_mut().zip(&files) {
        *part = read_part(file).map_err(io_error("read what the shell wrote"))?;
    }
    Ok(Some(parts))
}

/// Runs `plain` confined by `sandbox` in `read-only` mode over an empty
/// directory of its own, removed after.
async fn run_confined(
    executor: &LocalBashExecutor,
    sandbox: &dyn SandboxProvider,
    plain: Invocation,
    timeout: Duration,
) -> Result<BashRunResult, SnapshotError> {
    let unconfinable = |detail: String| SnapshotError::Unconfinable { detail };
    let scratch = OwnDirectory::create().map_err(io_error("make the snapshot's own directory"))?;
    let workspace =
        dsh_sandbox::Workspace::open(scratch.path()).map_err(|err| unconfinable(err.to_string()))?;
    // Read-only: under Landlock `workspace-write` leaves modes and times
    // outside the workspace changeable (the `metadata` gap), read-only
    // with its syscall filter does not; bubblewrap gives it an in-memory
    // /tmp either way.
    let mut policy =
        dsh_sandbox::SandboxPolicy::new(dsh_sandbox::SandboxMode::ReadOnly, workspace);
    // Once, at start: a few dozen `lstat`s.
    policy.hidden = dsh_sandbox::HiddenPaths::default().resolve(&dsh_sandbox::homes());
    let mut confinement = sandbox
        .confine(&plain.argv, &policy)
        .await
        .map_err(|err| unconfinable(err.to_string()))?;
    let held = std::mem::take(&mut confinement.held);
    let mut invocation = confinement.invocation;
    invocation.restriction.keep_fds.extend(plain.restriction.keep_fds);
    invocation.environment.extend(plain.environment);
    let result = launch(executor, invocation, timeout).await;
    // The tree is gone once the run returned: what it held goes, then its
    // directory.
    drop(held);
    drop(scratch);
    result
}

/// The confined shell's own directory, named like a command's private
/// `TMPDIR` (so a dead server's is swept with those) and removed beneath
/// descriptors, never through a link, when dropped.
struct OwnDirectory {
    path: std::path::PathBuf,
    parent: std::fs::File,
    name: OsString,
}

impl OwnDirectory {
    fn create() -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let parent = crate::scratch::temp_dir();
        let path = tempfile::Builder::new()
            .prefix(&format!(
                "{}{}-",
                crate::scratch::PRIVATE_TMP_PREFIX,
                crate::scratch::owner_tag()
            ))
            .rand_bytes(crate::scratch::RANDOM_LEN)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)?
            .keep();
        let name = path.file_name().map(ToOwned::to_owned).unwrap_or_default();
        match std::fs::File::open(&parent) {
            Ok(parent) => Ok(OwnDirectory { path, parent, name }),
            Err(err) => {
                let _ = std::fs::remove_dir(&path);
                Err(err)
            }
        }
    }

    fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for OwnDirectory {
    fn drop(&mut self) {
        if let Err(err) = crate::scratch::remove_tree_at(&self.parent, &self.name) {
            tracing::warn!(path = %self.path.display(), "the shell snapshot's directory stays: {err}");
        }
    }
}

/// Runs `argv` through the executor's own launcher, keeping `files` open
/// in it, with `environment` set.
async fn run(
    executor: &LocalBashExecutor,
    argv: Vec<OsString>,
    files: Vec<Arc<OwnedFd>>,
    environment: Vec<(OsString, Option<OsString>)>,
    timeout: Duration,
) -> Result<BashRunResult, SnapshotError> {
    launch(executor, plain(argv, files, environment), timeout).await
}

/// `argv` unconfined, keeping `files` open in it, with `environment` set.
fn plain(
    argv: Vec<OsString>,
    files: Vec<Arc<OwnedFd>>,
    environment: Vec<(OsString, Option<OsString>)>,
) -> Invocation {
    Invocation {
        argv,
        restriction: dsh_sandbox::Restriction {
            keep_fds: files,
            enter: None,
            ..dsh_sandbox::Restriction::default()
        },
        environment,
        ..Invocation::default()
    }
}

/// Runs `invocation` through the executor's own launcher in the home.
async fn launch(
    executor: &LocalBashExecutor,
    invocation: Invocation,
    timeout: Duration,
) -> Result<BashRunResult, SnapshotError> {
    let mut request = BashExecRequest::new("");
    request.timeout = Some(timeout);
    request.workdir = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|home| home.is_dir());
    let spec = executor.resolve(request).map_err(|err| SnapshotError::Io {
        detail: err.to_string(),
    })?;
    executor
        .run_invocation(spec, invocation)
        .await
        .map_err(|err| SnapshotError::Io {
            detail: err.to_string(),
        })
}

fn read_part(file: &OwnedFd) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::from(file.try_clone()?);
    file.rewind()?;
    let mut bytes = Vec::new();
    file.take(MAX_PART_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The variables worth carrying, scrubbed (see the module docs).
fn variables(
    env: &[u8],
    scrub: &crate::ScrubPolicy,
    summary: &mut SnapshotSummary,
) -> Vec<(OsString, OsString)> {
    let server: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let mut vars = Vec::new();
    for entry in env.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let Some(at) = entry.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (name, value) = (&entry[..at], &entry[at + 1..]);
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        // What a sandbox runner's loader would act on before confinement
        // (an `LD_LIBRARY_PATH` with an empty entry loads from the
        // workspace) never comes from a snapshot.
        if !is_identifier(name)
            || NOT_CARRIED.contains(&name)
            || name.starts_with("DSH_")
            || dsh_sandbox::acts_before_the_sandbox(name)
        {
            continue;
        }
        let value = if name == "PATH" {
            distinct_entries(value)
        } else {
            value.to_vec()
        };
        if scrub.drops_entry(name, &String::from_utf8_lossy(&value)) {
            summary.scrubbed.push(name.to_owned());
            continue;
        }
        let value = OsString::from_vec(value);
        if server.get(OsStr::new(name)) != Some(&value) {
            vars.push((OsString::from(name), value));
        }
    }
    summary.variables = vars.len();
    vars
}

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `PATH` with each directory once, first place kept.
fn distinct_entries(path: &[u8]) -> Vec<u8> {
    let mut seen = HashSet::new();
    let kept: Vec<&[u8]> = path
        .split(|b| *b == b':')
        .filter(|dir| !dir.is_empty() && seen.insert(*dir))
        .collect();
    kept.join(&b':')
}

/// One function or alias definition, with its name.
#[derive(Debug)]
struct Chunk {
    what: &'static str,
    name: String,
    text: String,
}

/// The definitions to check: functions, then plain aliases.
fn chunks(functions: &[u8], aliases: &[u8], kind: Kind) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    for text in functions.split(|b| *b == 0) {
        let text = String::from_utf8_lossy(text).trim().to_owned();
        let Some(name) = text.split_whitespace().next().map(str::to_owned) else {
            continue;
        };
        // zsh's stand-in for a function it has not loaded yet.
        if kind == Kind::Zsh && text.contains("builtin autoload -X") {
            continue;
        }
        chunks.push(Chunk {
            what: "function",
            name,
            text,
        });
    }
    // bash's aliases come one per NUL, each value quoted by `printf %q`
    // (a newline in it is `$'\n'`); zsh's `alias -rL` quotes newlines the
    // same way, one per line. A definition that still spans lines is not
    // one: a line of it could be anything (`alias y=1; code`), so it is
    // left out whole.
    let aliases = String::from_utf8_lossy(aliases);
    let definitions: Vec<&str> = match kind {
        Kind::Bash => aliases.split('\0').collect(),
        Kind::Zsh => aliases.lines().collect(),
    };
    for line in definitions {
        let Some(rest) = line.strip_prefix("alias ") else {
            continue;
        };
        if rest.starts_with('-') || line.contains('\n') || line.contains('\r') {
            continue;
        }
        let name = rest.split('=').next().unwrap_or_default().to_owned();
        chunks.push(Chunk {
            what: "alias",
            name,
            text: line.to_owned(),
        });
    }
    chunks
}

/// Why a definition is not carried, before bash is asked: a name bash
/// cannot define, a credential in its text (by value, or an assignment to
/// a name the scrub drops), an alias that makes `rm`, `cp`, `mv` or `ln`
/// ask (a command's stdin is `/dev/null`: it would do nothing, exit 0).
fn unfit(chunk: &Chunk, scrub: &crate::ScrubPolicy) -> Option<&'static str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.:+@%,".contains(c);
    if chunk.name.is_empty() || !chunk.name.chars().all(plain) {
        return Some("a name bash cannot define");
    }
    if crate::secrets::carries_credential(&chunk.text) {
        return Some("it carries a credential");
    }
    let assigns_secret = chunk
        .text
        .split(|c: char| c.is_whitespace() || ";'\"`(){}|&".contains(c))
        .filter_map(|word| word.split_once('='))
        .any(|(name, value)| is_identifier(name) && scrub.drops_entry(name, value));
    if assigns_secret {
        return Some("it sets a credential");
    }
    let asks = chunk.what == "alias"
        && ["rm", "cp", "mv", "ln"].contains(&chunk.name.as_str())
        && (chunk.text.contains(" -i") || chunk.text.contains("--interactive"));
    asks.then_some("it makes the command ask, and commands have no one to answer")
}

/// Leaves out the functions bash's programmable completion calls
/// (`complete -F name`): they serve a terminal's Tab, not a command, and
/// there are hundreds. Helpers such as conda's `__conda_activate` stay.
fn drop_completions(chunks: &mut Vec<Chunk>, completions: &[u8]) {
    let text = String::from_utf8_lossy(completions);
    let completing: HashSet<&str> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "-F")?;
            words.next()
        })
        .collect();
    chunks.retain(|chunk| chunk.what != "function" || !completing.contains(chunk.name.as_str()));
}

/// Drops each definition bash cannot parse or that carries a credential,
/// by name.
async fn keep_parsable(
    executor: &LocalBashExecutor,
    chunks: &mut Vec<Chunk>,
    summary: &mut SnapshotSummary,
) -> Result<(), SnapshotError> {
    let scrub = &executor.config().scrub;
    chunks.retain(|chunk| match unfit(chunk, scrub) {
        Some(why) => {
            summary.dropped.push(format!("{} {} ({why})", chunk.what, chunk.name));
            false
        }
        None => true,
    });
    if chunks.is_empty() {
        return Ok(());
    }
    let mut all = Vec::new();
    let mut joined = Vec::new();
    for chunk in chunks.iter() {
        all.extend_from_slice(chunk.text.as_bytes());
        all.push(0);
        joined.extend_from_slice(chunk.text.as_bytes());
        joined.push(b'\n');
    }
    let seal = |bytes: &[u8]| {
        crate::sys::sealed_text(bytes)
            .map(Arc::new)
            .map_err(io_error("seal the definitions"))
    };
    let (each, whole) = (seal(&all)?, seal(&joined)?);
    // All at once first (one process in the common case), one by one only
    // when that fails.
    let checker = r#"if "$BASH" --noprofile --norc -n "/dev/fd/$DSH_SNAP_WHOLE" 2>/dev/null; then builtin printf all; builtin exit 0; fi
while IFS= builtin read -r -d '' __dsh_c; do
  if builtin printf '%s\n' "$__dsh_c" | "$BASH" --noprofile --norc -n 2>/dev/null; then builtin printf 1; else builtin printf 0; fi
done < "/dev/fd/$DSH_SNAP_CHUNKS""#;
    let bash = executor.config().shell.clone().into_os_string();
    let argv = vec![bash, "--noprofile".into(), "--norc".into(), "-c".into(), checker.into()];
    let fd = |name: &str, file: &Arc<OwnedFd>| {
        (
            OsString::from(name),
            Some(OsString::from(file.as_raw_fd().to_string())),
        )
    };
    let environment = vec![fd("DSH_SNAP_CHUNKS", &each), fd("DSH_SNAP_WHOLE", &whole)];
    let result = run(executor, argv, vec![each, whole], environment, Duration::from_secs(60)).await?;
    if result.stdout.text == "all" {
        return Ok(());
    }
    let verdicts = result.stdout.text.into_bytes();
    if verdicts.len() != chunks.len() {
        return Err(SnapshotError::Invalid {
            detail: format!(
                "checking {} definitions gave {} answers",
                chunks.len(),
                verdicts.len()
            ),
        });
    }
    let mut verdicts = verdicts.into_iter();
    chunks.retain(|chunk| {
        let parses = verdicts.next() == Some(b'1');
        if !parses {
            tracing::info!(what = chunk.what, name = %chunk.name, "left out of the shell snapshot: bash cannot parse it");
            summary.dropped.push(format!("{} {} (bash cannot parse it)", chunk.what, chunk.name));
        }
        parses
    });
    Ok(())
}

/// The script every command sources: the prologue, the options, then the
/// definitions.
/// Loads a function's definition the first time its stub is called
/// (lines `$1`.., `$2` of them, of the definitions file), then runs it
/// with the rest of the arguments: builtins only (no
/// process is started), with aliases off while it is read (the body was
/// expanded when the user's shell defined it).
const LOADER: &str = r#"__dsh_defs=${DSH_SNAP_DEFS-}
builtin unset DSH_SNAP_DEFS
__dsh_load() {
  builtin local -a __dsh_l
  builtin local __dsh_src __dsh_aliases=-u
  builtin mapfile -t -s "$1" -n "$2" __dsh_l < "/dev/fd/$__dsh_defs" || builtin return 127
  builtin printf -v __dsh_src '%s\n' "${__dsh_l[@]}"
  builtin shopt -q expand_aliases && __dsh_aliases=-s
  builtin shopt -u expand_aliases
  builtin unset -f -- "${FUNCNAME[1]}"
  builtin eval "$__dsh_src"
  builtin shopt "$__dsh_aliases" expand_aliases
  builtin declare -F -- "${FUNCNAME[1]}" >/dev/null || builtin return 127
  builtin shift 2
  "${FUNCNAME[1]}" "$@"
}
"#;

/// The two texts of a snapshot: the script every command sources (the
/// prologue, the options, the aliases, a one-line stub per function) and
/// the functions' definitions, which a stub loads when first called.
fn script(chunks: &[Chunk], options: &[u8], summary: &mut SnapshotSummary) -> (String, String) {
    let mut script = String::from(crate::shell::PROLOGUE);
    script.push_str("builtin shopt -s expand_aliases\n");
    for line in String::from_utf8_lossy(options).lines() {
        let carried = line
            .strip_prefix("shopt -s ")
            .or_else(|| line.strip_prefix("shopt -u "))
            .is_some_and(|name| CARRIED_OPTIONS.contains(&name));
        if carried {
            script.push_str("builtin ");
            script.push_str(line);
            script.push('\n');
        }
    }
    let mut definitions = String::new();
    let mut stubs = String::new();
    let mut line = 0;
    for chunk in chunks.iter().filter(|chunk| chunk.what == "function") {
        let lines = chunk.text.lines().count();
        definitions.push_str(&chunk.text);
        definitions.push('\n');
        stubs.push_str(&format!("{}() {{ __dsh_load {line} {lines} \"$@\"; }}\n", chunk.name));
        line += lines;
        summary.functions += 1;
    }
    if !stubs.is_empty() {
        script.push_str(LOADER);
        script.push_str(&stubs);
    }
    for chunk in chunks.iter().filter(|chunk| chunk.what != "function") {
        script.push_str(&chunk.text);
        script.push('\n');
        summary.aliases += 1;
    }
    summary.script_bytes = script.len();
    summary.definition_bytes = definitions.len();
    (script, definitions)
}

/// Sources the snapshot once, the way every command will.
async fn check_sources(executor: &LocalBashExecutor, snapshot: &ShellSnapshot) -> Result<(), SnapshotError> {
    let bash = executor.config().shell.clone().into_os_string();
    let argv = vec![bash, "-c".into(), "builtin printf ok".into()];
    let mut environment: Vec<(OsString, Option<OsString>)> = snapshot
        .vars
        .iter()
        .map(|(name, value)| (name.clone(), Some(value.clone())))
        .collect();
    environment.push((
        "BASH_ENV".into(),
        Some(format!("/dev/fd/{}", snapshot.script.as_raw_fd()).into()),
    ));
    let mut kept = vec![Arc::clone(&snapshot.script)];
    if let Some(definitions) = &snapshot.definitions {
        environment.push((
            "DSH_SNAP_DEFS".into(),
            Some(definitions.as_raw_fd().to_string().into()),
        ));
        kept.push(Arc::clone(definitions));
    }
    let result = run(executor, argv, kept, environment, Duration::from_secs(30)).await?;
    if result.exit_code == Some(0) && result.stdout.text == "ok" {
        if !result.stderr.text.trim().is_empty() {
            tracing::warn!(stderr = %result.stderr.text.trim(), "the shell snapshot printed this when sourced");
        }
        return Ok(());
    }
    Err(SnapshotError::Invalid {
        detail: format!(
            "exit {:?}, stdout {:?}, stderr {:?}",
            result.exit_code,
            result.stdout.text,
            result.stderr.text.trim()
        ),
    })
}

/// Where the snapshot file of `--shell-snapshot FILE` is named to the
/// shell that sources it.
fn file_environment(source: &SnapshotSource) -> Option<(OsString, Option<OsString>)> {
    match source {
        SnapshotSource::File(path) => Some(("DSH_SNAP_FILE".into(), Some(path.clone().into_os_string()))),
        SnapshotSource::Login { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_in_a_pwd_name_is_no_credential() {
        let chunk = |text: &str| Chunk {
            what: "function",
            name: "hook".into(),
            text: text.into(),
        };
        let scrub = crate::ScrubPolicy::default();
        // pyenv-virtualenv's hook keeps the directory it last saw.
        let hook = chunk("_pyenv_virtualenv_hook () { local ret=$?; if [ \"$_PYENV_VH_PWD\" != \"$PWD\" ]; then _PYENV_VH_PWD=\"${PWD}\"; fi; }");
        assert_eq!(unfit(&hook, &scrub), None);
        let password = chunk("connect () { MYSQL_PWD=hunter2 mysql; }");
        assert_eq!(unfit(&password, &scrub), Some("it sets a credential"));
    }

    #[test]
    fn path_keeps_each_directory_once() {
        assert_eq!(distinct_entries(b"/a:/b:/a::/c:/b"), b"/a:/b:/c");
    }

    #[test]
    fn names_are_identifiers() {
        assert!(is_identifier("NVM_DIR") && is_identifier("_x1"));
        assert!(!is_identifier("1x") && !is_identifier("BASH_FUNC_f%%") && !is_identifier(""));
    }

    #[test]
    fn chunks_are_named_and_zsh_stand_ins_skipped() {
        let functions = b"greet () \n{ \n    echo hi\n}\0lazy () {\n\t# undefined\n\tbuiltin autoload -XU\n}\0";
        let aliases = b"alias ll='ls -l'\nalias -g G='| grep'\n";
        let chunks = chunks(functions, aliases, Kind::Zsh);
        let names: Vec<_> = chunks.iter().map(|c| (c.what, c.name.as_str())).collect();
        assert_eq!(names, [("function", "greet"), ("alias", "ll")]);
    }

    #[test]
    fn a_line_inside_an_alias_never_becomes_a_definition_of_its_own() {
        // Unquoted, as `alias -p` printed it: the second line would have
        // been an alias of its own, and its code would run on sourcing.
        let aliases = b"alias x='echo a\nalias y=1; touch /tmp/pwned #'\0alias ok=$'echo a\\nb'\0";
        let chunks = chunks(b"", aliases, Kind::Bash);
        let names: Vec<_> = chunks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ok"]);
    }
}
