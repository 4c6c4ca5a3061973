//! The user's `~/.npmrc` without its credentials, for confined commands.
//!
//! The file is a credential file ([`dsh_sandbox::CREDENTIAL_FILES`]), so
//! confined commands cannot read it; but it also holds the settings npm
//! needs (`registry=`, `@scope:registry=`, `strict-ssl`, …), and without
//! them a confined `npm install` would resolve a private package from the
//! public registry. So under `workspace-write` a copy without the
//! credential lines (`_auth`, `_authToken`, `_password`, `username`,
//! `email`, `certfile`, `keyfile`, anything naming a token) is written
//! into the command's private TMPDIR, and `NPM_CONFIG_USERCONFIG` points
//! npm at it.

use std::io::{Read, Write};
use std::path::Path;

/// The copy's name in the private TMPDIR.
pub(crate) const COPY: &str = "npmrc";

/// The largest `~/.npmrc` copied.
const MAX_BYTES: u64 = 1 << 20;

/// True for a setting that carries a credential: its key's last part
/// (after a `//host/:` prefix) is one of npm's credential settings, or it
/// names a token or a password.
fn secret(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    let last = key.rsplit(':').next().unwrap_or_default();
    matches!(
        last,
        "_auth"
            | "_authtoken"
            | "_password"
            | "username"
            | "email"
            | "certfile"
            | "keyfile"
            | "cert"
            | "key"
            | "otp"
    ) || key.contains("token")
        || key.contains("password")
}

/// `text` without its credential lines (comments and other settings kept).
pub(crate) fn redacted(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        let setting = line.trim_start();
        let is_comment = setting.starts_with('#') || setting.starts_with(';');
        let key = setting.split('=').next().unwrap_or_default();
        if is_comment || !setting.contains('=') || !secret(key) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// Writes the redacted copy of `npmrc` as [`COPY`] in `dir` (a fresh
/// private TMPDIR: the name is new there). Blocking.
pub(crate) fn write_redacted(npmrc: &Path, dir: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let mut text = String::new();
    let read = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    std::fs::File::from(rustix::fs::open(npmrc, read, Mode::empty())?)
        .take(MAX_BYTES)
        .read_to_string(&mut text)?;
    let write = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let copy = rustix::fs::open(dir.join(COPY), write, Mode::from_raw_mode(0o600))?;
    std::fs::File::from(copy).write_all(redacted(&text).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_stay_and_credentials_go() {
        let text = "registry=https://npm.corp.example/\n@corp:registry=https://npm.corp.example/\n//npm.corp.example/:_authToken=s3cret\n_auth = dXNlcjpwYXNz\nemail=me@example.org\n; a comment\nstrict-ssl=false\n//host/:_password=x\nNPM_TOKEN_FOR_X=y\n";
        let kept = redacted(text);
        assert_eq!(
            kept,
            "registry=https://npm.corp.example/\n@corp:registry=https://npm.corp.example/\n; a comment\nstrict-ssl=false\n"
        );
    }
}
