//! Doctor's sandbox findings: each backend probed now as `--sandbox`
//! would run it, the kernel switches bubblewrap needs, the kernel's audit
//! of Landlock denials, and what the network allow-list can use.

use crate::doctor::{Finding, Status};

/// Where bubblewrap comes from.
const INSTALL_BWRAP: &str = "install bubblewrap so that bwrap is on the server's PATH (apt install bubblewrap, dnf install bubblewrap, pacman -S bubblewrap)";

/// The sandbox's findings under the backend choice `backend`, in the
/// order printed, and whether a verdict an earlier process kept was
/// dropped (the next command probes afresh).
#[cfg(target_os = "linux")]
pub async fn findings(backend: dsh_sandbox_local::Backend) -> (Vec<Finding>, bool) {
    let config = dsh_sandbox_local::LocalSandboxConfig::default();
    let examined = dsh_sandbox_local::examine(&config).await;
    let is_root = host_root().await;
    let bwrap_version = match &examined.bwrap_program {
        Some(program) => crate::doctor::version_line(program).await,
        None => None,
    };
    let findings = vec![
        sandbox(&examined, &backend),
        bubblewrap(&examined, bwrap_version.as_deref(), is_root),
        landlock(&examined),
        user_namespaces(&examined, is_root),
        audit(&examined),
        network(&examined),
    ];
    (findings, examined.dropped_kept)
}

/// Whether this process is the host's root: uid 0 whose user namespace
/// maps every uid (root in a rootless container is not, and the kernel's
/// switches bind it as they bind any user).
#[cfg(target_os = "linux")]
async fn host_root() -> bool {
    if !rustix::process::geteuid().is_root() {
        return false;
    }
    let map = tokio::fs::read_to_string("/proc/self/uid_map")
        .await
        .unwrap_or_default();
    map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
}

/// Where no backend exists for the platform.
#[cfg(not(target_os = "linux"))]
pub async fn findings(_backend: dsh_sandbox_local::Backend) -> (Vec<Finding>, bool) {
    let findings = vec![Finding::new(
        "sandbox",
        Status::Missing,
        "no sandbox backend exists for this platform: --sandbox read-only and workspace-write are refused",
    )];
    (findings, false)
}

#[cfg(target_os = "linux")]
fn sandbox(
    examined: &dsh_sandbox_local::Examined,
    backend: &dsh_sandbox_local::Backend,
) -> Finding {
    use dsh_sandbox_local::Backend;
    let bwrap = examined.bwrap.is_ok() && *backend != Backend::Landlock;
    let landlock = examined.landlock.is_ok() && *backend != Backend::Bwrap;
    let forced = match backend {
        Backend::Auto => "",
        Backend::Bwrap => " (--sandbox-backend bwrap)",
        Backend::Landlock => " (--sandbox-backend landlock)",
    };
    if bwrap {
        Finding::new(
            "sandbox",
            Status::Ok,
            format!(
                "--sandbox read-only and workspace-write confine commands with bubblewrap{forced}"
            ),
        )
    } else if landlock {
        Finding::new(
            "sandbox",
            Status::Warn,
            format!("--sandbox read-only and workspace-write confine commands with Landlock{forced}: weaker than bubblewrap, e.g. file modes and owners outside the workspace can change and protected paths inside a writable workspace are not kept read-only; each result lists its gaps"),
        )
        .fix(INSTALL_BWRAP)
    } else {
        let fix = match &examined.bwrap {
            Err(reasons) => scratch_fix(reasons),
            Ok(()) => None,
        };
        Finding::new(
            "sandbox",
            Status::Missing,
            format!("no backend confines a command here{forced}: --sandbox read-only and workspace-write commands are refused (see bubblewrap and landlock below)"),
        )
        .fix(fix.unwrap_or_else(|| INSTALL_BWRAP.to_owned()))
    }
}

#[cfg(target_os = "linux")]
fn bubblewrap(
    examined: &dsh_sandbox_local::Examined,
    version: Option<&str>,
    is_root: bool,
) -> Finding {
    let Some(program) = &examined.bwrap_program else {
        return Finding::new(
            "bubblewrap",
            Status::Missing,
            "bwrap is not on this process's PATH",
        )
        .fix(INSTALL_BWRAP);
    };
    let named = match version {
        Some(version) => format!("{} ({version})", program.display()),
        None => program.display().to_string(),
    };
    match &examined.bwrap {
        Ok(()) => Finding::new(
            "bubblewrap",
            Status::Ok,
            format!("{named} confines a child"),
        ),
        Err(reasons) => {
            let finding = Finding::new(
                "bubblewrap",
                Status::Missing,
                format!("{named} cannot confine a child: {reasons}"),
            );
            let fix = userns_fix(&examined.user_namespaces, is_root, program)
                .or_else(|| scratch_fix(reasons))
                .unwrap_or_else(|| format!("run `{} --ro-bind / / --unshare-all true` by hand: bubblewrap's own error says what it lacks", program.display()));
            finding.fix(fix)
        }
    }
}

