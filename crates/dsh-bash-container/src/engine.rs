//! The container engine (podman or docker) and the command lines a
//! session's container is made, entered, described and removed with. Built
//! here as data, run by [`crate::container`]; one interface for both
//! engines, whose differences are named where they are.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::ContainerError;

/// Which engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// podman (rootful or rootless; no daemon).
    Podman,
    /// docker (a daemon; its containers are root's unless told a user).
    Docker,
}

impl EngineKind {
    /// The engine's name as results report it.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Podman => "podman",
            EngineKind::Docker => "docker",
        }
    }
}

/// An engine found on this process's PATH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Engine {
    /// Which one.
    pub kind: EngineKind,
    /// Its program, absolute.
    pub program: PathBuf,
}

impl Engine {
    /// The engine `asked` (`podman` or `docker`), or the first of podman
    /// and docker on this process's PATH (a command's PATH never chooses
    /// it).
    pub fn find(asked: Option<&str>) -> Result<Engine, ContainerError> {
        let kinds: &[EngineKind] = match asked {
            None => &[EngineKind::Podman, EngineKind::Docker],
            Some("podman") => &[EngineKind::Podman],
            Some("docker") => &[EngineKind::Docker],
            Some(other) => {
                return Err(ContainerError::UnknownEngine {
                    asked: other.to_owned(),
                })
            }
        };
        kinds
            .iter()
            .find_map(|kind| {
                on_path(kind.name()).map(|program| Engine {
                    kind: *kind,
                    program,
                })
            })
            .ok_or_else(|| ContainerError::NoEngine {
                looked_for: kinds
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(" or "),
            })
    }
}

/// `name` on this process's PATH, executable.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// Refuses an image name an engine would read as something else: empty,
/// an option (`--privileged`), or holding spaces or control characters.
pub fn check_image(image: &str) -> Result<(), ContainerError> {
    if image.is_empty()
        || image.starts_with('-')
        || image.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ContainerError::Config(format!(
            "the image {image:?} is not an image name: expected a name such as docker.io/library/debian:bookworm (no leading '-', no spaces)"
        )));
    }
    Ok(())
}

/// Where the server's own binary is mounted inside every container.
pub const BINARY_IN_CONTAINER: &str = "/run/dsh-bash/dsh-bash";

/// The label every container of ours carries: `HOST:BOOT:PID:START` of the
/// server that made it, so that a later server can tell a dead server's
/// container from a live one's.
pub const OWNER_LABEL: &str = "io.dsh-bash.server";

/// What a session's container is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The container's name.
    pub name: String,
    /// The image.
    pub image: String,
    /// The workspace, mounted read-write at the same path.
    pub workspace: PathBuf,
    /// The server's own binary on the host, mounted read-only at
    /// [`BINARY_IN_CONTAINER`].
    pub binary: PathBuf,
    /// Paths inside the workspace mounted read-only over its read-write
    /// mount (the protected paths that exist).
    pub read_only: Vec<PathBuf>,
    /// The server's lifeline file, mounted read-only for the idle process.
    pub lifeline: Option<PathBuf>,
    /// Under the network policy `allow`: the proxy's door (a Unix socket
    /// on the host), mounted at [`DOOR_IN_CONTAINER`]; the idle process
    /// then runs behind a forwarder listening on `127.0.0.1:3128` in the
    /// container's own network namespace, which has only loopback.
    pub door: Option<PathBuf>,
    /// Environment every process in the container starts with.
    pub env: Vec<(String, String)>,
    /// Whether the container has a network at all.
    pub network: bool,
    /// The container's memory (swap included), in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes (threads) at once in the container.
    pub processes: Option<u64>,
    /// CPU time per second of wall time, in thousandths of a CPU.
    pub cpu_millicores: Option<u32>,
    /// Descriptors per process: the server's own hard limit (an engine's
    /// default above it cannot be set without CAP_SYS_RESOURCE).
    pub open_files: u64,
    /// Processes per user: the server's own hard limit, likewise.
    pub user_processes: Option<u64>,
    /// The user the container's processes run as (`UID:GID`), where the
    /// engine would otherwise run them as root of the host (docker).
    pub user: Option<String>,
    /// The owner label's value.
    pub owner: String,
    /// The engine the command line is for.
    pub kind: EngineKind,
}

