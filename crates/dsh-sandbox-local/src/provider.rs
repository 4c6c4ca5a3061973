use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use dsh_sandbox::{
    BoxFuture, Confinement, SandboxEnforcement, SandboxPolicy, SandboxProvider, SandboxUnavailable,
};
use tokio::sync::OnceCell;

use crate::config::{Backend, ConfigError, LocalSandboxConfig, RunnerCommand};

/// The backend the probes chose, or why none can be used.
#[derive(Clone, Debug)]
enum Verdict {
    Bwrap,
    Landlock { abi: i64 },
    Unavailable(String),
}

/// Confines commands with the strongest usable local backend.
#[derive(Debug)]
pub struct LocalSandboxProvider {
    config: LocalSandboxConfig,
    verdict: OnceCell<Verdict>,
}

impl LocalSandboxProvider {
    /// Builds a provider; nothing is probed until the first confinement.
    pub fn new(config: LocalSandboxConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(LocalSandboxProvider {
            config,
            verdict: OnceCell::new(),
        })
    }

    /// Which backend confines commands (`bwrap`, `landlock`, `runner`), or
    /// why none can; probes on first use.
    pub async fn backend(&self) -> Result<&'static str, String> {
        if self.config.runner.is_some() {
            return Ok("runner");
        }
        match self.verdict().await {
            Verdict::Bwrap => Ok("bwrap"),
            Verdict::Landlock { .. } => Ok("landlock"),
            Verdict::Unavailable(why) => Err(why.clone()),
        }
    }

    async fn verdict(&self) -> &Verdict {
        self.verdict.get_or_init(|| self.select()).await
    }

    #[cfg(target_os = "linux")]
    async fn select(&self) -> Verdict {
        let timeout = Duration::from_secs_f64(self.config.probe_timeout_ms / 1000.0);
        let mut reasons = Vec::new();
        if matches!(self.config.backend, Backend::Auto | Backend::Bwrap) {
            let bwrap = [self.config.bwrap.clone().into_os_string()];
            match crate::probe::check(
                |argv, policy| Ok(self.wrap_bwrap(&bwrap, argv, policy)),
                timeout,
            )
            .await
            {
                Ok(_) => return Verdict::Bwrap,
                Err(why) => reasons.push(format!("bwrap: {why}")),
            }
        }
        if matches!(self.config.backend, Backend::Auto | Backend::Landlock) {
            let abi = crate::sys::landlock_abi();
            let probed = crate::probe::check(
                |argv, policy| crate::landlock_backend::confine(argv, policy, abi),
                timeout,
            )
            .await;
            match probed {
                Ok(_) if abi > 0 => return Verdict::Landlock { abi },
                Ok(_) => reasons.push("landlock: not supported by this kernel".into()),
                Err(why) => reasons.push(format!("landlock: {why}")),
            }
        }
        tracing::warn!(reasons = %reasons.join("; "), "no usable sandbox backend");
        Verdict::Unavailable(reasons.join("; "))
    }

    #[cfg(not(target_os = "linux"))]
    async fn select(&self) -> Verdict {
        Verdict::Unavailable("no sandbox backend exists for this platform".into())
    }

    #[cfg(target_os = "linux")]
    fn wrap_bwrap(
        &self,
        runner: &[OsString],
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Confinement {
        Confinement {
            argv: crate::bwrap::wrap(runner, policy, argv),
            pre_exec: None,
            backend: crate::bwrap::NAME.into(),
            enforcement: SandboxEnforcement::Full,
            denial_signatures: vec![crate::bwrap::DENIAL.into()],
            runner_failure_signatures: vec![crate::bwrap::RUNNER_FAILURE.into()],
        }
    }

    #[cfg(target_os = "linux")]
    fn wrap_runner(
        runner: &RunnerCommand,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Confinement {
        let program = runner
            .command
            .first()
            .map(|p| Path::new(p).display().to_string())
            .unwrap_or_default();
        let mut failures = runner.failure_signatures.clone();
        failures.extend([
            format!("{program}: command not found"),
            format!("{program}: not found"),
            format!("{program}: No such file or directory"),
            format!("{program}: Permission denied"),
        ]);
        Confinement {
            argv: crate::bwrap::wrap(&runner.command, policy, argv),
            pre_exec: None,
            backend: "runner".into(),
            enforcement: SandboxEnforcement::Full,
            denial_signatures: vec![
                crate::bwrap::DENIAL.into(),
                crate::landlock_backend::DENIAL.into(),
            ],
            runner_failure_signatures: failures,
        }
    }

    #[cfg(target_os = "linux")]
    async fn confine_now(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, SandboxUnavailable> {
        if let Some(runner) = &self.config.runner {
            return Ok(Self::wrap_runner(runner, argv, policy));
        }
        match self.verdict().await {
            Verdict::Bwrap => {
                let bwrap = [self.config.bwrap.clone().into_os_string()];
                Ok(self.wrap_bwrap(&bwrap, argv, policy))
            }
            Verdict::Landlock { abi } => crate::landlock_backend::confine(argv, policy, *abi)
                .map_err(|why| SandboxUnavailable::new(policy.mode, Some(why))),
            Verdict::Unavailable(why) => {
                Err(SandboxUnavailable::new(policy.mode, Some(why.clone())))
            }
        }
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
    fn confine<'a>(
        &'a self,
        argv: &'a [OsString],
        policy: &'a SandboxPolicy,
    ) -> BoxFuture<'a, Result<Confinement, SandboxUnavailable>> {
        Box::pin(async move {
            if !policy.mode.confines() {
                return Ok(Confinement {
                    argv: argv.to_vec(),
                    pre_exec: None,
                    backend: "none".into(),
                    enforcement: SandboxEnforcement::Full,
                    denial_signatures: Vec::new(),
                    runner_failure_signatures: Vec::new(),
                });
            }
            self.confine_now(argv, policy).await
        })
    }
}
