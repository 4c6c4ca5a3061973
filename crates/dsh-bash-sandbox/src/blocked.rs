//! A refused write explained: which path, why the policy keeps it
//! read-only, and what works instead, from what the server knows (the
//! mode, the workspace, the protected paths kept, the sandbox's caches,
//! the command's TMPDIR), never from the command's word alone.
//!
//! The paths come from the kernel's records where it keeps them, else from
//! the command's stderr (the paths its lines name); either way a path is
//! listed only when the policy really keeps it read-only, so a forged
//! `EROFS` line naming a writable path (or no path) explains nothing.

use std::path::{Path, PathBuf};

use dsh_bash::{BlockedClass, BlockedPath, DenialEvidence, SandboxMode, MAX_BLOCKED};
use dsh_sandbox::SandboxCaches;

/// What a confined command could write, as the server set it up.
#[derive(Clone, Debug)]
pub(crate) struct WriteRights {
    pub(crate) mode: SandboxMode,
    pub(crate) workspace: PathBuf,
    /// The protected paths the backend kept read-only (absolute).
    pub(crate) protected: Vec<PathBuf>,
    /// The files and directories the backend hid (absolute).
    pub(crate) hidden: Vec<PathBuf>,
    pub(crate) caches: std::sync::Arc<SandboxCaches>,
    /// The command's private TMPDIR, as the command sees it.
    pub(crate) private_tmp: Option<PathBuf>,
    /// Where relative paths in stderr are taken from (the command's
    /// working directory).
    pub(crate) workdir: PathBuf,
    /// The home `~/` stands for.
    pub(crate) home: Option<PathBuf>,
    /// The backend mounts the sandbox's caches over the host's that exist
    /// (bubblewrap): there a host cache's path is writable, the sandbox's.
    pub(crate) host_caches_bound: bool,
}

/// Candidates looked at, at most (a flood of paths on stderr costs
/// nothing past these).
const MAX_CANDIDATES: usize = 64;

impl WriteRights {
    /// The paths of a denied command the policy keeps read-only,
    /// explained: from the kernel's `refused` records (`fs.make_reg on
    /// /etc`) with kernel evidence, else from the paths `stderr` names.
    /// Blocking (it asks whether the server's user could write a path).
    pub(crate) fn explain(
        &self,
        evidence: DenialEvidence,
        refused: &[String],
        stderr: &str,
    ) -> Vec<BlockedPath> {
        let candidates: Vec<PathBuf> = match evidence {
            DenialEvidence::Kernel => refused
                .iter()
                .filter_map(|line| {
                    line.rsplit_once(" on ")
                        .map(|(_, path)| PathBuf::from(path))
                })
                .collect(),
            _ => self.candidates(stderr),
        };
        let mut blocked: Vec<BlockedPath> = Vec::new();
        for path in candidates {
            if blocked.len() == MAX_BLOCKED {
                break;
            }
            if blocked.iter().any(|b| b.path == path) {
                continue;
            }
            if let Some(explained) = self.classify(&path) {
                blocked.push(explained);
            }
        }
        blocked
    }

    /// True if and only if `stderr` mentions a hidden path at all (cheap:
    /// no file system).
    pub(crate) fn names_hidden(&self, stderr: &str) -> bool {
        self.hidden.iter().any(|hidden| {
            hidden
                .file_name()
                .is_some_and(|name| stderr.contains(&*name.to_string_lossy()))
        })
    }

    /// The hidden files a refusal on `stderr` names, explained. Blocking.
    pub(crate) fn explain_hidden(&self, stderr: &str) -> Vec<BlockedPath> {
        let mut blocked: Vec<BlockedPath> = Vec::new();
        for path in self.candidates(stderr) {
            if blocked.len() == MAX_BLOCKED || blocked.iter().any(|b| b.path == path) {
                continue;
            }
            blocked.extend(self.hidden_explained(&path));
        }
        blocked
    }

    /// The paths the refusals on `stderr` name: each word from the working
    /// directory, and a relative one (the command may have changed
    /// directory) also as the end of a hidden path.
    fn candidates(&self, stderr: &str) -> Vec<PathBuf> {
        paths_named(stderr)
            .take(MAX_CANDIDATES)
            .flat_map(|word| {
                let relative = !word.starts_with('/') && !word.starts_with("~/");
                let ending = self
                    .hidden
                    .iter()
                    .filter(move |hidden| relative && hidden.ends_with(word))
                    .cloned();
                self.absolute(word).into_iter().chain(ending)
            })
            .collect()
    }

