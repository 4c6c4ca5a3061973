use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sandbox::{
    BoxFuture, Confinement, SandboxBackend, SandboxPolicy, SandboxProvider, SandboxUnavailable,
};

use crate::config::{Backend, ConfigError, LocalSandboxConfig};
use crate::error::{NoBackend, SandboxError};
use crate::verdict::Verdict;

/// Whether probe failure `reasons` come from the host running out of file
/// descriptors, processes or memory (EMFILE, ENFILE, EAGAIN, ENOMEM, as
/// the OS errors the probes report say), not from a missing sandbox.
fn exhausted(reasons: &str) -> bool {
    [
        "(os error 24)",
        "(os error 23)",
        "(os error 11)",
        "(os error 12)",
    ]
    .iter()
    .any(|code| reasons.contains(code))
}

/// Confines commands with the strongest usable local backend.
#[derive(Debug)]
pub struct LocalSandboxProvider {
    config: LocalSandboxConfig,
    /// The verdict once probed (or kept from an earlier process); cleared
    /// when a confined command's runner failed.
    verdict: std::sync::Mutex<Option<Verdict>>,
    /// One probe at a time: calls that race at start wait for the first
    /// one's verdict instead of probing again.
    probing: tokio::sync::Mutex<()>,
    #[cfg(target_os = "linux")]
    scope: std::sync::OnceLock<Option<Arc<OwnedFd>>>,
    #[cfg(target_os = "linux")]
    landlock: crate::landlock_backend::Prepared,
    #[cfg(target_os = "linux")]
    families: std::sync::OnceLock<Option<Arc<[dsh_sandbox::BpfInstruction]>>>,
    /// The filter bwrap runs under with the network on (terminal requests).
    terminal: std::sync::OnceLock<Option<Arc<[dsh_sandbox::BpfInstruction]>>>,
    /// util-linux `setsid` on this process's PATH, once a terminal request
    /// under bwrap needed it.
    #[cfg(target_os = "linux")]
    setsid: std::sync::OnceLock<Option<std::path::PathBuf>>,
    /// The network proxy every door of this provider's commands opens on.
    #[cfg(target_os = "linux")]
    proxy: crate::network::Proxy,
    /// The kernel's account of Landlock denials, once asked for.
    #[cfg(target_os = "linux")]
    audit: std::sync::OnceLock<Option<Arc<crate::audit::Listener>>>,
    /// The session's warm sandboxes under bubblewrap (one per policy that
    /// asked for one), and why none can be built here once one failed.
    #[cfg(target_os = "linux")]
    warm: Arc<std::sync::Mutex<crate::warm::Sandboxes>>,
}

impl LocalSandboxProvider {
    /// Builds a provider; nothing is probed until the first confinement.
    pub fn new(mut config: LocalSandboxConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // A wrapping runner is found once, on this process's PATH: a
        // command's own PATH (its environment is the runner's) must never
        // choose it. Not found, bubblewrap is unavailable (the probe says
        // so), and an operator runner is a configuration error.
        if let Some(found) = absolute(&config.bwrap) {
            config.bwrap = found;
        }
        if let Some(runner) = config.runner.as_mut() {
            let program = std::path::PathBuf::from(&runner.command[0]);
            match absolute(&program) {
                Some(found) => runner.command[0] = found.into_os_string(),
                None => {
                    return Err(ConfigError::RunnerNotFound {
                        program: program.display().to_string(),
                    })
                }
            }
        }
        Ok(LocalSandboxProvider {
            config,
            verdict: std::sync::Mutex::new(None),
            probing: tokio::sync::Mutex::new(()),
            #[cfg(target_os = "linux")]
            scope: std::sync::OnceLock::new(),
            #[cfg(target_os = "linux")]
            landlock: crate::landlock_backend::Prepared::default(),
            #[cfg(target_os = "linux")]
            families: std::sync::OnceLock::new(),
            terminal: std::sync::OnceLock::new(),
            #[cfg(target_os = "linux")]
            setsid: std::sync::OnceLock::new(),
            #[cfg(target_os = "linux")]
            proxy: crate::network::Proxy::default(),
            #[cfg(target_os = "linux")]
            audit: std::sync::OnceLock::new(),
            #[cfg(target_os = "linux")]
            warm: Arc::default(),
        })
    }

