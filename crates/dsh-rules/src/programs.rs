//! What programs do with the words after them: wrappers that run the rest
//! as a command (`env`, `timeout`, `sudo`, …), shells that run a string
//! or their input, and builtins that run a string (`eval`, `trap`).

use crate::words::Arg;

/// A program that runs the words after its own options as a command.
struct Wrapper {
    name: &'static str,
    /// Options that take the next word as their value (unless given as
    /// `--opt=value` or, for one-letter ones, `-ovalue`).
    with_value: &'static [&'static str],
    /// Options that take none.
    flags: &'static [&'static str],
    /// Words between the options and the command (`timeout`'s duration).
    operands: usize,
    /// `NAME=value` words before the command are skipped (`env`, `sudo`).
    assignments: bool,
    /// The command also gets words read from the input (`xargs`).
    reads_input: bool,
    /// With no command, it starts a shell reading its input (`sudo -s`,
    /// `su`, `chroot DIR`).
    shell_when_bare: bool,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper::new(
        "env",
        &["-u", "--unset", "-C", "--chdir"],
        &[
            "-i",
            "--ignore-environment",
            "-0",
            "--null",
            "-v",
            "--debug",
            "-",
            "--default-signal",
            "--ignore-signal",
            "--block-signal",
            "--list-signal-handling",
        ],
    )
    .assignments(),
    Wrapper::new(
        "timeout",
        &["-s", "--signal", "-k", "--kill-after"],
        &[
            "--foreground",
            "--preserve-status",
            "-v",
            "--verbose",
            "-f",
            "-p",
        ],
    )
    .operands(1),
    Wrapper::new("nice", &["-n", "--adjustment"], &[]),
    Wrapper::new("nohup", &[], &[]),
    Wrapper::new("command", &[], &["-p", "-v", "-V"]),
    Wrapper::new("builtin", &[], &[]),
    Wrapper::new("exec", &["-a"], &["-c", "-l", "-cl", "-lc"]),
    Wrapper::new("busybox", &[], &[]),
    Wrapper::new(
        "xargs",
        &[
            "-a",
            "--arg-file",
            "-d",
            "--delimiter",
            "-E",
            "-I",
            "-L",
            "-n",
            "--max-args",
            "-P",
            "--max-procs",
            "-s",
            "--max-chars",
            "--process-slot-var",
        ],
        &[
            "-0",
            "--null",
            "-r",
            "--no-run-if-empty",
            "-t",
            "--verbose",
            "-p",
            "--interactive",
            "-x",
            "--exit",
            "-o",
            "--open-tty",
            "-e",
            "-i",
            "-l",
            "--show-limits",
        ],
    )
    .reads_input(),
    Wrapper::new(
        "sudo",
        &[
            "-C",
            "--close-from",
            "-D",
            "--chdir",
            "-g",
            "--group",
            "-h",
            "--host",
            "-p",
            "--prompt",
            "-R",
            "--chroot",
            "-r",
            "--role",
            "-t",
            "--type",
            "-T",
            "--command-timeout",
            "-U",
            "--other-user",
            "-u",
            "--user",
        ],
        &[
            "-A",
            "--askpass",
            "-b",
            "--background",
            "-E",
            "--preserve-env",
            "-H",
            "--set-home",
            "-i",
            "--login",
            "-k",
            "--reset-timestamp",
            "-K",
            "--remove-timestamp",
            "-n",
            "--non-interactive",
            "-P",
            "--preserve-groups",
            "-S",
            "--stdin",
            "-s",
            "--shell",
            "-B",
            "--bell",
        ],
    )
    .assignments()
    .shell_when_bare(),
    Wrapper::new("doas", &["-u", "-C"], &["-n", "-s", "-L"]).shell_when_bare(),
    Wrapper::new(
        "stdbuf",
        &["-i", "--input", "-o", "--output", "-e", "--error"],
        &[],
    ),
    Wrapper::new(
        "time",
        &["-f", "--format", "-o", "--output"],
        &[
            "-p",
            "--portability",
            "-a",
            "--append",
            "-v",
            "--verbose",
            "-q",
            "--quiet",
        ],
    ),
    Wrapper::new(
        "ionice",
        &["-c", "--class", "-n", "--classdata"],
        &["-t", "--ignore"],
    ),
    Wrapper::new(
        "setsid",
        &[],
        &["-c", "--ctty", "-f", "--fork", "-w", "--wait"],
    ),
    Wrapper::new("coproc", &[], &[]),
    Wrapper::new(
        "flock",
        &["-w", "--timeout", "-E", "--conflict-exit-code"],
        &[
            "-s",
            "--shared",
            "-x",
            "-e",
            "--exclusive",
            "-n",
            "--nb",
            "--nonblock",
            "-u",
            "--unlock",
            "-o",
            "--close",
            "-F",
            "--no-fork",
            "--verbose",
        ],
    )
    .operands(1),
    Wrapper::new(
        "chrt",
        &[
            "-T",
            "--sched-runtime",
            "-P",
            "--sched-period",
            "-D",
            "--sched-deadline",
        ],
        &[
            "-b",
            "--batch",
            "-d",
            "--deadline",
            "-f",
            "--fifo",
            "-i",
            "--idle",
            "-o",
            "--other",
            "-r",
            "--rr",
            "-R",
            "--reset-on-fork",
            "-v",
            "--verbose",
            "-a",
            "--all-tasks",
            "-m",
        ],
    )
    .operands(1),
    Wrapper::new("taskset", &[], &["-a", "--all-tasks", "-c", "--cpu-list"]).operands(1),
    Wrapper::new(
        "unshare",
        &[
            "-S",
            "--setuid",
            "-G",
            "--setgid",
            "-R",
            "--root",
            "-w",
            "--wd",
            "--propagation",
            "--map-user",
            "--map-group",
            "--map-users",
            "--map-groups",
        ],
        &[
            "-f",
            "--fork",
            "-r",
            "--map-root-user",
            "-c",
            "--map-current-user",
            "--kill-child",
            "--mount-proc",
            "--keep-caps",
        ],
    )
    .shell_when_bare(),
    Wrapper::new(
        "nsenter",
        &[
            "-t", "--target", "-S", "--setuid", "-G", "--setgid", "-r", "--root", "-w", "--wd",
        ],
        &["-a", "--all", "-F", "--no-fork", "--preserve-credentials"],
    )
    .shell_when_bare(),
    Wrapper::new(
        "setpriv",
        &[
            "--reuid",
            "--regid",
            "--ruid",
            "--rgid",
            "--euid",
            "--egid",
            "--groups",
            "--inh-caps",
            "--ambient-caps",
            "--bounding-set",
            "--securebits",
            "--pdeathsig",
            "--selinux-label",
            "--apparmor-profile",
        ],
        &[
            "-d",
            "--dump",
            "--clear-groups",
            "--keep-groups",
            "--init-groups",
            "--nnp",
            "--no-new-privs",
            "--reset-env",
        ],
    ),
    Wrapper::new(
        "prlimit",
        &["-p", "--pid", "-o", "--output"],
        &["--noheadings", "--raw", "--verbose"],
    ),
    Wrapper::new("chroot", &["--userspec", "--groups"], &["--skip-chdir"])
        .operands(1)
        .shell_when_bare(),
    Wrapper::new(
        "runuser",
        &[
            "-u",
            "--user",
            "-g",
            "--group",
            "-G",
            "--supp-group",
            "-s",
            "--shell",
        ],
        &[
            "-l",
            "--login",
            "-m",
            "-p",
            "--preserve-environment",
            "-P",
            "--pty",
        ],
    )
    .shell_when_bare(),
    Wrapper::new(
        "strace",
        &[
            "-o", "-e", "-p", "-u", "-E", "-s", "-a", "-b", "-I", "-O", "-P", "-S", "-X",
        ],
        &[
            "-f", "-ff", "-c", "-C", "-d", "-D", "-i", "-k", "-q", "-qq", "-r", "-t", "-tt",
            "-ttt", "-T", "-v", "-V", "-w", "-x", "-xx", "-y", "-yy", "-z", "-Z", "-n",
        ],
    ),
    Wrapper::new(
        "ltrace",
        &["-o", "-e", "-p", "-u", "-s", "-a", "-l"],
        &[
            "-f", "-c", "-C", "-i", "-r", "-S", "-t", "-tt", "-ttt", "-T",
        ],
    ),
    Wrapper::new(
        "fakeroot",
        &["-l", "--lib", "--faked", "-s", "-i"],
        &["-u", "--unknown-is-real"],
    ),
    Wrapper::new(
        "systemd-run",
        &[
            "-p",
            "--property",
            "-u",
            "--unit",
            "--description",
            "-E",
            "--setenv",
            "--uid",
            "--gid",
            "--working-directory",
            "-M",
            "--machine",
            "-H",
            "--host",
            "--slice",
            "--nice",
        ],
        &[
            "--user",
            "--system",
            "--scope",
            "-t",
            "--pty",
            "-P",
            "--pipe",
            "-q",
            "--quiet",
            "--wait",
            "-G",
            "--collect",
            "-d",
            "--same-dir",
            "--no-block",
            "-S",
            "--shell",
        ],
    )
    .shell_when_bare(),
];

