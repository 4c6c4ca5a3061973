//! What this host gives the sandbox, found the way commands use it: each
//! backend's probe run now (not a verdict an earlier process kept), the
//! kernel switches bubblewrap depends on, and whether the kernel's audit
//! log can name Landlock denials. `dsh-bash doctor` prints it.

use std::path::PathBuf;

use crate::config::{Backend, LocalSandboxConfig};
use crate::provider::LocalSandboxProvider;

/// What the sandbox can use on this host, as probed now.
#[derive(Clone, Debug)]
pub struct Examined {
    /// bubblewrap as found on this process's PATH (`None`: not found).
    pub bwrap_program: Option<PathBuf>,
    /// bubblewrap's probe: a child confined by it, or why not.
    pub bwrap: Result<(), String>,
    /// The kernel's Landlock ABI version (0: none).
    pub landlock_abi: i64,
    /// Landlock's probe: a child confined by it, or why not.
    pub landlock: Result<(), String>,
    /// The kernel switches for user namespaces.
    pub user_namespaces: UserNamespaces,
    /// Whether the kernel's audit log names a Landlock command's
    /// refusals to this process, or why not (not asked when bubblewrap
    /// confines: its denials never come from the audit).
    pub audit: Result<(), String>,
    /// Whether a verdict an earlier process kept was dropped, so that the
    /// next command probes afresh (a fix since, such as an AppArmor
    /// profile for bwrap, may not change what the verdict is kept by).
    pub dropped_kept: bool,
}

/// The kernel switches that decide whether an unprivileged process may
/// make a user namespace (bubblewrap makes one even as root); `None` where
/// the switch does not exist on this kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserNamespaces {
    /// `/proc/sys/user/max_user_namespaces` (0 refuses them all).
    pub max_user_namespaces: Option<u64>,
    /// Debian's and Ubuntu's `/proc/sys/kernel/unprivileged_userns_clone`.
    pub unprivileged_userns_clone: Option<bool>,
    /// Ubuntu's `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`
    /// (set: only programs an AppArmor profile grants `userns` may).
    pub apparmor_restrict_unprivileged_userns: Option<bool>,
}

impl UserNamespaces {
    /// Reads the switches from `/proc/sys`.
    pub fn read() -> UserNamespaces {
        let number = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
        };
        UserNamespaces {
            max_user_namespaces: number("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: number("/proc/sys/kernel/unprivileged_userns_clone")
                .map(|n| n != 0),
            apparmor_restrict_unprivileged_userns: number(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            )
            .map(|n| n != 0),
        }
    }
}

/// Probes each backend on its own, as `config` would find and run it (its
/// `backend` choice is ignored: both are probed), reads the switches and
/// asks the kernel's audit.
pub async fn examine(config: &LocalSandboxConfig) -> Examined {
    let only = |backend: Backend| LocalSandboxConfig {
        backend,
        runner: None,
        ..config.clone()
    };
    let bwrap = LocalSandboxProvider::new(only(Backend::Bwrap));
    let bwrap_program = bwrap
        .as_ref()
        .ok()
        .map(|provider| provider.bwrap_program().to_owned())
        .filter(|program| program.is_absolute());
    let bwrap = match bwrap {
        Ok(provider) => provider.probe_now().await.map_err(|no| no.reasons),
        Err(err) => Err(err.to_string()),
    };
    let landlock = match LocalSandboxProvider::new(only(Backend::Landlock)) {
        Ok(provider) => provider.probe_now().await.map_err(|no| no.reasons),
        Err(err) => Err(err.to_string()),
    };
    let landlock_abi = crate::sys::landlock_abi();
    let audit = if bwrap.is_ok() {
        Err("not asked: bubblewrap confines commands here".to_owned())
    } else {
        tokio::task::spawn_blocking(move || crate::audit::available(landlock_abi))
            .await
            .unwrap_or_else(|err| Err(format!("the audit check did not finish: {err}")))
    };
    let (user_namespaces, dropped_kept) = tokio::task::spawn_blocking(|| {
        let dropped = crate::kept_verdict::forget();
        (UserNamespaces::read(), dropped)
    })
    .await
    .unwrap_or_default();
    Examined {
        bwrap_program,
        bwrap: bwrap.map(drop),
        landlock_abi,
        landlock: landlock.map(drop),
        user_namespaces,
        audit,
        dropped_kept,
    }
}
