//! The environment a command sees: the host's, scrubbed of credentials,
//! with fixed overrides, then the caller's explicit entries.

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::config::ScrubPolicy;

/// Set on every command so tools print plain, non-interactive output.
pub(crate) const OVERRIDES: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// Name endings that mark a credential whatever the rest of the name
/// (`GITHUB_PAT`, `SENTRY_DSN`, `NPM_AUTH`).
const SECRET_SUFFIXES: [&str; 3] = ["_PAT", "_DSN", "_AUTH"];

/// A name ending that marks a password (`MYSQL_PWD`) or a working
/// directory (`_PYENV_VH_PWD`, `OLDPWD`'s kin): judged by the value.
const PWD_SUFFIX: &str = "_PWD";

/// True if and only if `value` reads as a directory rather than a
/// password: an absolute or home-relative path, an expansion (a function's
/// `X_PWD="$PWD"`), or nothing.
fn a_directory(value: &str) -> bool {
    value.is_empty() || value.starts_with('/') || value.starts_with("~/") || value.starts_with('$')
}

impl ScrubPolicy {
    /// True if and only if the allow-list keeps `name`.
    fn keeps(&self, name: &str) -> bool {
        self.allow.iter().any(|allowed| allowed == name)
    }

    /// True if and only if `name` alone marks a credential: a pattern, or
    /// an unambiguous suffix.
    fn named_secret(&self, name: &str) -> bool {
        let upper = name.to_ascii_uppercase();
        self.patterns
            .iter()
            .any(|pattern| upper.contains(&pattern.to_ascii_uppercase()))
            || SECRET_SUFFIXES.iter().any(|suffix| upper.ends_with(suffix))
    }

    /// True if and only if an inherited variable of this name is dropped,
    /// whatever its value (`_PWD` names included: with no value to judge,
    /// the cautious reading).
    pub fn drops(&self, name: &str) -> bool {
        !self.keeps(name)
            && (self.named_secret(name) || name.to_ascii_uppercase().ends_with(PWD_SUFFIX))
    }

    /// True if and only if an inherited variable is dropped, by its name
    /// or by its value (a URL with a password, a connection string with a
    /// password, a well-known token shape: see `secrets.rs`); a `_PWD`
    /// name holding a directory is kept; the allow list keeps either.
    pub fn drops_entry(&self, name: &str, value: &str) -> bool {
        if self.keeps(name) {
            return false;
        }
        let password = name.to_ascii_uppercase().ends_with(PWD_SUFFIX) && !a_directory(value);
        self.named_secret(name) || password || crate::secrets::carries_credential(value)
    }
}

/// The host's environment `inherited` scrubbed by `policy`: read once,
/// when an executor is built, and copied into each command's
/// ([`child_env`]).
pub(crate) fn scrubbed(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &ScrubPolicy,
) -> BTreeMap<OsString, OsString> {
    inherited
        .into_iter()
        .filter(|(name, value)| !policy.drops_entry(&name.to_string_lossy(), &value.to_string_lossy()))
        .collect()
}