impl ContainerSpec {
    /// `run`: the container made, started and left running its idle
    /// process; the engine prints its id.
    pub fn run_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = ["run", "--detach", "--rm", "--init", "--read-only"]
            .map(OsString::from)
            .to_vec();
        let mut flag = |name: &str, value: OsString| {
            args.push(name.into());
            args.push(value);
        };
        flag("--name", self.name.clone().into());
        flag("--label", format!("{OWNER_LABEL}={}", self.owner).into());
        flag("--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777".into());
        // An image's declared VOLUMEs: in memory, never on the host's disk
        // (docker makes anonymous volumes, removed with the container).
        if self.kind == EngineKind::Podman {
            flag("--image-volume", "tmpfs".into());
        }
        flag("--cap-drop", "all".into());
        flag("--security-opt", "no-new-privileges".into());
        // With the network on, the engine's own default (a bridge when
        // rootful, slirp4netns or pasta when rootless).
        if !self.network {
            flag("--network", "none".into());
        }
        flag("--volume", bind(&self.workspace, &self.workspace, "rw"));
        flag(
            "--volume",
            bind(&self.binary, Path::new(BINARY_IN_CONTAINER), "ro"),
        );
        for path in &self.read_only {
            flag("--volume", bind(path, path, "ro"));
        }
        if let Some(lifeline) = &self.lifeline {
            flag(
                "--volume",
                bind(lifeline, Path::new(crate::LIFELINE_IN_CONTAINER), "ro"),
            );
        }
        if let Some(door) = &self.door {
            flag("--volume", bind(door, Path::new(DOOR_IN_CONTAINER), "ro"));
        }
        for (name, value) in &self.env {
            flag("--env", format!("{name}={value}").into());
        }
        flag("--workdir", self.workspace.clone().into_os_string());
        flag(
            "--ulimit",
            format!("nofile={0}:{0}", self.open_files).into(),
        );
        if let Some(nproc) = self.user_processes {
            flag("--ulimit", format!("nproc={nproc}:{nproc}").into());
        }
        if let Some(bytes) = self.memory_bytes {
            flag("--memory", format!("{bytes}b").into());
            flag("--memory-swap", format!("{bytes}b").into());
        }
        if let Some(pids) = self.processes {
            flag("--pids-limit", pids.to_string().into());
        }
        if let Some(millicores) = self.cpu_millicores {
            flag(
                "--cpus",
                format!("{}.{:03}", millicores / 1000, millicores % 1000).into(),
            );
        }
        if let Some(user) = &self.user {
            flag("--user", user.clone().into());
        }
        flag("--entrypoint", BINARY_IN_CONTAINER.into());
        args.push(self.image.clone().into());
        if self.door.is_some() {
            // The forwarder's relay in a session of its own; the idle
            // process keeps the forwarder's pid.
            // (The entrypoint is the binary: its own name is not repeated.)
            let forward = dsh_net_proxy::forward::argv_to_path(
                Path::new(BINARY_IN_CONTAINER),
                Path::new(DOOR_IN_CONTAINER),
            );
            args.extend(forward.into_iter().skip(1));
            args.push(BINARY_IN_CONTAINER.into());
        }
        args.push(IDLE.into());
        args
    }
}

/// Where the proxy's door is mounted in the container.
pub const DOOR_IN_CONTAINER: &str = "/run/dsh-bash/door";

/// The environment variable that makes a dsh-bash process non-dumpable
/// from its start.
pub const NON_DUMPABLE: &str = "DSH_BASH_NON_DUMPABLE";

/// The hidden subcommand the container's idle process runs.
pub const IDLE: &str = "container-idle";

/// `SOURCE:TARGET:MODE` for `--volume`.
fn bind(source: &Path, target: &Path, mode: &str) -> OsString {
    let mut value = source.as_os_str().to_owned();
    value.push(":");
    value.push(target.as_os_str());
    value.push(":");
    value.push(mode);
    value
}