    /// `word` as a clean absolute path (`~/` from the home, relative from
    /// the working directory).
    fn absolute(&self, word: &str) -> Option<PathBuf> {
        let path = match word.strip_prefix("~/") {
            Some(rest) => self.home.as_ref()?.join(rest),
            None => self.workdir.join(word),
        };
        Some(dsh_protect::lexically_clean(&path))
    }

    /// Why `path` is read-only for the command, or `None` when it could
    /// write it (then stderr's word was not a refusal of the sandbox's).
    fn classify(&self, path: &Path) -> Option<BlockedPath> {
        self.hidden_explained(path)
            .or_else(|| self.classify_write(path))
    }

    /// Why `path` is not writable for the command, or `None`.
    fn classify_write(&self, path: &Path) -> Option<BlockedPath> {
        let blocked = |class, why: String, instead: String| BlockedPath {
            path: path.to_owned(),
            class,
            why,
            instead,
        };
        if path == Path::new("/dev/null") || path == Path::new("/dev/tty") {
            return None;
        }
        if let Some((tool, host, stand_in)) = self.caches.host_cache_of(path) {
            if self.host_caches_bound && host.is_dir() {
                return None;
            }
            return Some(blocked(
                BlockedClass::HostCache,
                format!("the host's own {tool} cache, read-only: the host runs what it holds"),
                format!(
                    "the sandbox's own {tool} cache at {} is writable, and {tool} finds it through its variables",
                    stand_in.display()
                ),
            ));
        }
        let inside = path.starts_with(&self.workspace);
        if self.mode == SandboxMode::ReadOnly {
            let wider = if inside {
                "workspace-write"
            } else {
                "danger-full-access"
            };
            return Some(blocked(
                BlockedClass::ReadOnlyMode,
                "this call runs read-only".into(),
                self.escalation(path, wider),
            ));
        }
        if let Some(kept) = self
            .protected
            .iter()
            .filter(|kept| path.starts_with(kept))
            .max_by_key(|kept| kept.components().count())
        {
            let relative = kept.strip_prefix(&self.workspace).unwrap_or(kept);
            let mut instead = format!(
                "the operator can lift it with --unprotect {}",
                unprotect_name(relative)
            );
            let ask = self.escalation(path, "danger-full-access");
            if !ask.is_empty() {
                instead.push_str("; ");
                instead.push_str(&ask);
            }
            return Some(blocked(
                BlockedClass::Protected,
                format!("protected: {}", protected_why(relative)),
                instead,
            ));
        }
        // Writable: the workspace but its protected paths (a workspace
        // under /tmp is inside bubblewrap's private /tmp too), the
        // command's TMPDIR, the sandbox's caches.
        let writable_place = |place: &Path| path.starts_with(place);
        if inside
            || self.private_tmp.as_deref().is_some_and(writable_place)
            || self.caches.holds(path)
        {
            return None;
        }
        Some(blocked(
            BlockedClass::OutsideWorkspace,
            format!(
                "outside the workspace {} (a confined command writes the workspace, its $TMPDIR and the sandbox's caches)",
                self.workspace.display()
            ),
            {
                let ask = self.escalation(path, "danger-full-access");
                if ask.is_empty() {
                    "write under the workspace or $TMPDIR instead".to_owned()
                } else {
                    format!("write under the workspace or $TMPDIR instead; {ask}")
                }
            },
        ))
    }

    /// `path` explained as hidden, if it is (or lies in) a hidden one.
    fn hidden_explained(&self, path: &Path) -> Option<BlockedPath> {
        let hidden = self.hidden.iter().find(|hidden| path.starts_with(hidden))?;
        let mut instead = format!(
            "the operator can show it with --unhide {}",
            hidden.display()
        );
        let ask = self.escalation(path, "danger-full-access");
        if !ask.is_empty() {
            instead.push_str("; ");
            instead.push_str(&ask);
        }
        Some(BlockedPath {
            path: path.to_owned(),
            class: BlockedClass::Hidden,
            why: "hidden: a credential file no confined command may read".into(),
            instead,
        })
    }

