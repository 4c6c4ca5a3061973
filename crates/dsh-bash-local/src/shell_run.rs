//! What the shell of one command is given (the snapshot's variables and
//! script, the descriptor its `EXIT` trap reports the final directory on)
//! and what it says back ([`dsh_bash::ShellFacts`]).

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use dsh_bash::{BashExecSpec, ShellFacts};

use crate::shell::ShellSnapshot;
use crate::{Invocation, LocalConfig};

/// The most bytes read back of a final directory report.
const MAX_REPORT_BYTES: u64 = 64 << 10;

/// One command's shell set-up, kept until it has ended.
#[derive(Debug, Default)]
pub(crate) struct ShellRun {
    snapshot: Option<Arc<ShellSnapshot>>,
    /// The read end of the final-directory pipe.
    report: Option<OwnedFd>,
    /// Whether the result says anything about the shell.
    speaks: bool,
}

impl ShellRun {
    /// Prepares `invocation` for `spec`: the snapshot, when one is ready
    /// and the shell is bash; the final-directory report when asked for
    /// (`foreground` commands only). A caller's own `BASH_ENV` wins: then
    /// neither the script nor the report.
    pub(crate) fn prepare(
        config: &LocalConfig,
        prologue: &OnceLock<Option<Arc<OwnedFd>>>,
        spec: &BashExecSpec,
        invocation: &mut Invocation,
        foreground: bool,
    ) -> io::Result<ShellRun> {
        let bash = config.shell.file_name().is_some_and(|name| name == "bash");
        let slot = config.shell_snapshot.as_ref();
        let mut run = ShellRun {
            snapshot: slot.and_then(|slot| slot.current()).filter(|_| bash),
            report: None,
            speaks: slot.is_some() || (spec.report_cwd && foreground),
        };
        let own_bash_env = spec.env.as_ref().is_some_and(|env| env.contains_key("BASH_ENV"));
        if !bash || own_bash_env {
            return Ok(run);
        }
        let script = match &run.snapshot {
            Some(snapshot) => Some(Arc::clone(&snapshot.script)),
            None if spec.report_cwd && foreground => prologue
                .get_or_init(|| crate::sys::sealed_text(crate::shell::PROLOGUE.as_bytes()).ok().map(Arc::new))
                .clone(),
            None => None,
        };
        let Some(script) = script else {
            return Ok(run);
        };
        let set = |name: &str, value: String| (OsString::from(name), Some(OsString::from(value)));
        invocation
            .environment
            .push(set("BASH_ENV", format!("/dev/fd/{}", script.as_raw_fd())));
        invocation.restriction.keep_fds.push(script);
        if let Some(definitions) = run.snapshot.as_ref().and_then(|s| s.definitions.clone()) {
            invocation
                .environment
                .push(set("DSH_SNAP_DEFS", definitions.as_raw_fd().to_string()));
            invocation.restriction.keep_fds.push(definitions);
        }
        if spec.report_cwd && foreground {
            let (read, write) = crate::sys::pipe()?;
            let write = crate::sys::high(write);
            rustix::io::ioctl_fionbio(&read, true)?;
            invocation
                .environment
                .push(set("DSH_CWD_FD", write.as_raw_fd().to_string()));
            invocation.restriction.keep_fds.push(Arc::new(write));
            run.report = Some(read);
        }
        Ok(run)
    }

    /// The snapshot's variables, merged below the caller's own.
    pub(crate) fn variables(&self) -> &[(OsString, OsString)] {
        self.snapshot.as_ref().map_or(&[], |s| s.variables())
    }

    /// What the shell said, once it has ended.
    pub(crate) fn facts(self) -> Option<ShellFacts> {
        if !self.speaks {
            return None;
        }
        Some(ShellFacts {
            snapshot: self.snapshot.is_some(),
            final_cwd: self.report.and_then(|report| last_report(&report)),
        })
    }
}

/// The last NUL-terminated record on the report pipe (the trap writes
/// last; anything the command wrote there itself comes before it).
fn last_report(report: &OwnedFd) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let mut bytes = Vec::new();
    let file = std::fs::File::from(report.try_clone().ok()?);
    // Nonblocking: what is there now is all the shell wrote.
    let _ = file.take(MAX_REPORT_BYTES).read_to_end(&mut bytes);
    let body = bytes.strip_suffix(&[0])?;
    let last = body.rsplit(|b| *b == 0).next()?;
    (!last.is_empty()).then(|| PathBuf::from(OsString::from_vec(last.to_vec())))
}
