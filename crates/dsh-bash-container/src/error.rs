//! What can go wrong with a session's container, each saying what to do.

/// A container that could not be found, made, entered or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The engine asked for is neither podman nor docker.
    #[error("unknown container engine {asked:?}: expected podman or docker")]
    UnknownEngine {
        /// What was asked.
        asked: String,
    },
    /// No engine on this process's PATH.
    #[error("no container engine: {looked_for} is not on this process's PATH; install podman (apt install podman) or docker")]
    NoEngine {
        /// The engines looked for.
        looked_for: String,
    },
    /// The engine could not be run at all.
    #[error("cannot run {engine}: {cause}")]
    Spawn {
        /// The engine's program.
        engine: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The engine refused a step.
    #[error("{engine} {step} failed ({status}): {stderr}")]
    Refused {
        /// The engine's name.
        engine: &'static str,
        /// What it was asked (`run`, `image inspect`, …).
        step: &'static str,
        /// Its exit status.
        status: String,
        /// What it said, trimmed.
        stderr: String,
    },
    /// A step did not finish in time.
    #[error("{engine} {step} did not finish within {seconds} s")]
    TimedOut {
        /// The engine's name.
        engine: &'static str,
        /// The step.
        step: &'static str,
        /// The bound.
        seconds: u64,
    },
    /// The server inside did not answer.
    #[error("the dsh-bash server inside container {name} did not start: {cause} (the image needs bash and glibc 2.34 or later: the server is this binary, mounted in)")]
    Inside {
        /// The container.
        name: String,
        /// Why.
        cause: String,
    },
    /// The configuration cannot work.
    #[error("invalid container configuration: {0}")]
    Config(String),
}