/// The namespace options of unshare and nsenter.
const NAMESPACES: &[&str] = &[
    "-m", "--mount", "-u", "--uts", "-i", "--ipc", "-n", "--net", "-p", "--pid", "-U", "--user",
    "-C", "--cgroup", "-T", "--time",
];

/// Programs that take a command string after `-c` (or `--command`)
/// whatever else they take: the string is judged as a script.
const COMMAND_STRING_OPTION: &[&str] =
    &["flock", "script", "su", "sg", "runuser", "capsh", "newgrp"];

/// Programs whose commands the rules do not follow (they take them in
/// shapes of their own): they ask whenever a deny or ask rule exists.
const OPAQUE: &[&str] = &[
    "tmux", "screen", "parallel", "fc", "expect", "dtach", "abduco",
];

impl Wrapper {
    /// A wrapper with these options, no operands, no assignments.
    const fn new(
        name: &'static str,
        with_value: &'static [&'static str],
        flags: &'static [&'static str],
    ) -> Self {
        Wrapper {
            name,
            with_value,
            flags,
            operands: 0,
            assignments: false,
            reads_input: false,
            shell_when_bare: false,
        }
    }

    const fn shell_when_bare(mut self) -> Self {
        self.shell_when_bare = true;
        self
    }

    const fn operands(mut self, operands: usize) -> Self {
        self.operands = operands;
        self
    }

    const fn assignments(mut self) -> Self {
        self.assignments = true;
        self
    }

    const fn reads_input(mut self) -> Self {
        self.reads_input = true;
        self
    }
}

