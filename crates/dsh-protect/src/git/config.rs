//! Git's config files as git reads them, far enough to know what they make
//! git run: sections (`[core]`, `[diff "tool"]`, `[alias.x]`), keys,
//! values with quotes, escapes, inline comments and line continuations.
//!
//! Re-implemented (git cannot be asked cheaply on every command): the
//! grammar of git-config(1)'s "Syntax", and which keys name a program or a
//! path (`COMMAND_KEYS`, `PATH_KEYS`).

/// One `key = value` of a config file, the key's parts lowercased but for
/// the subsection (which git keeps as written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) section: String,
    pub(crate) subsection: Option<String>,
    pub(crate) key: String,
    pub(crate) value: String,
}

/// The entries of `text`, in order. Malformed lines are skipped (git
/// refuses such a file, so nothing in it runs).
pub(crate) fn parse(text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut section = String::new();
    let mut subsection = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if let Some(header) = rest.strip_prefix('[') {
            let Some((inside, after)) = header.split_once(']') else {
                continue;
            };
            (section, subsection) = section_header(inside);
            rest = after.trim_start();
        }
        if rest.is_empty() || rest.starts_with(['#', ';']) {
            continue;
        }
        let (key, value) = match rest.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value)),
            None => (rest.trim(), None),
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            continue;
        }
        // A value without `=` is boolean true; a value may continue over
        // lines ending in an unescaped backslash.
        let mut raw = value.unwrap_or("true").to_owned();
        while ends_in_continuation(&raw) {
            raw.pop();
            match lines.next() {
                Some(next) => raw.push_str(next),
                None => break,
            }
        }
        entries.push(Entry {
            section: section.clone(),
            subsection: subsection.clone(),
            key: key.to_ascii_lowercase(),
            value: value_of(&raw),
        });
    }
    entries
}

/// `core`, `diff "tool"`, or the old `alias.x` form.
fn section_header(inside: &str) -> (String, Option<String>) {
    let inside = inside.trim();
    if let Some((name, quoted)) = inside.split_once(char::is_whitespace) {
        let quoted = quoted.trim();
        let sub = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .unwrap_or(quoted)
            .replace("\\\"", "\"")
            .replace("\\\\", "\\");
        return (name.to_ascii_lowercase(), Some(sub));
    }
    match inside.split_once('.') {
        Some((name, sub)) => (name.to_ascii_lowercase(), Some(sub.to_ascii_lowercase())),
        None => (inside.to_ascii_lowercase(), None),
    }
}

/// True if `raw` ends in a backslash that is not itself escaped, outside
/// a comment (git does not continue a comment onto the next line).
fn ends_in_continuation(raw: &str) -> bool {
    let mut quoted = false;
    let mut escaped = false;
    for c in raw.chars() {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => quoted = !quoted,
            (false, '#' | ';') if !quoted => return false,
            _ => {}
        }
    }
    escaped
}

/// A raw value as git reads it: quotes removed, escapes resolved, an
/// unquoted `#` or `;` ending it, surrounding unquoted space trimmed.
fn value_of(raw: &str) -> String {
    let mut value = String::new();
    let mut quoted = false;
    // Unquoted trailing whitespace is dropped; inner whitespace kept.
    let mut pending_space = String::new();
    let mut chars = raw.trim_start().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                value.push_str(&std::mem::take(&mut pending_space));
                quoted = !quoted;
            }
            '\\' => {
                value.push_str(&std::mem::take(&mut pending_space));
                match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('b') => {
                        value.pop();
                    }
                    Some(other) => value.push(other),
                    None => {}
                }
            }
            '#' | ';' if !quoted => break,
            c if c.is_whitespace() && !quoted => pending_space.push(c),
            c => {
                value.push_str(&std::mem::take(&mut pending_space));
                value.push(c);
            }
        }
    }
    value
}