    /// The escalation that could open `path` for one call, if any: none
    /// when the server's own user cannot write it either.
    fn escalation(&self, path: &Path, mode: &str) -> String {
        let existing = path.ancestors().find(|p| p.symlink_metadata().is_ok());
        let target = match existing {
            Some(found) if found == path => found,
            Some(parent) => parent,
            None => return String::new(),
        };
        if rustix::fs::access(target, rustix::fs::Access::WRITE_OK).is_err() {
            return String::new();
        }
        format!("for one call, ask for sandbox_permissions: {mode} (a person approves)")
    }
}

/// What a refusal says on stderr (lower case).
const REFUSALS: &[&str] = &[
    "read-only file system",
    "device or resource busy",
    "permission denied",
    "erofs",
    "eacces",
    "operation not permitted",
];

/// What a line naming the path of a refusal reported on a later line says
/// (cargo's "failed to create directory `…`" above "Caused by: Read-only
/// file system").
const ATTEMPTS: &[&str] = &[
    "failed to",
    "cannot",
    "unable to",
    "could not",
    "create",
    "write",
    "mkdir",
];

/// Lines above a refusal looked at for the path it is about.
const LINES_ABOVE: usize = 3;

/// The words of `stderr` that look like paths, on the lines that report a
/// refusal and on the few lines above one that say what was attempted (a
/// traceback's other paths are not taken): pieces between quotes,
/// whitespace and brackets that start with `/`, `~/` or `.`, or hold a
/// `/` (not a URL), trailing `:`, `.` and `,` dropped.
fn paths_named(stderr: &str) -> impl Iterator<Item = &str> {
    const SEPARATORS: &[char] = &[
        '\'', '"', '`', '\u{2018}', '\u{2019}', '\u{201c}', '\u{201d}', '(', ')', '[', ']', '<',
        '>', ',', ';', '=',
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    let says = |line: &str, words: &[&str]| {
        let lower = line.to_lowercase();
        words.iter().any(|word| lower.contains(word))
    };
    let mut chosen = vec![false; lines.len()];
    for (at, line) in lines.iter().enumerate() {
        if says(line, REFUSALS) {
            chosen[at] = true;
            for above in at.saturating_sub(LINES_ABOVE)..at {
                chosen[above] |= says(lines[above], ATTEMPTS);
            }
        }
    }
    lines
        .into_iter()
        .zip(chosen)
        .filter_map(|(line, chosen)| chosen.then_some(line))
        .flat_map(|line| line.split(|c: char| c.is_whitespace() || SEPARATORS.contains(&c)))
        .map(|word| word.trim_end_matches([':', '.', ',']))
        .filter(|word| {
            !word.is_empty()
                && word != &"."
                && !word.contains("://")
                && (word.starts_with('/')
                    || word.starts_with("~/")
                    || word.starts_with('.')
                    || word.contains('/'))
        })
}

/// The name to give `--unprotect` for the protected path `relative` (to
/// the workspace): `.git` for anything of a repository's, else the path
/// itself at the root or, in a home, the dot-entry's name.
fn unprotect_name(relative: &Path) -> String {
    if relative.components().any(|c| c.as_os_str() == ".git") {
        return ".git".into();
    }
    if relative.components().count() <= 1 {
        return relative.display().to_string();
    }
    relative.file_name().map_or_else(
        || relative.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Why the protected path `relative` (to the workspace) is kept.
fn protected_why(relative: &Path) -> &'static str {
    let names: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(at) = names.iter().position(|n| n == ".git") {
        return match names.get(at + 1).map(String::as_str) {
            Some("hooks") => "git hooks run on the host",
            Some("modules") => "a submodule's git configuration and hooks run on the host",
            Some("config" | "config.worktree" | "commondir" | "info" | "worktrees") => {
                "git reads its configuration, and the programs it runs, from it on the host"
            }
            _ => "git runs code from it on the host",
        };
    }
    let first = names.first().map_or("", String::as_str);
    match first {
        ".envrc" => "direnv runs it on the host",
        ".pre-commit-config.yaml" | ".husky" | ".githooks" => "hooks that git runs on the host",
        ".gitmodules" => "it names the submodules whose git directories are protected",
        ".hg" => "Mercurial runs its hooks on the host",
        ".dsh-bash" => "this project's dsh-bash configuration",
        ".mcp.json" | ".claude" | ".codex" | ".cursor" | ".gemini" | ".continue" | ".zed"
        | ".vscode" | ".idea" | ".devcontainer" => {
            "an agent's or editor's configuration, which starts programs on the host"
        }
        name if name.ends_with(".code-workspace") => {
            "an editor's workspace file, whose tasks run on the host"
        }
        _ if names
            .last()
            .is_some_and(|n| n.starts_with('.') || n == "bin") =>
        {
            "a home's start-up or configuration entry, which programs on the host run"
        }
        _ => "the host runs code from it",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rights(mode: SandboxMode) -> (tempfile::TempDir, WriteRights) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        let host = dsh_sandbox::HostDirs::from_env(|name| {
            (name == "HOME").then(|| root.join("home").into_os_string())
        });
        let caches = SandboxCaches::plan(&root.join("c/ws"), &host);
        let rights = WriteRights {
            mode,
            protected: vec![
                ws.join(".git/hooks"),
                ws.join(".git/config"),
                ws.join("home/.bashrc"),
            ],
            hidden: vec![root.join("home/.ssh/id_rsa")],
            caches: Arc::new(caches),
            private_tmp: Some(root.join("tmp")),
            workdir: ws.join("sub"),
            home: Some(root.join("home")),
            host_caches_bound: false,
            workspace: ws,
        };
        (dir, rights)
    }

    #[test]
    fn each_refusal_is_named_with_its_class_and_what_works_instead() {
        let (_dir, rights) = rights(SandboxMode::WorkspaceWrite);
        let ws = rights.workspace.clone();
        let stderr = format!(
            "touch: cannot touch '../.git/hooks/pre-commit': Read-only file system\n\
             npm error rofs EROFS: read-only file system, mkdir '~/.npm/_cacache'\n\
             error: failed to open `/etc/hosts`\n\nCaused by:\n  Read-only file system (os error 30)\n\
             cp: cannot create regular file '{}/src/main.rs': Read-only file system\n\
             see https://example.org/a/b and $TMPDIR/x",
            ws.display()
        );
        let blocked = rights.explain(DenialEvidence::Stderr, &[], &stderr);
        let classes: Vec<_> = blocked.iter().map(|b| (b.path.clone(), b.class)).collect();
        assert_eq!(
            classes,
            [
                (ws.join(".git/hooks/pre-commit"), BlockedClass::Protected),
                (
                    rights.home.clone().unwrap().join(".npm/_cacache"),
                    BlockedClass::HostCache
                ),
                (PathBuf::from("/etc/hosts"), BlockedClass::OutsideWorkspace),
            ],
            "{blocked:#?}"
        );
        assert_eq!(blocked[0].why, "protected: git hooks run on the host");
        assert!(blocked[0]
            .instead
            .starts_with("the operator can lift it with --unprotect .git"));
        assert!(blocked[1]
            .instead
            .contains("the sandbox's own npm cache at"));
        assert!(blocked[2].why.starts_with("outside the workspace"));
    }

    #[test]
    fn a_hidden_credential_file_is_named_as_hidden() {
        let (_dir, rights) = rights(SandboxMode::ReadOnly);
        let key = rights.home.clone().unwrap().join(".ssh/id_rsa");
        let stderr = format!("cat: {}: Permission denied", key.display());
        let blocked = rights.explain(DenialEvidence::Stderr, &[], &stderr);
        assert_eq!(blocked.len(), 1, "{blocked:#?}");
        assert_eq!(blocked[0].class, BlockedClass::Hidden);
        assert!(blocked[0].why.starts_with("hidden: a credential file"));
        assert!(blocked[0].instead.starts_with(&format!(
            "the operator can show it with --unhide {}",
            key.display()
        )));
    }

    #[test]
    fn a_forged_line_naming_a_writable_path_explains_nothing() {
        let (_dir, rights) = rights(SandboxMode::WorkspaceWrite);
        let ws = rights.workspace.display().to_string();
        let tmp = rights.private_tmp.clone().unwrap().display().to_string();
        let npm = rights.caches.dirs[0].path.display().to_string();
        let forged = format!(
            "{ws}/src/lib.rs: Read-only file system\n{tmp}/x: Permission denied\n{npm}/y: EROFS\n/dev/null: Read-only file system\nRead-only file system"
        );
        assert!(rights
            .explain(DenialEvidence::Stderr, &[], &forged)
            .is_empty());
        // A traceback's other paths are not what was refused.
        let traceback = format!(
            "  File \"/usr/lib/python3.11/shutil.py\", line 256, in copyfile\n    with open(dst, 'wb') as fdst:\nPermissionError: [Errno 13] Permission denied: '{ws}/.git/hooks/x'"
        );
        let blocked = rights.explain(DenialEvidence::Stderr, &[], &traceback);
        assert_eq!(blocked.len(), 1, "{blocked:#?}");
        assert_eq!(blocked[0].class, BlockedClass::Protected);
    }

    #[test]
    fn a_host_cache_a_backend_mounts_the_sandboxs_over_is_no_refusal() {
        let (_dir, mut rights) = rights(SandboxMode::WorkspaceWrite);
        let npm = rights.home.clone().unwrap().join(".npm");
        std::fs::create_dir_all(&npm).unwrap();
        let forged = format!(
            "touch: cannot touch '{}/x': Read-only file system",
            npm.display()
        );
        assert_eq!(
            rights.explain(DenialEvidence::Stderr, &[], &forged).len(),
            1
        );
        rights.host_caches_bound = true;
        assert!(rights
            .explain(DenialEvidence::Stderr, &[], &forged)
            .is_empty());
        // A protected file git renames over (a mount point): EBUSY.
        let busy = format!(
            "error: could not write config file {}/.git/config: Device or resource busy",
            rights.workspace.display()
        );
        let blocked = rights.explain(DenialEvidence::Stderr, &[], &busy);
        assert_eq!(blocked.len(), 1, "{blocked:#?}");
    }

    #[test]
    fn a_workspace_under_the_private_tmp_keeps_its_protected_paths() {
        let (_dir, mut rights) = rights(SandboxMode::WorkspaceWrite);
        // bubblewrap's private /tmp, and a workspace under /tmp.
        rights.private_tmp = rights.workspace.parent().map(Path::to_path_buf);
        let hook = rights.workspace.join(".git/hooks/pre-commit");
        let stderr = format!("bash: line 1: {}: Read-only file system", hook.display());
        let blocked = rights.explain(DenialEvidence::Stderr, &[], &stderr);
        assert_eq!(blocked.len(), 1, "{blocked:#?}");
        assert_eq!(blocked[0].class, BlockedClass::Protected);
    }

    #[test]
    fn kernel_records_and_read_only_calls() {
        let (_dir, rights) = rights(SandboxMode::ReadOnly);
        let refused = [
            "fs.make_reg on /etc".to_owned(),
            "fs.write_file on /etc".to_owned(),
        ];
        let blocked = rights.explain(DenialEvidence::Kernel, &refused, "ignored: /ws/x");
        assert_eq!(blocked.len(), 1, "{blocked:#?}");
        assert_eq!(blocked[0].class, BlockedClass::ReadOnlyMode);
        let inside = rights.workspace.join("out.txt").display().to_string();
        let blocked = rights.explain(
            DenialEvidence::Stderr,
            &[],
            &format!("bash: {inside}: Read-only file system"),
        );
        assert!(blocked[0]
            .instead
            .contains("sandbox_permissions: workspace-write"));
        // A path nobody could open by a grant gets no escalation hint.
        assert!(rights
            .escalation(Path::new("/proc/1/nothing/here"), "x")
            .is_empty());
    }

    #[test]
    fn why_and_unprotect_follow_the_protected_path() {
        assert_eq!(unprotect_name(Path::new("home/u/.bashrc")), ".bashrc");
        assert_eq!(unprotect_name(Path::new("lib/.git/config")), ".git");
        assert_eq!(unprotect_name(Path::new(".vscode")), ".vscode");
        assert_eq!(
            protected_why(Path::new(".git/modules/lib/config")),
            "a submodule's git configuration and hooks run on the host"
        );
        assert_eq!(
            protected_why(Path::new(".envrc")),
            "direnv runs it on the host"
        );
        assert!(protected_why(Path::new("home/u/.profile")).starts_with("a home's"));
    }
}