/// True if `name` is a wrapper the judge looks through.
pub fn is_wrapper(name: &str) -> bool {
    WRAPPERS.iter().any(|w| w.name == basename(name))
}

/// The shells whose `-c` string and input are commands.
const SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "yash", "rbash", "hush", "posh", "fish",
    "tcsh", "csh", "nu", "pwsh", "elvish", "xonsh",
];

/// Programs that run code of their own given to them (a bare one stands
/// for anything at all): never a rule a model may propose alone.
pub const INTERPRETERS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "yash", "rbash", "fish", "python",
    "python3", "python2", "node", "deno", "bun", "perl", "ruby", "php", "lua", "env", "sudo",
    "doas", "xargs", "eval", "exec", "command", "builtin", "timeout", "nice", "nohup", "stdbuf",
    "busybox", "su", "time", "ionice", "setsid", "watch", "find", "trap", "source", ".",
];

/// What the words of one simple command run.
#[derive(Debug, PartialEq, Eq)]
pub enum Runs {
    /// The words after a wrapper's options (plus, for `xargs`, words
    /// read from the input): judge them as the command.
    Inner(Vec<Arg>),
    /// A script given as a string: judge it in its turn.
    Script(String),
    /// A shell that reads its commands from its input.
    Input,
    /// Nothing more than the program itself.
    Itself,
    /// Cannot be known before it runs (why).
    Unknowable(String),
}

