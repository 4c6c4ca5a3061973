//! A session's container: made from its spec, entered by the server
//! inside, removed when the session ends (or, when its server died, by the
//! next server's sweep).

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::engine::{self, ContainerSpec, Engine};
use crate::error::ContainerError;

/// A running container of this server's.
#[derive(Debug)]
pub struct Container {
    engine: Engine,
    name: String,
    image: String,
    digest: String,
    removed: AtomicBool,
}

/// Runs one engine step, bounded; its stdout.
async fn step(
    engine: &Engine,
    name: &'static str,
    args: Vec<OsString>,
    bound: Duration,
) -> Result<String, ContainerError> {
    let mut command = tokio::process::Command::new(&engine.program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(bound, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(cause)) => {
            return Err(ContainerError::Spawn {
                engine: engine.program.display().to_string(),
                cause,
            })
        }
        Err(_) => {
            return Err(ContainerError::TimedOut {
                engine: engine.kind.name(),
                step: name,
                seconds: bound.as_secs(),
            })
        }
    };
    if !output.status.success() {
        return Err(ContainerError::Refused {
            engine: engine.kind.name(),
            step: name,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

impl Container {
    /// Makes and starts the container `spec` describes, within `bound`
    /// per step: the image's digest first (an image the engine does not
    /// have fails here, before anything is made).
    pub async fn create(
        engine: &Engine,
        spec: &ContainerSpec,
        bound: Duration,
    ) -> Result<Container, ContainerError> {
        let digest = step(
            engine,
            "image inspect",
            engine::image_id_args(&spec.image),
            bound,
        )
        .await?;
        let container = Container {
            engine: engine.clone(),
            name: spec.name.clone(),
            image: spec.image.clone(),
            digest: engine::image_digest(&digest),
            removed: AtomicBool::new(false),
        };
        // Dropped on failure: whatever `run` left is removed.
        step(engine, "run", spec.run_args(), bound).await?;
        Ok(container)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The image it was made from, as given.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The image's digest (`sha256:…`, the id of its configuration).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The command that starts the server inside, speaking MCP on its
    /// stdio: `server` are its arguments (`mcp …`).
    pub fn server_command(
        &self,
        workspace: &std::path::Path,
        server: &[OsString],
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.engine.program);
        command.args(engine::exec_args(&self.name, workspace, server));
        command
    }

    /// Removes the container and everything running in it, within
    /// `bound`; once.
    pub async fn remove(&self, bound: Duration) -> Result<(), ContainerError> {
        if self.removed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        step(
            &self.engine,
            "rm",
            engine::remove_args(self.engine.kind, &self.name),
            bound,
        )
        .await
        .map(drop)
    }
}

impl Drop for Container {
    /// A container not removed by [`Container::remove`] is removed by a
    /// thread of its own (a drop never blocks the runtime).
    fn drop(&mut self) {
        if self.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        let program = self.engine.program.clone();
        let args = engine::remove_args(self.engine.kind, &self.name);
        let spawned = std::thread::Builder::new()
            .name("dsh-container-rm".into())
            .spawn(move || {
                let _ = std::process::Command::new(program)
                    .args(args)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            });
        if let Err(err) = spawned {
            tracing::warn!(container = %self.name, "cannot remove the container now ({err}); the next server's sweep will");
        }
    }
}

/// This process as a container's owner: `HOST:BOOT:PIDNS:PID:START`.
pub fn owner() -> String {
    let pid = std::process::id();
    format!(
        "{}:{}:{}:{pid}:{}",
        host(),
        boot_id(),
        pid_namespace(),
        start_time(pid).unwrap_or(0)
    )
}

/// This process's pid namespace, by its inode (`pid:[4026531836]`).
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|link| {
            link.to_string_lossy()
                .chars()
                .filter(char::is_ascii_digit)
                .collect()
        })
        .unwrap_or_default()
}

fn host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .replace(':', "_")
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().replace(':', "_"))
        .unwrap_or_default()
}

/// A process's start time (clock ticks since boot), from /proc.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields count from
    // the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the server `pid` that started at `start` still runs: a pid
/// the kernel says is gone is dead; one it will not let us signal
/// (another user's) or whose start time we cannot read (`/proc` hidden)
/// is taken as alive; a readable start time must match (a reused pid).
fn alive(pid: u32, start: u64) -> bool {
    let Some(process) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    match rustix::process::test_kill_process(process) {
        Err(rustix::io::Errno::SRCH) => false,
        Err(_) => true,
        Ok(()) => start_time(pid).is_none_or(|started| started == start),
    }
}

/// Removes every container of a server on this host that is no longer
/// running (killed before it could remove its own), within `bound` per
/// step, and such servers' lifelines and doors in the temp dir
/// ([`crate::sweep_leftovers`]); how many containers. Failures are
/// logged: a sweep never stops a server.
pub async fn sweep(engine: &Engine, bound: Duration) -> usize {
    // The dead servers' lifelines and doors in the temp dir, settled for
    // a minute (a live server's are locked or listened on).
    let temp = std::env::temp_dir();
    let _ =
        tokio::task::spawn_blocking(move || crate::sweep_leftovers(&temp, Duration::from_secs(60)))
            .await;
    let listing = match step(engine, "ps", engine::list_args(engine.kind), bound).await {
        Ok(listing) => listing,
        Err(err) => {
            tracing::warn!("cannot list dead servers' containers: {err}");
            return 0;
        }
    };
    let orphans = engine::orphans(&listing, &host(), &boot_id(), &pid_namespace(), alive);
    let mut removed = 0;
    for name in orphans {
        match step(engine, "rm", engine::remove_args(engine.kind, &name), bound).await {
            Ok(_) => removed += 1,
            Err(err) => {
                tracing::warn!(container = %name, "cannot remove a dead server's container: {err}")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_its_own_live_owner() {
        let owner = super::owner();
        let listing = format!("mine {owner}\n");
        assert!(
            crate::engine::orphans(
                &listing,
                &super::host(),
                &super::boot_id(),
                &super::pid_namespace(),
                super::alive
            )
            .is_empty(),
            "{owner}"
        );
        // A pid that is gone is dead; a reused one (another start time) too.
        assert!(!super::alive(u32::MAX >> 10, 1));
        assert!(!super::alive(std::process::id(), 1));
        assert!(!super::pid_namespace().is_empty());
        assert!(super::start_time(std::process::id()).is_some_and(|t| t > 0));
    }
}