#[cfg(target_os = "linux")]
fn landlock(examined: &dsh_sandbox_local::Examined) -> Finding {
    let abi = examined.landlock_abi;
    if abi <= 0 {
        return Finding::new(
            "landlock",
            Status::Missing,
            "this kernel has no Landlock",
        )
        .fix("Linux 5.13 or later with landlock in the lsm= boot parameter (CONFIG_SECURITY_LANDLOCK)");
    }
    match &examined.landlock {
        Err(reasons) => Finding::new(
            "landlock",
            Status::Missing,
            format!("ABI {abi}, but it cannot confine a child: {reasons}"),
        )
        .fix(scratch_fix(reasons).unwrap_or_else(|| "the reasons above name the step that failed; a seccomp or LSM policy of the host's (a container's default profile) may refuse landlock_restrict_self".into())),
        Ok(()) if abi < 4 => Finding::new(
            "landlock",
            Status::Warn,
            format!("ABI {abi} confines a child's files; no network allow-list under Landlock (its TCP rules need ABI 4)"),
        )
        .fix("Linux 6.7 or later for ABI 4"),
        Ok(()) => Finding::new(
            "landlock",
            Status::Ok,
            format!("ABI {abi} confines a child's files and TCP connections"),
        ),
    }
}

/// Where a probe failed for want of its scratch directory, the fix is the
/// temp directory's, not the backend's.
#[cfg(target_os = "linux")]
fn scratch_fix(reasons: &str) -> Option<String> {
    reasons
        .contains("probe scratch dir")
        .then(|| "make the temp directory writable (see temp below): the probe makes its scratch directory there".to_owned())
}

/// What to change so that bubblewrap (`program`) may make its user
/// namespace, where the switches say why it cannot.
#[cfg(target_os = "linux")]
fn userns_fix(
    switches: &dsh_sandbox_local::UserNamespaces,
    is_root: bool,
    program: &std::path::Path,
) -> Option<String> {
    if switches.max_user_namespaces == Some(0) {
        return Some(
            "sysctl -w user.max_user_namespaces=15000 (0 refuses every user namespace)".into(),
        );
    }
    if !is_root && switches.unprivileged_userns_clone == Some(false) {
        return Some("sysctl -w kernel.unprivileged_userns_clone=1".into());
    }
    if !is_root && switches.apparmor_restrict_unprivileged_userns == Some(true) {
        let program = program.display();
        return Some(format!("AppArmor restricts user namespaces: add a profile for bwrap that grants them (/etc/apparmor.d/bwrap: `abi <abi/4.0>, include <tunables/global> profile bwrap {program} flags=(unconfined) {{ userns, }}`, then apparmor_parser -r /etc/apparmor.d/bwrap)"));
    }
    None
}

/// The switches, judged by whether bubblewrap gets its namespace: where it
/// does (an AppArmor profile grants it, a setuid bwrap), they bind nothing.
#[cfg(target_os = "linux")]
fn user_namespaces(examined: &dsh_sandbox_local::Examined, is_root: bool) -> Finding {
    let switches = &examined.user_namespaces;
    let shown = |value: Option<bool>| match value {
        Some(true) => "1",
        Some(false) => "0",
        None => "absent",
    };
    let found = format!(
        "max_user_namespaces {}, unprivileged_userns_clone {}, apparmor_restrict_unprivileged_userns {}",
        switches
            .max_user_namespaces
            .map_or_else(|| "absent".to_owned(), |n| n.to_string()),
        shown(switches.unprivileged_userns_clone),
        shown(switches.apparmor_restrict_unprivileged_userns),
    );
    let program = examined
        .bwrap_program
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("/usr/bin/bwrap"));
    match userns_fix(switches, is_root, &program) {
        Some(_) if examined.bwrap.is_ok() => Finding::new(
            "user-namespaces",
            Status::Ok,
            format!("{found}: bubblewrap makes its namespace all the same (a profile or its own privilege grants it)"),
        ),
        Some(fix) => Finding::new(
            "user-namespaces",
            Status::Missing,
            format!("{found}: bubblewrap cannot make its user namespace"),
        )
        .fix(fix),
        None => Finding::new("user-namespaces", Status::Ok, found),
    }
}

#[cfg(target_os = "linux")]
fn audit(examined: &dsh_sandbox_local::Examined) -> Finding {
    match &examined.audit {
        Ok(()) => Finding::new(
            "audit",
            Status::Ok,
            "the kernel's audit log names what Landlock refused each command",
        ),
        // Under bubblewrap the audit has nothing to say: denials are read
        // from the command's stderr whatever it gives.
        Err(_) if examined.bwrap.is_ok() => Finding::new(
            "audit",
            Status::Ok,
            "not needed: commands run under bubblewrap, whose denials are read from the command's stderr",
        ),
        Err(why) => Finding::new(
            "audit",
            Status::Warn,
            format!("a Landlock command's denials are inferred from its stderr: {why}"),
        )
        .fix("Landlock ABI 7 (Linux 6.15), the kernel's audit on (auditctl -e 1, or auditd) and the server as root (CAP_AUDIT_READ and CAP_AUDIT_WRITE)"),
    }
}