/// The last path component: `/usr/bin/git` and `./git` run `git`.
pub fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// What `words` (a program, then its arguments; the program known) run.
pub fn runs(words: &[Arg]) -> Runs {
    let Some(program) = words.first().and_then(Arg::known) else {
        return Runs::Itself;
    };
    let name = basename(program);
    if OPAQUE.contains(&name) {
        return Runs::Unknowable(format!(
            "`{name}` runs commands in shapes the rules do not follow"
        ));
    }
    // Builtins that run a string given to an option: `mapfile -C cmd`,
    // `compgen -C cmd`, `complete -C cmd`, `bind -x 'keys: cmd'`.
    let string_option = match name {
        "mapfile" | "readarray" | "compgen" | "complete" => Some('C'),
        "bind" => Some('x'),
        _ => None,
    };
    if let Some(letter) = string_option {
        if let Some(runs) = option_string(words, letter) {
            return runs;
        }
    }
    if COMMAND_STRING_OPTION.contains(&name) {
        if let Some(runs) = command_string(words) {
            return runs;
        }
        // `script` alone, `runuser -u x`: a shell reading its input.
        if matches!(name, "script" | "su") {
            return Runs::Input;
        }
    }
    if let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) {
        return unwrap(wrapper, words);
    }
    if SHELLS.contains(&name) {
        return shell(words);
    }
    match name {
        "eval" => joined(strip_dashes(&words[1..]), "eval"),
        "hash"
            if words
                .iter()
                .any(|w| w.known().is_some_and(|w| w.starts_with("-p"))) =>
        {
            Runs::Unknowable("`hash -p` changes which program a name runs".into())
        }
        "enable" => Runs::Unknowable("`enable` changes which builtins a name runs".into()),
        "sg" | "newgrp" => joined(words.get(2..).unwrap_or_default(), name),
        "source" | "." if words.len() > 1 => Runs::Unknowable(format!(
            "`{name}` runs the commands of a file the parser cannot see"
        )),
        "trap" => trap(words),
        "watch" => watch(words),
        "su" => su(words),
        _ => Runs::Itself,
    }
}

/// The words after `wrapper`'s options and operands.
fn unwrap(wrapper: &Wrapper, words: &[Arg]) -> Runs {
    let name = wrapper.name;
    let mut at = 1;
    let mut operands = wrapper.operands;
    let mut options = true;
    while let Some(word) = words.get(at) {
        let Arg::Known(word) = word else {
            return Runs::Unknowable(format!(
                "an unknown word where {name}'s options or command start"
            ));
        };
        if word == "--" && options {
            options = false;
            at += 1;
            continue;
        }
        if options && word.starts_with('-') && word.len() > 1 && operands == wrapper.operands {
            match option_width(wrapper, word) {
                Some(width) => at += width,
                None => {
                    return Runs::Unknowable(format!(
                        "`{name}` with an option the rules do not know ({word}): where its command starts is not known"
                    ))
                }
            }
            continue;
        }
        // env takes any word with `=` for an assignment, sudo a name's.
        let assigns = if name == "env" {
            word.contains('=')
        } else {
            is_assignment(word)
        };
        if wrapper.assignments && assigns {
            at += 1;
            continue;
        }
        if operands > 0 {
            operands -= 1;
            at += 1;
            continue;
        }
        break;
    }
    if name == "env" && words[1..at].iter().any(|w| matches!(w.known(), Some(s) if s.starts_with("-S") || s.starts_with("--split-string"))) {
        return Runs::Unknowable("`env -S` splits a string the rules do not follow".into());
    }
    let mut inner: Vec<Arg> = words.get(at..).unwrap_or_default().to_vec();
    if inner.is_empty() {
        // A shell of the user's own: what it runs comes from its input.
        return if wrapper.shell_when_bare {
            Runs::Input
        } else {
            Runs::Itself
        };
    }
    if wrapper.reads_input {
        // A replace string (`-I R`, `-i` for `{}`) stands for input in any
        // word that holds it.
        let replaced = replace_string(&words[1..at]);
        for word in &mut inner {
            if replaced
                .as_deref()
                .is_some_and(|r| word.known().is_some_and(|w| w.contains(r)))
            {
                *word = Arg::Unknown("a word xargs fills from its input");
            }
        }
        inner.push(Arg::Unknown("arguments xargs reads from its input"));
    }
    Runs::Inner(inner)
}