/// `exec`: the server inside, speaking MCP on the exec's stdio.
pub fn exec_args(name: &str, workspace: &Path, server: &[OsString]) -> Vec<OsString> {
    // The server inside makes itself non-dumpable: a command (same user,
    // no capabilities) can then neither trace it nor write to its
    // descriptors through /proc.
    let mut args: Vec<OsString> = vec![
        "exec".into(),
        "--interactive".into(),
        "--env".into(),
        format!("{NON_DUMPABLE}=1").into(),
    ];
    args.push("--workdir".into());
    args.push(workspace.as_os_str().to_owned());
    args.push(name.into());
    args.push(BINARY_IN_CONTAINER.into());
    args.extend(server.iter().cloned());
    args
}

/// `rm`: the container gone now, its processes killed.
pub fn remove_args(kind: EngineKind, name: &str) -> Vec<OsString> {
    match kind {
        EngineKind::Podman => vec![
            "rm".into(),
            "--force".into(),
            "--volumes".into(),
            "--time".into(),
            "0".into(),
            name.into(),
        ],
        EngineKind::Docker => vec![
            "rm".into(),
            "--force".into(),
            "--volumes".into(),
            name.into(),
        ],
    }
}

/// `image inspect`: the image's id (the digest of its configuration).
pub fn image_id_args(image: &str) -> Vec<OsString> {
    vec![
        "image".into(),
        "inspect".into(),
        "--format".into(),
        "{{.Id}}".into(),
        image.into(),
    ]
}

/// `ps`: every container of ours, as `NAME OWNER` lines (podman's
/// `.Labels` is a map, docker's a string with a `.Label` method).
pub fn list_args(kind: EngineKind) -> Vec<OsString> {
    let owner = match kind {
        EngineKind::Podman => format!("{{{{index .Labels \"{OWNER_LABEL}\"}}}}"),
        EngineKind::Docker => format!("{{{{.Label \"{OWNER_LABEL}\"}}}}"),
    };
    vec![
        "ps".into(),
        "--all".into(),
        "--filter".into(),
        format!("label={OWNER_LABEL}").into(),
        "--format".into(),
        format!("{{{{.Names}}}} {owner}").into(),
    ]
}

/// An image id as `sha256:…` whichever engine printed it.
pub fn image_digest(printed: &str) -> String {
    let id = printed.trim();
    if id.contains(':') {
        id.to_owned()
    } else {
        format!("sha256:{id}")
    }
}