#[cfg(target_os = "linux")]
fn network(examined: &dsh_sandbox_local::Examined) -> Finding {
    if examined.bwrap.is_ok() {
        Finding::new(
            "network",
            Status::Ok,
            "--network allow reaches only the listed hosts, through the server's proxy, from bubblewrap's own network namespace",
        )
    } else if examined.landlock.is_ok() && examined.landlock_abi >= 4 {
        Finding::new(
            "network",
            Status::Warn,
            "--network allow goes through the server's proxy by Landlock's TCP rules, which know the proxy's port, not the host: a command can reach any host on that same port directly",
        )
        .fix(INSTALL_BWRAP)
    } else {
        Finding::new(
            "network",
            Status::Missing,
            "--network allow is refused here: it needs bubblewrap or Landlock ABI 4",
        )
        .fix(INSTALL_BWRAP)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use dsh_sandbox_local::{Examined, UserNamespaces};

    fn examined(bwrap: Result<(), String>, switches: UserNamespaces) -> Examined {
        Examined {
            bwrap_program: Some("/opt/bin/bwrap".into()),
            bwrap,
            landlock_abi: 3,
            landlock: Ok(()),
            user_namespaces: switches,
            audit: Err("the kernel's audit is off".into()),
            dropped_kept: false,
        }
    }

    fn apparmor() -> UserNamespaces {
        UserNamespaces {
            max_user_namespaces: Some(1000),
            unprivileged_userns_clone: None,
            apparmor_restrict_unprivileged_userns: Some(true),
        }
    }

    #[test]
    fn each_switch_gets_its_own_fix_and_root_is_bound_only_by_the_count() {
        let path = std::path::Path::new("/opt/bin/bwrap");
        let none = UserNamespaces {
            max_user_namespaces: Some(0),
            ..apparmor()
        };
        assert!(userns_fix(&none, true, path).is_some_and(|f| f.contains("max_user_namespaces=")));
        let debian = UserNamespaces {
            max_user_namespaces: Some(1000),
            unprivileged_userns_clone: Some(false),
            apparmor_restrict_unprivileged_userns: None,
        };
        assert!(userns_fix(&debian, false, path)
            .is_some_and(|f| f.contains("unprivileged_userns_clone=1")));
        assert_eq!(userns_fix(&debian, true, path), None);
        let fix = userns_fix(&apparmor(), false, path).unwrap();
        assert!(fix.contains("profile bwrap /opt/bin/bwrap"), "{fix}");
        assert_eq!(userns_fix(&UserNamespaces::default(), false, path), None);
    }

    #[test]
    fn a_restriction_bubblewrap_is_granted_past_is_not_reported_missing() {
        let granted = user_namespaces(&examined(Ok(()), apparmor()), false);
        assert_eq!(granted.status, Status::Ok, "{granted:?}");
        let refused = user_namespaces(&examined(Err("no namespace".into()), apparmor()), false);
        assert_eq!(refused.status, Status::Missing, "{refused:?}");
        assert!(refused.fix.is_some_and(|f| f.contains("AppArmor")));
    }

    #[test]
    fn the_audit_matters_only_where_landlock_confines() {
        let bwrap = audit(&examined(Ok(()), UserNamespaces::default()));
        assert_eq!(bwrap.status, Status::Ok, "{bwrap:?}");
        assert!(bwrap.fix.is_none());
        let landlock = audit(&examined(Err("absent".into()), UserNamespaces::default()));
        assert_eq!(landlock.status, Status::Warn, "{landlock:?}");
        assert!(landlock.found.contains("audit is off") && landlock.fix.is_some());
    }

    #[test]
    fn a_forced_backend_is_the_one_reported() {
        use dsh_sandbox_local::Backend;
        let both = examined(Ok(()), UserNamespaces::default());
        assert_eq!(sandbox(&both, &Backend::Auto).status, Status::Ok);
        let forced = sandbox(&both, &Backend::Landlock);
        assert_eq!(forced.status, Status::Warn, "{forced:?}");
        assert!(
            forced
                .found
                .contains("Landlock (--sandbox-backend landlock)"),
            "{forced:?}"
        );
        let no_bwrap = examined(Err("absent".into()), UserNamespaces::default());
        assert_eq!(sandbox(&no_bwrap, &Backend::Bwrap).status, Status::Missing);
        // ABI 3: no allow-list under Landlock.
        assert_eq!(network(&no_bwrap).status, Status::Missing);
    }
}