/// The replace string among xargs' options (`-I R`, `-IR`, `-i`,
/// `--replace[=R]`).
fn replace_string(options: &[Arg]) -> Option<String> {
    for (at, word) in options.iter().enumerate() {
        let Some(word) = word.known() else { continue };
        match word {
            "-I" => return options.get(at + 1).and_then(Arg::known).map(str::to_owned),
            "-i" | "--replace" => return Some("{}".into()),
            _ => {}
        }
        if let Some(r) = word
            .strip_prefix("--replace=")
            .or_else(|| word.strip_prefix("-I"))
        {
            return Some(r.to_owned());
        }
        if let Some(r) = word.strip_prefix("-i") {
            return Some(r.to_owned());
        }
    }
    None
}

/// How many words an option of `wrapper` takes, itself included; none for
/// an option it does not have.
fn option_width(wrapper: &Wrapper, word: &str) -> Option<usize> {
    if wrapper.flags.contains(&word) {
        return Some(1);
    }
    // unshare's and nsenter's namespaces (`--mount[=file]` too).
    let namespace = word.split_once('=').map_or(word, |(name, _)| name);
    if matches!(wrapper.name, "unshare" | "nsenter") && NAMESPACES.contains(&namespace) {
        return Some(1);
    }
    if wrapper.with_value.contains(&word) {
        return Some(2);
    }
    if let Some((name, _)) = word.split_once('=') {
        if wrapper.with_value.contains(&name) || wrapper.flags.contains(&name) {
            return Some(1);
        }
    }
    // `-n10`, `-uNAME`: a one-letter option with its value attached.
    if !word.starts_with("--")
        && word
            .get(..2)
            .is_some_and(|o| word.len() > 2 && wrapper.with_value.contains(&o))
    {
        return Some(1);
    }
    // `nice -10`: the old adjustment form.
    if wrapper.name == "nice" && word[1..].bytes().all(|b| b.is_ascii_digit()) {
        return Some(1);
    }
    None
}

/// True for `NAME=value`.
pub fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A shell: its `-c` string, its input, or a script file (itself).
fn shell(words: &[Arg]) -> Runs {
    let mut at = 1;
    let mut string = false;
    let mut stdin = false;
    while let Some(word) = words.get(at) {
        let Arg::Known(word) = word else {
            return Runs::Unknowable("an unknown word among a shell's options".into());
        };
        if word == "--" || word == "-" {
            at += 1;
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") || long.starts_with("rcfile=") {
                return Runs::Unknowable(format!(
                    "a shell that first runs the file --{long} names"
                ));
            }
            at += 1;
            continue;
        }
        let Some(letters) = word.strip_prefix('-').or_else(|| word.strip_prefix('+')) else {
            break;
        };
        if letters.is_empty() {
            break;
        }
        string |= word.starts_with('-') && letters.contains('c');
        stdin |= letters.contains('s');
        at += 1 + letters.chars().filter(|c| matches!(c, 'o' | 'O')).count();
    }
    if string {
        return match words.get(at) {
            Some(Arg::Known(script)) => Runs::Script(script.clone()),
            Some(Arg::Unknown(why)) => Runs::Unknowable(format!("a shell running {why}")),
            None => Runs::Itself,
        };
    }
    // A script "file" that is the shell's own input (or another
    // descriptor) is read like its input.
    let from_input = words.get(at).and_then(Arg::known).is_some_and(|file| {
        file == "/dev/stdin" || file.starts_with("/dev/fd/") || file.starts_with("/proc/")
    });
    if at < words.len() && !stdin && !from_input {
        return Runs::Itself;
    }
    Runs::Input
}

