//! `LocalSandboxProvider`: confines commands on Linux with bubblewrap or
//! Landlock, chosen by functional probes, failing closed when neither works.
//!
//! Selection (`Backend::Auto`) probes bubblewrap first, then Landlock. A
//! probe runs a short command through the same launcher as every real
//! command and passes only if a write outside its policy failed, the
//! command exited 0 and (for a runner) the runner reported that it started
//! it. The verdict, including "unavailable", is computed once per provider,
//! even when the first calls race, and cached; a usable one is also kept
//! per user across processes, keyed by what can change it (`kept_verdict.rs`),
//! and forgotten when a confined command's runner fails. Either backend can be
//! forced; an operator may instead configure a bwrap-shaped runner command,
//! which skips selection and probes.
//!
//! # Threat model
//!
//! The command is hostile: it may be written by a model steered by a
//! malicious file, run as root or as an unprivileged user. What follows is
//! what the sandbox promises under both backends and both confining modes,
//! and what the result reports where a kernel cannot keep it
//! (`enforcement: partial` with the missing pieces named in `gaps`;
//! `full` only where every promise below holds). The escape suite in
//! `dsh-bash-cli/tests/escape.rs` tries each of them, as root and as uid
//! 65534, under each backend and mode, and checks the outside afterwards.
//!
//! A confined command can never:
//! - **change anything on disk outside what its mode allows** — contents,
//!   names, mode, owner, times, xattrs, inode flags, device nodes
//!   (`read-only`: only `/dev/null`; `workspace-write`: also the workspace
//!   and its own private temporary directory). Gap under Landlock in
//!   `workspace-write`: `metadata` (chmod and times of files outside the
//!   workspace that the user owns; Landlock does not govern them and a
//!   syscall filter cannot tell inside from outside);
//! - **reach a process outside the sandbox**: no signal, no ptrace or
//!   `process_vm_*`, no `/proc/<pid>/{root,cwd,fd,mem,environ}`, no
//!   `prlimit`/`setpriority`/`ioprio`/scheduler change of another process
//!   (bwrap: a pid namespace of its own; Landlock: its ptrace restriction,
//!   the signal scope of ABI 6 — gap `signals` before — and the filter);
//! - **use a capability, even started as root** (bwrap: a user namespace and
//!   `--cap-drop ALL`; Landlock: bounding, ambient, inheritable, permitted
//!   and effective sets emptied, securebits locked, `no_new_privs`);
//! - **use a descriptor it was not given**: everything above 2 is closed at
//!   exec, for every command, confined or not;
//! - **reach IPC outside**: SysV IPC and POSIX message queues are
//!   namespaced (bwrap) or refused (Landlock); abstract unix sockets are
//!   scoped to the sandbox by Landlock (ABI 6; gap `abstract-sockets`
//!   before under Landlock, and under bwrap with the network `on`; with it
//!   `off` bwrap's own network namespace holds them);
//! - **plant what runs later on the host** in `workspace-write`: the
//!   protected paths (`.git` and what git would run code from, `.envrc`,
//!   the agents' and editors' own configuration, every dot-entry of a home
//!   directory inside the workspace, see
//!   [`dsh_sandbox::DEFAULT_PROTECTED_PATHS`] and
//!   [`dsh_sandbox::HOME_PROTECTED_PATHS`]) stay
//!   read-only inside the writable workspace, and missing ones cannot be
//!   created. Gap `protected-paths` under Landlock (it cannot carve a
//!   read-only hole out of a writable tree), and under bwrap when one of
//!   them is a symlink (a mount pins its target, not the link);
//! - **read a credential file** ([`dsh_sandbox::CREDENTIAL_FILES`] in every
//!   home, the server's token file, `--hide` paths; see
//!   [`dsh_sandbox::HiddenPaths`]): bwrap binds an empty file or directory
//!   over each (on a `nodev` mount, so opening one is refused); Landlock
//!   handles `READ_FILE` and grants it around them. Both by real path, a
//!   link's target and every other mount of the same file; a hard link
//!   made to one is refused (a cross-mount link under bwrap, `REFER`
//!   under Landlock). Gap `hidden-paths` under Landlock for a credential
//!   inside a tree the command reads whole (workspace, `TMPDIR`, caches);
//! - **use the network** with the policy `off` (the default in both
//!   confining modes): no TCP, UDP, raw socket or DNS query leaves the
//!   sandbox, the host's loopback services included (bwrap: its own
//!   network namespace, and a filter refusing the socket families a
//!   namespace does not hold, such as vsock; Landlock: a filter refusing
//!   every socket but unix and netlink, with TCP bind/connect refused from
//!   ABI 4 as a second layer; gaps `tcp` and `udp` without the filter).
//!   The filter's architecture check kills a 32-bit (ia32) process under
//!   bwrap with the network off, as under Landlock always;
//! - **leave anything in shared temp space**: each command gets a private
//!   temporary directory (`TMPDIR` points to it; under bwrap it is mounted
//!   on `/tmp`, in read-only mode an in-memory one), removed when its task
//!   ends. Under bwrap the host's `/tmp` is therefore not visible inside,
//!   except the workspace; under Landlock programs that ignore `TMPDIR` and
//!   write `/tmp` directly are refused;
//! - **forge a runner failure**: bwrap's own `--json-status-fd` says
//!   whether the command started; the Landlock path fails before exec and
//!   the launcher reports the errno. No text the command prints is ever
//!   read as a runner failure;
//! - **forge a denial where the kernel reports them**: under Landlock ABI 7
//!   with audit on and a server that may read it (root), `denied` comes
//!   from the audit records of the command's own Landlock domain (see
//!   `audit.rs`); elsewhere it is a guess from stderr and said to be one.
//!
//! What a confined command may still do, by design, and what to do about
//! it:
//! - **read** whatever its user can read (as root without capabilities:
//!   what the permission bits allow uid 0);
//! - **use the network** when its policy is `on`, including loopback
//!   services;
//! - **resolve names through a host daemon's unix socket** (nscd,
//!   systemd-resolved's varlink) even with the network `off`: a pathname
//!   socket, see below;
//! - **connect to pathname unix sockets** it can reach: container runtimes
//!   (`/var/run/docker.sock`, `/run/podman/podman.sock`,
//!   `/run/containerd/containerd.sock`), session and system buses
//!   (`/run/user/<uid>/bus`, `/run/dbus/system_bus_socket`), agents
//!   (`ssh-agent`, `gpg-agent` under `/run/user/<uid>/gnupg`), X11
//!   (`/tmp/.X11-unix`, not visible under bwrap). Whoever can talk to such a
//!   socket may act through it outside the sandbox; keep them out of reach
//!   of the agent's user. The variables that point at them
//!   (`SSH_AUTH_SOCK`, `GPG_AGENT_INFO`, `DBUS_SESSION_BUS_ADDRESS`,
//!   `DOCKER_HOST`, `CONTAINER_HOST`, `KRB5CCNAME`) are removed from a
//!   confined command's environment;
//! - use CPU, memory and processes within the host's limits (containment
//!   and kills are the executor's job, see `dsh-bash-local`).
//!
//! Known limits, stated rather than claimed away:
//! - a confined command may **bind** an abstract unix socket name while it
//!   runs; a host client that later connects to that name reaches it (the
//!   scope only stops connections going out). Under bwrap the name dies
//!   with the sandbox's pid namespace; under Landlock with the command's
//!   processes;
//! - under Landlock the private `TMPDIR` is a directory on the host: it
//!   stays until the command's whole tree is gone (its leftovers stopped,
//!   after their grace), so a leftover never writes into a directory being
//!   removed; a process that escaped every containment (none under a
//!   cgroup; under the process-tree walk one that left the command's
//!   session and was not adopted) could still leave part of it behind;
//! - under bwrap as an unprivileged user, `mknod NAME c 0 0` creates an
//!   overlayfs "whiteout" in the workspace: a device number no driver
//!   serves, on a `nodev` mount;
//! - the stand-ins for missing protected paths exist in the workspace
//!   while a command runs (visible to the host then: an empty
//!   `.bash_profile` in a home directory hides its `.profile` from a login
//!   shell meanwhile); a process killed outright (SIGKILL) leaves its
//!   stand-ins until the next command protecting the same paths reclaims
//!   them;
//! - a new repository a command creates in a subdirectory of the
//!   workspace runs its own config when a person later runs git inside
//!   that subdirectory (only the root's `.git`, what it points to and the
//!   submodules are protected);
//! - a protected file with a second hard link elsewhere in the workspace
//!   can be changed through that link;
//! - filesystem-specific ioctls are refused by type (`'f'`, `'X'`, `'v'`,
//!   btrfs, f2fs) under Landlock; a filesystem with commands of another
//!   type that change the disk through a read-only descriptor is not
//!   covered.
//!
//! # The mechanisms
//!
//! The provider hands the launcher a [`dsh_sandbox::Restriction`] as data
//! (a Landlock ruleset fd, a seccomp program built with `seccompiler`, a
//! capability drop, descriptors to keep); no provider code ever runs in the
//! forked child.
//!
//! - **bubblewrap**: `--unshare-user --unshare-pid --unshare-ipc
//!   --unshare-uts --unshare-cgroup-try --new-session --die-with-parent
//!   --cap-drop ALL --ro-bind / / --dev /dev --proc /proc`, a private
//!   `/tmp`, the workspace bound (`--ro-bind-fd`/`--bind-fd`) through the
//!   handle opened when the workspace was resolved, the protected paths
//!   bound read-only over it (their parents pinned), `--unshare-net` with
//!   the network off, `--json-status-fd`;
//!   bwrap itself runs under a scope-only Landlock domain. `full` on a
//!   kernel with Landlock ABI 6+.
//! - **Landlock**: write-type accesses handled (ABI 5, best effort), the
//!   workspace allowed through its handle, devices creatable nowhere,
//!   signal and abstract-socket scopes, capabilities dropped, and a syscall
//!   filter for what Landlock does not govern (io_uring, ptrace,
//!   `process_vm_*`, other processes' limits and priorities, inode-flag
//!   ioctls, xattr changes, device `mknod`, keyrings, bpf, perf, SysV and
//!   POSIX message-queue IPC; plus chmod/chown/utimes in read-only). `full`
//!   in read-only on ABI 6+; `partial` (`metadata`) in workspace-write.
//!
//! # Example
//!
//! ```no_run
//! // no_run: confinement needs bubblewrap or a Landlock kernel, which a
//! // doc-test machine may lack.
//! use dsh_sandbox::{SandboxMode, SandboxPolicy, SandboxProvider, Workspace};
//! use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = LocalSandboxProvider::new(LocalSandboxConfig::default())?;
//! let argv = ["bash", "-c", "touch /etc/x"].map(std::ffi::OsString::from);
//! let policy = SandboxPolicy::new(
//!     SandboxMode::ReadOnly,
//!     Workspace::open("/src/project".as_ref())?,
//! );
//! let confinement = provider.confine(&argv, &policy).await?;
//! println!("{} ({}, gaps {:?})", confinement.backend, confinement.enforcement, confinement.gaps);
//! # Ok(())
//! # }
//! ```
//!
//! # Platform support
//!
//! Linux. Landlock needs a 5.13+ kernel with Landlock enabled (ABI 6, Linux
//! 6.12, for `full`); bubblewrap needs the `bwrap` binary and user
//! namespaces. Elsewhere every confined mode fails closed without probing.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![deny(unsafe_op_in_unsafe_fn)]
// Unsafe code lives in `sys` only.
#![deny(unsafe_code)]
// No function over 80 lines (the threshold is in clippy.toml); CI's
// `clippy -D warnings` enforces it.
#![warn(clippy::too_many_lines)]

#[cfg(target_os = "linux")]
mod audit;
#[cfg(target_os = "linux")]
mod bwrap;
mod config;
#[cfg(target_os = "linux")]
mod environment;
mod error;
#[cfg(target_os = "linux")]
mod examine;
#[cfg(target_os = "linux")]
mod kept_verdict;
#[cfg(target_os = "linux")]
mod landlock_backend;
#[cfg(target_os = "linux")]
mod network;
#[cfg(target_os = "linux")]
mod probe;
mod provider;
#[cfg(target_os = "linux")]
mod reads;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
mod stand_in;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys;
mod verdict;
#[cfg(target_os = "linux")]
mod warm;

pub use config::{Backend, ConfigError, LocalSandboxConfig, RunnerCommand};
pub use error::{NoBackend, SandboxError};
#[cfg(target_os = "linux")]
pub use examine::{examine, Examined, UserNamespaces};
pub use provider::LocalSandboxProvider;
