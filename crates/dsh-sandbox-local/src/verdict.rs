//! What the probes decided: the backend commands run under, or why none
//! can be used.

/// The backend the probes chose, or why none can be used.
#[derive(Clone, Debug)]
pub(crate) enum Verdict {
    Bwrap,
    Landlock { abi: i64 },
    Unavailable(String),
}