/// The words joined into a script (`eval`), unknowable with any unknown.
fn joined(words: &[Arg], name: &str) -> Runs {
    let mut script = Vec::new();
    for word in words {
        match word {
            Arg::Known(text) => script.push(text.as_str()),
            Arg::Unknown(why) => {
                return Runs::Unknowable(format!(
                    "`{name}` of {why} runs code not known before it runs"
                ))
            }
        }
    }
    if script.is_empty() {
        return Runs::Itself;
    }
    Runs::Script(script.join(" "))
}

/// `trap 'commands' SIGNAL…`.
fn trap(words: &[Arg]) -> Runs {
    let words = strip_dashes(&words[1..]);
    match words.first() {
        Some(Arg::Known(first)) if first.starts_with('-') || words.len() < 2 => Runs::Itself,
        Some(Arg::Known(first)) => Runs::Script(first.clone()),
        Some(Arg::Unknown(why)) => Runs::Unknowable(format!("`trap` of {why}")),
        None => Runs::Itself,
    }
}

/// `watch [options] command…`: the words run through `sh -c`.
fn watch(words: &[Arg]) -> Runs {
    let mut at = 1;
    let mut exec = false;
    while let Some(Arg::Known(word)) = words.get(at) {
        if !word.starts_with('-') {
            break;
        }
        exec |= word == "--exec" || (!word.starts_with("--") && word.contains('x'));
        let takes = matches!(
            word.as_str(),
            "-n" | "--interval" | "-q" | "--equexit" | "-d"
        );
        at += if takes && word != "-d" { 2 } else { 1 };
    }
    let rest = words.get(at..).unwrap_or_default();
    if exec {
        // `-x`: the words are executed as they are.
        return if rest.is_empty() {
            Runs::Itself
        } else {
            Runs::Inner(rest.to_vec())
        };
    }
    joined(rest, "watch")
}

/// `su [options] [-c command] [user]`: without a command string, a shell
/// reading its input.
fn su(words: &[Arg]) -> Runs {
    match command_string(words) {
        Some(runs) => runs,
        None if words.iter().any(|w| w.known().is_none()) => {
            Runs::Unknowable("`su` with an unknown word".into())
        }
        None => Runs::Input,
    }
}

/// The string after `-c` (`-c STRING`, `-cSTRING`, `-lc STRING`,
/// `--command STRING`, `--command=STRING`), if a word gives one.
fn command_string(words: &[Arg]) -> Option<Runs> {
    let string = |arg: Option<&Arg>| match arg {
        Some(Arg::Known(script)) => Runs::Script(script.clone()),
        Some(Arg::Unknown(why)) => Runs::Unknowable(format!("a command string of {why}")),
        None => Runs::Itself,
    };
    for (at, word) in words.iter().enumerate().skip(1) {
        let Some(word) = word.known() else { continue };
        if word == "--command" {
            return Some(string(words.get(at + 1)));
        }
        if let Some(script) = word.strip_prefix("--command=") {
            return Some(Runs::Script(script.to_owned()));
        }
        let Some(letters) = word.strip_prefix('-').filter(|_| !word.starts_with("--")) else {
            continue;
        };
        if let Some((_, attached)) = letters.split_once('c') {
            if attached.is_empty() {
                return Some(string(words.get(at + 1)));
            }
            return Some(Runs::Script(attached.to_owned()));
        }
    }
    None
}