    /// Which backend confines commands, or why none can; probes on first
    /// use.
    pub async fn backend(&self) -> Result<SandboxBackend, NoBackend> {
        if self.config.runner.is_some() {
            return Ok(SandboxBackend::Runner);
        }
        match self.verdict().await {
            Ok(Verdict::Bwrap) => Ok(SandboxBackend::Bwrap),
            Ok(Verdict::Landlock { .. }) => Ok(SandboxBackend::Landlock),
            Ok(Verdict::Unavailable(why)) | Err(why) => Err(NoBackend { reasons: why }),
        }
    }

    /// The bubblewrap program as found on this process's PATH when the
    /// provider was built (relative, as configured, when not found).
    pub fn bwrap_program(&self) -> &std::path::Path {
        &self.config.bwrap
    }

    /// Probes the configured backend choice now, neither reading nor
    /// keeping a verdict (not the one an earlier process kept, nor this
    /// provider's): what `dsh-bash doctor` reports.
    #[cfg(target_os = "linux")]
    pub async fn probe_now(&self) -> Result<SandboxBackend, NoBackend> {
        if self.config.runner.is_some() {
            return Ok(SandboxBackend::Runner);
        }
        match self.probe().await.0 {
            Verdict::Bwrap => Ok(SandboxBackend::Bwrap),
            Verdict::Landlock { .. } => Ok(SandboxBackend::Landlock),
            Verdict::Unavailable(reasons) => Err(NoBackend { reasons }),
        }
    }

    /// The backend verdict, probed once. A probe that failed because the
    /// host ran out of descriptors, processes or memory makes this command
    /// an error (its reasons), whatever the other probes found (a backend
    /// chosen then may be a weaker one than the host has), and keeps
    /// nothing: the next command probes again.
    async fn verdict(&self) -> Result<Verdict, String> {
        if let Some(kept) = self.kept() {
            return Ok(kept);
        }
        let _probing = self.probing.lock().await;
        if let Some(kept) = self.kept() {
            return Ok(kept);
        }
        match self.select().await {
            // A stronger backend may be there: nothing runs under a weaker
            // one meanwhile (the command is refused as "could not be
            // started now", and the next one probes again).
            (_, Some(exhausted)) => Err(exhausted),
            (verdict, None) => Ok(self.keep(verdict)),
        }
    }

