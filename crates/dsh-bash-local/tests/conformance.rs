//! The executor conformance suite (`dsh-bash-conformance`) against
//! `LocalBashExecutor`, under the containment `DSH_TEST_CONTAINMENT` names.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use dsh_bash::BashExecutor;
use dsh_bash_local::{ContainmentChoice, LocalBashExecutor, LocalConfig};

fn executor() -> Option<Arc<dyn BashExecutor>> {
    let containment = match std::env::var("DSH_TEST_CONTAINMENT").as_deref() {
        Ok("process-tree") => ContainmentChoice::ProcessTree,
        _ => ContainmentChoice::Auto,
    };
    Some(Arc::new(
        LocalBashExecutor::new(LocalConfig {
            grace: Duration::from_millis(400),
            containment,
            ..LocalConfig::default()
        })
        .unwrap(),
    ))
}

dsh_bash_conformance::conformance_suite!(executor());