/// The string given to the one-letter option `letter` (`-C cmd`,
/// `-Ccmd`): judged as a script (for `bind -x`, everything after the key
/// sequence's colon, or the whole when unsure).
fn option_string(words: &[Arg], letter: char) -> Option<Runs> {
    for (at, word) in words.iter().enumerate().skip(1) {
        let Some(word) = word.known() else { continue };
        let Some(letters) = word.strip_prefix('-').filter(|_| !word.starts_with("--")) else {
            continue;
        };
        let Some((_, attached)) = letters.split_once(letter) else {
            continue;
        };
        let value = if attached.is_empty() {
            words.get(at + 1)
        } else {
            None
        };
        let script = match (attached.is_empty(), value) {
            (false, _) => attached.to_owned(),
            (true, Some(Arg::Known(script))) => script.clone(),
            (true, Some(Arg::Unknown(why))) => {
                return Some(Runs::Unknowable(format!("a command string of {why}")))
            }
            (true, None) => return None,
        };
        let script = match script.split_once(':') {
            Some((_, command)) if letter == 'x' => {
                command.trim_matches(['"', '\'', ' ']).to_owned()
            }
            _ => script,
        };
        return Some(Runs::Script(script));
    }
    None
}

/// The words after a leading `--`.
fn strip_dashes(words: &[Arg]) -> &[Arg] {
    match words.first().and_then(Arg::known) {
        Some("--") => &words[1..],
        _ => words,
    }
}

/// For `find`: each `-exec`/`-execdir`/`-ok`/`-okdir` command's words.
pub fn find_commands(words: &[Arg]) -> Vec<Vec<Arg>> {
    let mut found = Vec::new();
    let mut at = 1;
    while at < words.len() {
        let starts = matches!(
            words[at].known(),
            Some("-exec" | "-execdir" | "-ok" | "-okdir")
        );
        at += 1;
        if !starts {
            continue;
        }
        let mut command = Vec::new();
        let mut after_braces = false;
        while let Some(word) = words.get(at) {
            at += 1;
            match word.known() {
                Some(";") => break,
                // `+` ends the command only right after `{}`.
                Some("+") if after_braces => break,
                // GNU find replaces `{}` inside a word too.
                Some(w) if w.contains("{}") => command.push(Arg::Unknown("a path find passes")),
                _ => command.push(word.clone()),
            }
            after_braces = word.known() == Some("{}");
        }
        found.push(command);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Arg> {
        text.split(' ').map(|w| Arg::Known(w.into())).collect()
    }

    fn inner(text: &str) -> String {
        match runs(&words(text)) {
            Runs::Inner(inner) => inner
                .iter()
                .map(|w| w.known().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(" "),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn wrappers_give_their_command() {
        assert_eq!(inner("env -i FOO=1 -u BAR git push"), "git push");
        assert_eq!(inner("timeout -s KILL 5 git push"), "git push");
        assert_eq!(inner("timeout --signal=KILL 5s git push"), "git push");
        assert_eq!(inner("nice -n 5 git push"), "git push");
        assert_eq!(inner("nice -n5 git push"), "git push");
        assert_eq!(inner("nice -10 git push"), "git push");
        assert_eq!(inner("sudo -u root -E FOO=1 git push"), "git push");
        assert_eq!(inner("xargs -n 1 git"), "git ?");
        assert_eq!(inner("stdbuf -o0 git push"), "git push");
        assert_eq!(inner("/usr/bin/env -- git push"), "git push");
        assert!(matches!(
            runs(&words("env --frobnicate git push")),
            Runs::Unknowable(_)
        ));
        assert!(matches!(runs(&words("env -S git")), Runs::Unknowable(_)));
        assert_eq!(runs(&words("env")), Runs::Itself);
    }

    #[test]
    fn shells_give_their_string_or_input() {
        assert_eq!(runs(&words("bash -c ls")), Runs::Script("ls".into()));
        assert_eq!(runs(&words("bash -lc ls")), Runs::Script("ls".into()));
        assert_eq!(
            runs(&words("sh -e -o pipefail -c ls")),
            Runs::Script("ls".into())
        );
        assert_eq!(
            runs(&words("/bin/bash --norc -c ls")),
            Runs::Script("ls".into())
        );
        assert_eq!(runs(&words("bash script.sh")), Runs::Itself);
        assert_eq!(runs(&words("bash")), Runs::Input);
        assert_eq!(runs(&words("bash -s x")), Runs::Input);
        assert_eq!(
            runs(&words("eval git push")),
            Runs::Script("git push".into())
        );
        assert!(matches!(runs(&words("source ./s.sh")), Runs::Unknowable(_)));
    }
}
