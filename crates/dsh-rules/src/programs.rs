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
    .assignments(),
    Wrapper::new("doas", &["-u", "-C"], &["-n", "-s", "-L"]),
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
        }
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
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "yash", "rbash",
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
    if let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) {
        return unwrap(wrapper, words);
    }
    if SHELLS.contains(&name) {
        return shell(words);
    }
    match name {
        "eval" => joined(&words[1..], "eval"),
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
    while let Some(word) = words.get(at) {
        let Arg::Known(word) = word else {
            return Runs::Unknowable(format!(
                "an unknown word where {name}'s options or command start"
            ));
        };
        if word == "--" {
            at += 1;
            break;
        }
        if word.starts_with('-') && word.len() > 1 && operands == wrapper.operands {
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
        if wrapper.assignments && is_assignment(word) {
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
        return Runs::Itself;
    }
    if wrapper.reads_input {
        inner.push(Arg::Unknown("arguments xargs reads from its input"));
    }
    Runs::Inner(inner)
}

/// How many words an option of `wrapper` takes, itself included; none for
/// an option it does not have.
fn option_width(wrapper: &Wrapper, word: &str) -> Option<usize> {
    if wrapper.flags.contains(&word) {
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
    if !word.starts_with("--") && word.len() > 2 && wrapper.with_value.contains(&&word[..2]) {
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
            at += if matches!(long, "rcfile" | "init-file") {
                2
            } else {
                1
            };
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
    if at < words.len() && !stdin {
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
    match words.get(1) {
        Some(Arg::Known(first)) if first.starts_with('-') || words.len() < 3 => Runs::Itself,
        Some(Arg::Known(first)) => Runs::Script(first.clone()),
        Some(Arg::Unknown(why)) => Runs::Unknowable(format!("`trap` of {why}")),
        None => Runs::Itself,
    }
}

/// `watch [options] command…`: the words run through `sh -c`.
fn watch(words: &[Arg]) -> Runs {
    let mut at = 1;
    while let Some(Arg::Known(word)) = words.get(at) {
        if !word.starts_with('-') {
            break;
        }
        let takes = matches!(
            word.as_str(),
            "-n" | "--interval" | "-q" | "--equexit" | "-d"
        );
        at += if takes && word != "-d" { 2 } else { 1 };
    }
    joined(words.get(at..).unwrap_or_default(), "watch")
}

/// `su [options] [-c command] [user]`.
fn su(words: &[Arg]) -> Runs {
    let at = words
        .iter()
        .position(|w| matches!(w.known(), Some("-c" | "--command")));
    match at.and_then(|at| words.get(at + 1)) {
        Some(Arg::Known(script)) => Runs::Script(script.clone()),
        Some(Arg::Unknown(why)) => Runs::Unknowable(format!("`su -c` of {why}")),
        None if words.iter().any(|w| w.known().is_none()) => {
            Runs::Unknowable("`su` with an unknown word".into())
        }
        None => Runs::Itself,
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
        while let Some(word) = words.get(at) {
            at += 1;
            match word.known() {
                Some(";" | "+") => break,
                Some("{}") => command.push(Arg::Unknown("a path find passes")),
                _ => command.push(word.clone()),
            }
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
