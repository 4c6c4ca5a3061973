//! Doctor's sandbox findings: each backend probed now as `--sandbox`
//! would run it, the kernel switches bubblewrap needs, the kernel's audit
//! of Landlock denials, and what the network allow-list can use.

use crate::doctor::{Finding, Status};

/// Where bubblewrap comes from.
const INSTALL_BWRAP: &str = "install bubblewrap so that bwrap is on the server's PATH (apt install bubblewrap, dnf install bubblewrap, pacman -S bubblewrap)";

/// The sandbox's findings, in the order printed.
#[cfg(target_os = "linux")]
pub async fn findings() -> Vec<Finding> {
    let config = dsh_sandbox_local::LocalSandboxConfig::default();
    let examined = dsh_sandbox_local::examine(&config).await;
    let is_root = rustix::process::geteuid().is_root();
    let bwrap_version = match &examined.bwrap_program {
        Some(program) => version_of(program).await,
        None => None,
    };
    vec![
        sandbox(&examined),
        bubblewrap(&examined, bwrap_version.as_deref(), is_root),
        landlock(&examined),
        user_namespaces(&examined.user_namespaces, is_root),
        audit(&examined),
        network(&examined),
    ]
}

/// Where no backend exists for the platform.
#[cfg(not(target_os = "linux"))]
pub async fn findings() -> Vec<Finding> {
    vec![Finding::new(
        "sandbox",
        Status::Missing,
        "no sandbox backend exists for this platform: --sandbox read-only and workspace-write are refused",
    )]
}

#[cfg(target_os = "linux")]
fn sandbox(examined: &dsh_sandbox_local::Examined) -> Finding {
    if examined.bwrap.is_ok() {
        Finding::new(
            "sandbox",
            Status::Ok,
            "--sandbox read-only and workspace-write confine commands with bubblewrap",
        )
    } else if examined.landlock.is_ok() {
        Finding::new(
            "sandbox",
            Status::Warn,
            "--sandbox read-only and workspace-write confine commands with Landlock (bubblewrap is not usable): weaker, e.g. file modes and owners outside the workspace can change and protected paths inside a writable workspace are not kept read-only; each result lists its gaps",
        )
        .fix(INSTALL_BWRAP)
    } else {
        Finding::new(
            "sandbox",
            Status::Missing,
            "no backend confines a command here: --sandbox read-only and workspace-write commands are refused (see bubblewrap and landlock below)",
        )
        .fix(INSTALL_BWRAP)
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
            match userns_fix(&examined.user_namespaces, is_root) {
                Some(fix) => finding.fix(fix),
                None => finding,
            }
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
        ),
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

/// What to change so that bubblewrap may make its user namespace, where
/// the switches say why it cannot.
#[cfg(target_os = "linux")]
fn userns_fix(switches: &dsh_sandbox_local::UserNamespaces, is_root: bool) -> Option<String> {
    if switches.max_user_namespaces == Some(0) {
        return Some(
            "sysctl -w user.max_user_namespaces=15000 (0 refuses every user namespace)".into(),
        );
    }
    if !is_root && switches.unprivileged_userns_clone == Some(false) {
        return Some("sysctl -w kernel.unprivileged_userns_clone=1".into());
    }
    if !is_root && switches.apparmor_restrict_unprivileged_userns == Some(true) {
        return Some("AppArmor restricts user namespaces: add a profile for bwrap that grants them (/etc/apparmor.d/bwrap: `abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }`, then apparmor_parser -r /etc/apparmor.d/bwrap)".into());
    }
    None
}

#[cfg(target_os = "linux")]
fn user_namespaces(switches: &dsh_sandbox_local::UserNamespaces, is_root: bool) -> Finding {
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
    match userns_fix(switches, is_root) {
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
        Err(why) if examined.bwrap.is_ok() => Finding::new(
            "audit",
            Status::Ok,
            format!("not needed: commands run under bubblewrap, whose denials are read from the command's stderr (the kernel's account of Landlock denials: {why})"),
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

/// `bwrap --version`'s line ("bubblewrap 0.8.0").
#[cfg(target_os = "linux")]
async fn version_of(program: &std::path::Path) -> Option<String> {
    let output = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .await
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    text.lines().next().map(str::trim).map(str::to_owned)
}