    fn kept(&self) -> Option<Verdict> {
        self.verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn keep(&self, verdict: Verdict) -> Verdict {
        *self
            .verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(verdict.clone());
        verdict
    }

    /// The scope-only Landlock ruleset bubblewrap runs under (one per
    /// provider; a ruleset fd can be enforced any number of times).
    #[cfg(target_os = "linux")]
    fn scope(&self) -> Option<Arc<OwnedFd>> {
        self.scope
            .get_or_init(|| crate::landlock_backend::scope_only().map(Arc::new))
            .clone()
    }

    /// What bwrap runs under: the scope-only ruleset and its filter (the
    /// terminal requests, and with the network off the foreign socket
    /// families; built once per provider), and for a terminal request
    /// util-linux `setsid` (looked for once per provider).
    #[cfg(target_os = "linux")]
    fn bwrap_restriction(&self, policy: &SandboxPolicy) -> crate::bwrap::Runner {
        let filter = match policy.network {
            dsh_sandbox::NetworkPolicy::Off | dsh_sandbox::NetworkPolicy::Allow => self
                .families
                .get_or_init(|| crate::seccomp::foreign_families().map(Arc::from)),
            _ => self
                .terminal
                .get_or_init(|| crate::seccomp::terminal_only().map(Arc::from)),
        };
        let setsid = policy.terminal.then(|| {
            self.setsid
                .get_or_init(crate::bwrap::util_linux_setsid)
                .clone()
        });
        crate::bwrap::Runner {
            scope: self.scope(),
            filter: filter.clone(),
            setsid: setsid.flatten(),
        }
    }

    #[cfg(target_os = "linux")]
    fn wrap_bwrap(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, SandboxError> {
        let bwrap = [self.config.bwrap.clone().into_os_string()];
        crate::bwrap::confine(
            &bwrap,
            policy,
            argv,
            self.bwrap_restriction(policy),
            crate::bwrap::NAME,
        )
    }

    /// The verdict kept by an earlier process for this host and
    /// configuration, else [`Self::probe`]'s, kept for later ones when it
    /// names a usable backend.
    #[cfg(target_os = "linux")]
    async fn select(&self) -> (Verdict, Option<String>) {
        let key = crate::kept_verdict::key(
            &format!("{:?}", self.config.backend),
            &self.config.bwrap,
            crate::sys::landlock_abi(),
        );
        if let Some(kept) = crate::kept_verdict::load(&key) {
            return (kept, None);
        }
        let (verdict, exhausted) = self.probe().await;
        if exhausted.is_none() {
            crate::kept_verdict::store(&key, &verdict);
        }
        (verdict, exhausted)
    }

    /// The strongest backend that passes its probe (or why none does), and
    /// the reasons when a probe failed for want of descriptors, processes
    /// or memory.
    #[cfg(target_os = "linux")]
    async fn probe(&self) -> (Verdict, Option<String>) {
        let timeout = self.config.probe_timeout;
        let mut reasons = Vec::new();
        if matches!(self.config.backend, Backend::Auto | Backend::Bwrap)
            && !self.config.bwrap.is_absolute()
        {
            reasons.push(format!(
                "bwrap: {} is not on this process's PATH (a command's PATH never chooses the runner)",
                self.config.bwrap.display()
            ));
        } else if matches!(self.config.backend, Backend::Auto | Backend::Bwrap) {
            let probed = crate::probe::check(
                crate::bwrap::NAME,
                |argv, policy| self.wrap_bwrap(argv, policy),
                timeout,
            )
            .await;
            match probed {
                Ok(()) => return (Verdict::Bwrap, None),
                Err(why) => reasons.push(why.to_string()),
            }
        }
        if matches!(self.config.backend, Backend::Auto | Backend::Landlock) {
            let abi = crate::sys::landlock_abi();
            if abi <= 0 {
                reasons.push(SandboxError::LandlockUnsupported.to_string());
            } else {
                let probed = crate::probe::check(
                    crate::landlock_backend::NAME,
                    |argv, policy| {
                        // The probe's workspace is its own: not the cached
                        // read-only ruleset's (which names no workspace,
                        // but stays per provider all the same).
                        crate::landlock_backend::confine(
                            argv,
                            policy,
                            abi,
                            &crate::landlock_backend::Prepared::default(),
                            None,
                            (None, None),
                        )
                    },
                    timeout,
                )
                .await;
                match probed {
                    Ok(()) => {
                        let reasons = reasons.join("; ");
                        let exhausted = exhausted(&reasons).then_some(reasons);
                        return (Verdict::Landlock { abi }, exhausted);
                    }
                    Err(why) => reasons.push(why.to_string()),
                }
            }
        }
        let reasons = reasons.join("; ");
        tracing::warn!(%reasons, "no usable sandbox backend");
        let exhausted = exhausted(&reasons).then(|| reasons.clone());
        (Verdict::Unavailable(reasons), exhausted)
    }

    #[cfg(not(target_os = "linux"))]
    async fn select(&self) -> (Verdict, Option<String>) {
        (
            Verdict::Unavailable("no sandbox backend exists for this platform".into()),
            None,
        )
    }

    #[cfg(target_os = "linux")]
    async fn confine_now(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, SandboxUnavailable> {
        let unavailable = |err: SandboxError| {
            let why = err.to_string();
            if exhausted(&why) {
                SandboxUnavailable::exhausted(policy.mode, Some(why))
            } else {
                SandboxUnavailable::new(policy.mode, Some(why))
            }
        };
        if let Some(runner) = &self.config.runner {
            return self
                .confine_wrapped(runner.command.clone(), argv, policy, "runner")
                .await
                .map_err(unavailable);
        }
        let verdict = match self.verdict().await {
            Ok(verdict) => verdict,
            Err(why) => return Err(SandboxUnavailable::exhausted(policy.mode, Some(why))),
        };
        match &verdict {
            Verdict::Bwrap => {
                if let Some(key) = crate::warm::Key::of(policy).filter(|_| self.config.warm) {
                    if let Some(confinement) = self
                        .confine_warm(key, argv, policy)
                        .await
                        .map_err(unavailable)?
                    {
                        return Ok(confinement);
                    }
                }
                let bwrap = vec![self.config.bwrap.clone().into_os_string()];
                self.confine_wrapped(bwrap, argv, policy, crate::bwrap::NAME)
                    .await
                    .map_err(unavailable)
            }
            Verdict::Landlock { abi } => self
                .confine_landlock(argv, policy, *abi)
                .await
                .map_err(unavailable),
            Verdict::Unavailable(why) => {
                Err(SandboxUnavailable::new(policy.mode, Some(why.clone())))
            }
        }
    }

    /// Under bubblewrap or a bwrap-shaped runner: on an allow-list, the
    /// forwarder is bound in, inherits the door and the forwarder
    /// starts the command. Opening the protected paths and making stand-ins
    /// touches the file system: off the runtime threads.
    #[cfg(target_os = "linux")]
    async fn confine_wrapped(
        &self,
        runner: Vec<OsString>,
        argv: &[OsString],
        policy: &SandboxPolicy,
        name: &'static str,
    ) -> Result<Confinement, SandboxError> {
        let mut owned_policy = policy.clone();
        let forwarded = match self.forwarder_for(&mut owned_policy)? {
            Some(program) => Some(self.forwarded(policy, &program, argv)?),
            None => None,
        };
        let owned_argv = forwarded
            .as_ref()
            .map_or_else(|| argv.to_vec(), |forwarded| forwarded.argv.clone());
        let restriction = self.bwrap_restriction(policy);
        let mut confinement = tokio::task::spawn_blocking(move || {
            crate::bwrap::confine(&runner, &owned_policy, &owned_argv, restriction, name)
        })
        .await
        .map_err(|err| SandboxError::Interrupted {
            detail: err.to_string(),
        })??;
        if let Some(forwarded) = forwarded {
            // Kept at its number through bwrap into the forwarder, which
            // closes it on exec of the command.
            forwarded.attach(&mut confinement);
        }
        Ok(confinement)
    }

    /// On an allow-list under bubblewrap: the forwarder program, made
    /// readable in `policy`; `None` on any other network policy.
    #[cfg(target_os = "linux")]
    fn forwarder_for(&self, policy: &mut SandboxPolicy) -> Result<Option<PathBuf>, SandboxError> {
        if policy.network != dsh_sandbox::NetworkPolicy::Allow {
            return Ok(None);
        }
        let program = crate::network::forwarder(self.config.forwarder.as_ref())?.clone();
        policy.readable.push(program.clone());
        Ok(Some(program))
    }

    /// The command's door and the command line that starts `program` (the
    /// forwarder) on its far end before the command.
    #[cfg(target_os = "linux")]
    fn forwarded(
        &self,
        policy: &SandboxPolicy,
        program: &Path,
        argv: &[OsString],
    ) -> Result<crate::network::Forwarded, SandboxError> {
        let door = crate::network::open(&self.proxy, policy, true)?;
        let far_end = door.far_end().ok_or_else(|| SandboxError::Door {
            cause: std::io::Error::other("a passed door without its far end"),
        })?;
        let mut forwarded_argv = dsh_net_proxy::forward::argv(program, far_end.as_raw_fd());
        forwarded_argv.extend_from_slice(argv);
        Ok(crate::network::Forwarded {
            door,
            far_end,
            argv: forwarded_argv,
        })
    }

    /// A command entering the session's warm sandbox for `key` (built or
    /// built again here when none fits); `None` when none can be built
    /// (said once in the log; the cold path confines then). On an
    /// allow-list the command gets its own door (opened once the sandbox is
    /// there) and network namespace, and the forwarder starts it there.
    #[cfg(target_os = "linux")]
    async fn confine_warm(
        &self,
        key: crate::warm::Key,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Option<Confinement>, SandboxError> {
        let runner = self.bwrap_restriction(policy);
        let mut owned = policy.clone();
        let program = self.forwarder_for(&mut owned)?;
        let owned_argv = argv.to_vec();
        let bwrap = self.config.bwrap.clone();
        let sandboxes = Arc::clone(&self.warm);
        // Resolving the protected paths, building, and checking what must
        // stay readable read the file system: off the runtime threads.
        let confined = tokio::task::spawn_blocking(move || {
            let warm = crate::warm::warm_for(&sandboxes, &bwrap, key, &owned)?;
            Some(warm.confine(&owned, &owned_argv, runner))
        })
        .await
        .ok()
        .flatten();
        let Some(mut confinement) = confined else {
            return Ok(None);
        };
        if let Some(program) = program {
            let forwarded = self.forwarded(policy, &program, argv)?;
            confinement.invocation.argv.clone_from(&forwarded.argv);
            forwarded.attach(&mut confinement);
        }
        Ok(Some(confinement))
    }

    /// Under Landlock: on an allow-list, the door is a loopback port the
    /// ruleset lets the command connect to.
    #[cfg(target_os = "linux")]
    async fn confine_landlock(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
        abi: i64,
    ) -> Result<Confinement, SandboxError> {
        // Landlock keeps no protected path; whether any would be kept here
        // decides the gap, and finding out reads the workspace: off the
        // runtime threads.
        let nothing_to_keep = if policy.mode == dsh_sandbox::SandboxMode::WorkspaceWrite
            && !policy.protected.is_empty()
        {
            let owned = policy.clone();
            tokio::task::spawn_blocking(move || {
                dsh_protect::resolve(&owned.protected, &owned.workspace)
                    .paths
                    .is_empty()
            })
            .await
            .unwrap_or(false)
        } else {
            false
        };
        let policy = if nothing_to_keep {
            std::borrow::Cow::Owned(SandboxPolicy {
                protected: dsh_sandbox::ProtectedPaths::none(),
                ..policy.clone()
            })
        } else {
            std::borrow::Cow::Borrowed(policy)
        };
        let door = if policy.network == dsh_sandbox::NetworkPolicy::Allow {
            // Below ABI 4 the port rule is ignored and the filter lets TCP
            // through: an allow-list would be no list at all.
            if abi < 4 {
                return Err(SandboxError::AllowListNeedsTcpRules { abi });
            }
            Some(crate::network::open(&self.proxy, &policy, false)?)
        } else {
            None
        };
        let port = door.as_ref().and_then(crate::network::OpenDoor::port);
        let around = self.landlock.around(&policy).await?;
        let mut confinement = crate::landlock_backend::confine(
            argv,
            &policy,
            abi,
            &self.landlock,
            port,
            (around.as_ref(), crate::audit::Listener::get(&self.audit)),
        )?;
        if let (Some(door), Some(port)) = (door, port) {
            crate::network::attach(&mut confinement, door, port);
        }
        Ok(confinement)
    }

    #[cfg(not(target_os = "linux"))]
    async fn confine_now(
        &self,
        _argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, SandboxUnavailable> {
        Err(SandboxUnavailable::new(policy.mode, None))
    }
}

impl SandboxProvider for LocalSandboxProvider {
    fn runner_failed(&self) {
        // The verdict may be stale (bwrap removed, user namespaces turned
        // off): the next command probes again, here and in other processes.
        *self
            .verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        #[cfg(target_os = "linux")]
        crate::kept_verdict::forget();
    }

    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            #[cfg(target_os = "linux")]
            {
                let kept = self
                    .warm
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .release();
                // Releasing the stand-ins touches the file system.
                let _ = tokio::task::spawn_blocking(move || drop(kept)).await;
            }
        })
    }

    fn confine<'a>(
        &'a self,
        argv: &'a [OsString],
        policy: &'a SandboxPolicy,
    ) -> BoxFuture<'a, Result<Confinement, SandboxUnavailable>> {
        Box::pin(async move {
            if !policy.mode.confines() {
                return Ok(Confinement::unconfined(argv));
            }
            self.confine_now(argv, policy).await
        })
    }
}

/// `program` as an absolute path: itself if absolute; a bare name found on
/// this process's `PATH` (the launcher's default when it has none; relative
/// entries skipped); else `None` (a relative path with a `/` included).
fn absolute(program: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    if program.is_absolute() {
        return Some(program.to_owned());
    }
    if program.as_os_str().is_empty() || program.components().count() != 1 {
        return None;
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| std::ffi::OsString::from("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::absolute;
    use std::path::Path;

    #[test]
    fn a_runner_is_absolute_or_not_at_all() {
        let found = absolute(Path::new("sh")).expect("sh on PATH");
        assert!(found.is_absolute() && found.ends_with("sh"), "{found:?}");
        assert_eq!(
            absolute(Path::new("/opt/bwrap")),
            Some(Path::new("/opt/bwrap").to_owned())
        );
        assert_eq!(absolute(Path::new("bin/bwrap")), None);
        assert_eq!(absolute(Path::new("no-such-program-here")), None);
    }
}