/// The containers a listing names whose owner — a server on this host
/// (`host`, `boot`) in this pid namespace (`pidns`) — is no longer
/// running: `alive(pid, start)` says whether that process is. An owner in
/// another pid namespace cannot be judged from here and is left alone.
pub fn orphans(
    listing: &str,
    host: &str,
    boot: &str,
    pidns: &str,
    alive: impl Fn(u32, u64) -> bool,
) -> Vec<String> {
    listing
        .lines()
        .filter_map(|line| {
            let (name, owner) = line.trim().split_once(' ')?;
            let mut parts = owner.rsplitn(5, ':');
            let start: u64 = parts.next()?.parse().ok()?;
            let pid: u32 = parts.next()?.parse().ok()?;
            let owner_pidns = parts.next()?;
            let owner_boot = parts.next()?;
            let owner_host = parts.next()?;
            let ours = owner_host == host && owner_pidns == pidns;
            let dead = owner_boot != boot || !alive(pid, start);
            (ours && dead).then(|| name.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            name: "dsh-bash-abc".into(),
            image: "localhost/debian:test".into(),
            workspace: PathBuf::from("/work/project"),
            binary: PathBuf::from("/usr/local/bin/dsh-bash"),
            read_only: vec![PathBuf::from("/work/project/.git/hooks")],
            lifeline: Some(PathBuf::from("/tmp/dsh-bash-lifeline-x")),
            door: None,
            env: Vec::new(),
            network: false,
            memory_bytes: Some(256 << 20),
            processes: Some(128),
            cpu_millicores: Some(1500),
            open_files: 20000,
            user_processes: Some(96369),
            user: None,
            owner: "box:b00t:4026531836:42:9001".into(),
            kind: EngineKind::Podman,
        }
    }

    fn joined(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn under_allow_the_door_is_mounted_and_the_idle_process_runs_behind_a_forwarder() {
        let line = joined(
            &ContainerSpec {
                door: Some(PathBuf::from("/tmp/dsh-bash-door-x/door")),
                env: vec![("HTTP_PROXY".into(), "http://127.0.0.1:3128".into())],
                ..spec()
            }
            .run_args(),
        );
        for part in [
            "--network none",
            "--volume /tmp/dsh-bash-door-x/door:/run/dsh-bash/door:ro",
            "--env HTTP_PROXY=http://127.0.0.1:3128",
            "--entrypoint /run/dsh-bash/dsh-bash localhost/debian:test __dsh-net-forward 3128 unix:/run/dsh-bash/door -- /run/dsh-bash/dsh-bash container-idle",
        ] {
            assert!(line.contains(part), "{part:?} missing from {line}");
        }
    }

    #[test]
    fn the_container_is_read_only_without_network_or_capabilities_and_limited() {
        let line = joined(&spec().run_args());
        for part in [
            "run --detach --rm --init --read-only",
            "--tmpfs /tmp:rw,nosuid,nodev,mode=1777",
            "--cap-drop all",
            "--security-opt no-new-privileges",
            "--network none",
            "--volume /work/project:/work/project:rw",
            "--volume /usr/local/bin/dsh-bash:/run/dsh-bash/dsh-bash:ro",
            "--volume /work/project/.git/hooks:/work/project/.git/hooks:ro",
            "--volume /tmp/dsh-bash-lifeline-x:/run/dsh-bash/lifeline:ro",
            "--memory 268435456b --memory-swap 268435456b",
            "--pids-limit 128",
            "--cpus 1.500",
            "--ulimit nofile=20000:20000",
            "--label io.dsh-bash.server=box:b00t:4026531836:42:9001",
            "--image-volume tmpfs",
            "--entrypoint /run/dsh-bash/dsh-bash localhost/debian:test container-idle",
        ] {
            assert!(line.contains(part), "{part:?} missing from {line}");
        }
        assert!(!line.contains("--user"), "{line}");
        let open = ContainerSpec {
            network: true,
            user: Some("1000:1000".into()),
            memory_bytes: None,
            ..spec()
        };
        let line = joined(&open.run_args());
        assert!(
            !line.contains("--network") && line.contains("--user 1000:1000"),
            "{line}"
        );
        assert!(!line.contains("--memory"), "{line}");
    }

    #[test]
    fn only_this_hosts_dead_servers_containers_are_orphans() {
        let listing = "\
dsh-bash-live box:b00t:7:42:9001
dsh-bash-dead box:b00t:7:43:9002
dsh-bash-reused box:b00t:7:42:1234
dsh-bash-rebooted box:older:7:42:9001
dsh-bash-elsewhere other:b00t:7:43:9002
dsh-bash-other-pidns box:b00t:8:43:9002
not-ours
dsh-bash-garbled box:b00t:7:x:y
";
        let alive = |pid: u32, start: u64| pid == 42 && start == 9001;
        assert_eq!(
            orphans(listing, "box", "b00t", "7", alive),
            ["dsh-bash-dead", "dsh-bash-reused", "dsh-bash-rebooted"]
        );
    }

    #[test]
    fn engines_differ_only_where_named() {
        assert_eq!(
            joined(&remove_args(EngineKind::Podman, "c")),
            "rm --force --volumes --time 0 c"
        );
        assert_eq!(
            joined(&remove_args(EngineKind::Docker, "c")),
            "rm --force --volumes c"
        );
        assert!(joined(&list_args(EngineKind::Podman))
            .ends_with("{{.Names}} {{index .Labels \"io.dsh-bash.server\"}}"));
        assert!(joined(&list_args(EngineKind::Docker))
            .ends_with("{{.Names}} {{.Label \"io.dsh-bash.server\"}}"));
        assert_eq!(image_digest("abc\n"), "sha256:abc");
        assert_eq!(image_digest("sha256:abc"), "sha256:abc");
        assert_eq!(
            joined(&exec_args("c", Path::new("/w"), &["mcp".into()])),
            "exec --interactive --env DSH_BASH_NON_DUMPABLE=1 --workdir /w c /run/dsh-bash/dsh-bash mcp"
        );
        assert!(matches!(
            Engine::find(Some("lxc")),
            Err(ContainerError::UnknownEngine { .. })
        ));
        for bad in ["", "--privileged", "-v", "debian bookworm", "x\ny"] {
            assert!(check_image(bad).is_err(), "{bad:?} was taken as an image");
        }
        assert!(check_image("docker.io/library/debian:bookworm").is_ok());
    }
}