/// Keys whose value is a shell command (or a program git runs): `section`,
/// optional "any subsection", `key`. `alias.*` counts only when it starts
/// with `!`; `submodule.*.update` only then too.
const COMMAND_KEYS: &[(&str, bool, &str)] = &[
    ("core", false, "fsmonitor"),
    ("core", false, "sshcommand"),
    ("core", false, "editor"),
    ("core", false, "pager"),
    ("core", false, "askpass"),
    ("core", false, "gitproxy"),
    ("sequence", false, "editor"),
    ("diff", false, "external"),
    ("diff", true, "textconv"),
    ("diff", true, "command"),
    ("merge", true, "driver"),
    ("filter", true, "clean"),
    ("filter", true, "smudge"),
    ("filter", true, "process"),
    ("credential", false, "helper"),
    ("credential", true, "helper"),
    ("gpg", false, "program"),
    ("gpg", true, "program"),
    ("interactive", false, "difffilter"),
    ("uploadpack", false, "packobjectshook"),
    ("remote", true, "uploadpack"),
    ("remote", true, "receivepack"),
    ("remote", true, "vcs"),
    ("difftool", true, "cmd"),
    ("difftool", true, "path"),
    ("mergetool", true, "cmd"),
    ("mergetool", true, "path"),
    ("trailer", true, "command"),
    ("trailer", true, "cmd"),
    ("sendemail", false, "smtpserver"),
    ("sendemail", false, "sendmailcmd"),
    ("sendemail", false, "tocmd"),
    ("sendemail", false, "cccmd"),
    ("sendemail", true, "smtpserver"),
    ("sendemail", true, "sendmailcmd"),
    ("sendemail", true, "tocmd"),
    ("sendemail", true, "cccmd"),
    ("core", false, "alternaterefscommand"),
    ("gpg", true, "defaultkeycommand"),
    ("gpg", false, "defaultkeycommand"),
    ("man", true, "cmd"),
    ("browser", true, "cmd"),
    ("web", false, "browser"),
];

/// True if `entry` is one that runs its value as a command.
pub(crate) fn is_command(entry: &Entry) -> bool {
    match (entry.section.as_str(), entry.key.as_str()) {
        ("alias", _) => entry.value.starts_with('!'),
        ("submodule", "update") => entry.value.starts_with('!'),
        // `[pager] log = cmd`: any key of the section.
        ("pager", _) => true,
        (section, key) => COMMAND_KEYS
            .iter()
            .any(|(s, sub, k)| *s == section && *k == key && (*sub || entry.subsection.is_none())),
    }
}

/// True if `entry` names a path git reads or runs from (a missing one
/// included: it must not be created).
pub(crate) fn is_path(entry: &Entry) -> bool {
    matches!(
        (entry.section.as_str(), entry.key.as_str()),
        ("core", "hookspath") | ("include", "path") | ("includeif", "path")
    )
}

/// True if `entry` pulls in another config file.
pub(crate) fn is_include(entry: &Entry) -> bool {
    entry.key == "path" && matches!(entry.section.as_str(), "include" | "includeif")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_quotes_comments_and_continuations() {
        let text = "[core]\n\tfsmonitor = \"sh tools/fs mon.sh\" # comment\n\tbare\n[diff \"Pdf\"]\n\ttextconv = ./conv \\\n  --flag\n[alias.st]\n[alias]\n\tst = !sh x.sh ; rest\n[includeIf \"gitdir:~/w/\"]\n\tpath = ../inc.cfg\n bad line here\n";
        let entries = parse(text);
        let find = |section: &str, key: &str| {
            entries
                .iter()
                .find(|e| e.section == section && e.key == key)
                .cloned()
                .unwrap()
        };
        assert_eq!(find("core", "fsmonitor").value, "sh tools/fs mon.sh");
        assert!(is_command(&find("core", "fsmonitor")));
        assert_eq!(find("core", "bare").value, "true");
        let textconv = find("diff", "textconv");
        assert_eq!(textconv.subsection.as_deref(), Some("Pdf"));
        assert_eq!(textconv.value, "./conv   --flag");
        assert!(is_command(&textconv));
        let alias = find("alias", "st");
        assert_eq!(alias.value, "!sh x.sh");
        assert!(is_command(&alias));
        let include = find("includeif", "path");
        assert!(is_include(&include) && is_path(&include));
        assert_eq!(include.value, "../inc.cfg");
        assert!(!entries.iter().any(|e| e.key.contains(' ')));
        // A backslash at the end of a comment continues nothing: the next
        // line is a key of its own, as git reads it.
        let commented = parse("[core]\n\teditor = vim # \\\n\tfsmonitor = sh x.sh\n");
        assert!(
            commented
                .iter()
                .any(|e| e.key == "fsmonitor" && e.value == "sh x.sh"),
            "{commented:?}"
        );
        // Not commands.
        let plain = parse("[alias]\n\tco = checkout\n[user]\n\tname = ./x\n");
        assert!(plain.iter().all(|e| !is_command(e)));
    }
}