/// Builds the child environment: the `scrubbed` inherited one, then the
/// shell snapshot's variables (scrubbed when taken), then the overrides,
/// then `explicit` (which wins, even for secret-looking names). Sorted by
/// name, one entry per name.
pub(crate) fn child_env(
    scrubbed: &BTreeMap<OsString, OsString>,
    snapshot: &[(OsString, OsString)],
    explicit: Option<&BTreeMap<String, String>>,
) -> Vec<(OsString, OsString)> {
    let mut env = scrubbed.clone();
    env.extend(snapshot.iter().cloned());
    for (name, value) in OVERRIDES {
        env.insert(name.into(), value.into());
    }
    for (name, value) in explicit.into_iter().flatten() {
        env.insert(name.into(), value.into());
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inherited environment scrubbed, then the rest.
    fn child_env(
        inherited: Vec<(OsString, OsString)>,
        policy: &ScrubPolicy,
        snapshot: &[(OsString, OsString)],
        explicit: Option<&BTreeMap<String, String>>,
    ) -> Vec<(OsString, OsString)> {
        super::child_env(&scrubbed(inherited, policy), snapshot, explicit)
    }

    fn value<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
        env.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str())
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn secrets_are_dropped_others_pass() {
        let env = child_env(
            pairs(&[
                ("API_KEY", "k"),
                ("my_secret", "s"),
                ("GITHUB_TOKEN", "t"),
                ("DB_PASSWORD", "p"),
                ("PASSWD_FILE", "p"),
                ("AWS_CREDENTIALS", "c"),
                ("HOME", "/root"),
                ("TERM", "xterm"),
            ]),
            &ScrubPolicy::default(),
            &[],
            None,
        );
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["GIT_PAGER", "HOME", "NO_COLOR", "PAGER", "TERM"]);
        assert_eq!(value(&env, "TERM"), Some("dumb"));
    }

    #[test]
    fn credentials_are_dropped_by_value_and_suffix_unless_kept() {
        let inherited = pairs(&[
            ("DATABASE_URL", "postgres://u:hunter2@db/x"),
            ("GITHUB_PAT", "anything"),
            ("MYSQL_PWD", "anything"),
            ("HTTPS_PROXY", "http://u:pw@proxy:3128"),
            ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/1"),
            ("NPM_AUTH", "anything"),
            ("CONN_STR", "Server=db;Password=p4ss;"),
            ("GH", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"),
            ("PLAIN_URL", "https://example.org/path"),
            ("OLDPWD", "/home/u"),
            // pyenv-virtualenv's hook: a directory, not a password.
            ("_PYENV_VH_PWD", "/home/u/project"),
        ]);
        let env = child_env(inherited.clone(), &ScrubPolicy::default(), &[], None);
        let kept: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .filter(|k| !["GIT_PAGER", "NO_COLOR", "PAGER", "TERM"].contains(&k.as_str()))
            .collect();
        assert_eq!(kept, ["OLDPWD", "PLAIN_URL", "_PYENV_VH_PWD"]);
        let keep = ScrubPolicy {
            allow: vec!["DATABASE_URL".into()],
            ..ScrubPolicy::default()
        };
        let env = child_env(inherited, &keep, &[], None);
        assert_eq!(value(&env, "DATABASE_URL"), Some("postgres://u:hunter2@db/x"));
        // An explicit entry from the caller is never a guess.
        let explicit = BTreeMap::from([("TOKEN_URL".to_owned(), "https://u:p@h/".to_owned())]);
        let env = child_env(Vec::new(), &ScrubPolicy::default(), &[], Some(&explicit));
        assert_eq!(value(&env, "TOKEN_URL"), Some("https://u:p@h/"));
    }

    #[test]
    fn explicit_entries_win_and_allow_list_passes() {
        let explicit = BTreeMap::from([
            ("TERM".to_owned(), "xterm-256color".to_owned()),
            ("MY_KEY".to_owned(), "mine".to_owned()),
        ]);
        let policy = ScrubPolicy {
            allow: vec!["SSH_AUTH_SOCK_KEY".into()],
            ..ScrubPolicy::default()
        };
        let env = child_env(
            pairs(&[("SSH_AUTH_SOCK_KEY", "a"), ("OTHER_KEY", "b")]),
            &policy,
            &[],
            Some(&explicit),
        );
        assert_eq!(value(&env, "TERM"), Some("xterm-256color"));
        assert_eq!(value(&env, "MY_KEY"), Some("mine"));
        assert_eq!(value(&env, "SSH_AUTH_SOCK_KEY"), Some("a"));
        assert_eq!(value(&env, "OTHER_KEY"), None);
    }

    #[test]
    fn extra_patterns_are_case_insensitive() {
        let policy = ScrubPolicy {
            patterns: vec!["session".into()],
            allow: vec![],
        };
        assert!(policy.drops("MY_SESSION_ID"));
        assert!(!policy.drops("HOME"));
    }
}
