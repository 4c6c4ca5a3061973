//! A `SandboxClaim` (`extensions.agents.x-k8s.io/v1beta1`) through the
//! API server: made for a session from a warm pool, waited for until its
//! sandbox is ready, and deleted at the end. Only the fields this crate
//! reads or writes are typed; the rest of an object passes by.

use std::time::Duration;

use futures_util::TryStreamExt as _;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Object, PostParams,
    WatchEvent, WatchParams,
};
use serde::{Deserialize, Serialize};

use crate::{ClaimConfig, ClaimError};

/// The claim's spec: the pool it takes a sandbox from, and when it ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimSpec {
    warm_pool_ref: PoolRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lifecycle: Option<Lifecycle>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct PoolRef {
    name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Lifecycle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shutdown_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shutdown_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl_seconds_after_finished: Option<u32>,
}

/// What the controller says of a claim.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ClaimStatus {
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default)]
    sandbox: SandboxRef,
}

/// One condition (only what is read of it).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Condition {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
}

/// The sandbox a claim was bound to.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct SandboxRef {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "podIPs")]
    pod_ips: Vec<String>,
}

type SandboxClaim = Object<ClaimSpec, ClaimStatus>;

fn claims() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("extensions.agents.x-k8s.io", "v1beta1", "SandboxClaim"),
        "sandboxclaims",
    )
}

fn sandboxes() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("agents.x-k8s.io", "v1beta1", "Sandbox"),
        "sandboxes",
    )
}

/// A claim whose sandbox is ready.
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    /// The claim's name (made by the API server from a prefix).
    pub(crate) claim: String,
    /// The sandbox's name.
    pub(crate) sandbox: String,
    /// Its pod's addresses.
    pub(crate) pod_ips: Vec<String>,
}

/// The claims of one namespace.
#[derive(Clone)]
pub(crate) struct Claims {
    api: Api<SandboxClaim>,
    sandboxes: Api<DynamicObject>,
    namespace: String,
    /// How long one call may take.
    patience: Duration,
}

/// Whether the API server refused this client (401, 403): waiting does
/// not change that.
fn refused(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 401 || status.code == 403)
}

impl Claims {
    pub(crate) fn new(client: kube::Client, namespace: &str, patience: Duration) -> Claims {
        Claims {
            api: Api::namespaced_with(client.clone(), namespace, &claims()),
            sandboxes: Api::namespaced_with(client, namespace, &sandboxes()),
            namespace: namespace.to_owned(),
            patience,
        }
    }

    /// `call`, within the patience.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = T>,
    ) -> Result<T, ClaimError> {
        tokio::time::timeout(self.patience, call)
            .await
            .map_err(|_| ClaimError::Slow {
                what: what.to_owned(),
                patience: self.patience,
            })
    }

    /// Makes a claim on `config`'s warm pool; its name.
    pub(crate) async fn create(&self, config: &ClaimConfig) -> Result<String, ClaimError> {
        let mut claim = SandboxClaim::new("", &claims(), spec(config));
        claim.metadata.name = None;
        claim.metadata.generate_name = Some("dsh-bash-".to_owned());
        claim.metadata.labels = Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "dsh-bash".to_owned(),
            )]
            .into(),
        );
        let made = self
            .bounded(
                "creating the claim",
                self.api.create(&PostParams::default(), &claim),
            )
            .await?
            .map_err(|err| ClaimError::Create {
                pool: config.warm_pool.clone(),
                namespace: self.namespace.clone(),
                cause: err.to_string(),
            })?;
        made.metadata.name.ok_or_else(|| ClaimError::Create {
            pool: config.warm_pool.clone(),
            namespace: self.namespace.clone(),
            cause: "the API server's answer names no claim".to_owned(),
        })
    }

    /// Waits until claim `name` is ready and bound to a sandbox with a pod
    /// address: reads it, then watches it from that version (again after
    /// a watch ends, a little later each time). What was last seen goes to
    /// `last`, for the message of a caller that stops waiting; a refusal
    /// (401, 403) ends the wait at once.
    pub(crate) async fn ready(&self, name: &str, last: &mut String) -> Result<Bound, ClaimError> {
        let mut pause = Duration::from_millis(100);
        loop {
            let read = self
                .bounded("reading the claim", self.api.get_opt(name))
                .await;
            let claim = match read {
                Ok(Ok(Some(claim))) => claim,
                Ok(Ok(None)) => return Err(self.deleted(name)),
                Ok(Err(err)) if refused(&err) => return Err(self.refused(name, &err)),
                Ok(Err(err)) => {
                    *last = format!("reading the claim failed: {err}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                    continue;
                }
                Err(slow) => {
                    *last = slow.to_string();
                    continue;
                }
            };
            if let Some(bound) = bound(name, &claim, last) {
                return Ok(bound);
            }
            let version = claim.metadata.resource_version.unwrap_or_default();
            let params = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(60);
            match self.api.watch(&params, &version).await {
                Ok(events) => {
                    if let Some(bound) = self.watch(name, events, last).await? {
                        return Ok(bound);
                    }
                }
                Err(err) if refused(&err) => return Err(self.refused(name, &err)),
                Err(err) => *last = format!("watching the claim failed: {err}"),
            }
            // A watch that ended (or failed) without the claim bound: read
            // it again, a little later each time, never in a tight loop.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// Follows one watch of claim `name` until it is bound (`Some`), is
    /// deleted (an error) or the watch ends (`None`: read it again).
    async fn watch(
        &self,
        name: &str,
        events: impl futures_util::Stream<Item = kube::Result<WatchEvent<SandboxClaim>>>,
        last: &mut String,
    ) -> Result<Option<Bound>, ClaimError> {
        let mut events = std::pin::pin!(events);
        loop {
            match events.try_next().await {
                Ok(Some(WatchEvent::Added(claim) | WatchEvent::Modified(claim))) => {
                    if let Some(bound) = bound(name, &claim, last) {
                        return Ok(Some(bound));
                    }
                }
                Ok(Some(WatchEvent::Deleted(_))) => return Err(self.deleted(name)),
                Ok(Some(WatchEvent::Bookmark(_))) => {}
                Ok(Some(WatchEvent::Error(status))) => {
                    *last = format!("the watch ended: {}", status.message);
                    return Ok(None);
                }
                Ok(None) => return Ok(None),
                Err(err) => {
                    *last = format!("the watch failed: {err}");
                    return Ok(None);
                }
            }
        }
    }

    fn refused(&self, name: &str, err: &kube::Error) -> ClaimError {
        ClaimError::Refused {
            claim: name.to_owned(),
            namespace: self.namespace.clone(),
            cause: err.to_string(),
            deleted: Err("not tried yet".to_owned()),
        }
    }

    fn deleted(&self, name: &str) -> ClaimError {
        ClaimError::Deleted {
            claim: name.to_owned(),
            namespace: self.namespace.clone(),
        }
    }

    /// The in-cluster name of `sandbox`'s headless service
    /// (`status.serviceFQDN`), if it has one.
    pub(crate) async fn service_name(&self, sandbox: &str) -> Result<Option<String>, ClaimError> {
        let object = self
            .bounded("reading the sandbox", self.sandboxes.get(sandbox))
            .await?
            .map_err(|err| ClaimError::Sandbox {
                sandbox: sandbox.to_owned(),
                cause: err.to_string(),
            })?;
        Ok(object
            .data
            .pointer("/status/serviceFQDN")
            .and_then(serde_json::Value::as_str)
            .filter(|name| !name.is_empty())
            .map(str::to_owned))
    }

    /// Deletes claim `name` (its sandbox goes with it); one that is gone
    /// already is fine.
    pub(crate) async fn delete(&self, name: &str) -> Result<(), ClaimError> {
        let params = DeleteParams::background();
        match self
            .bounded("deleting the claim", self.api.delete(name, &params))
            .await?
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(ClaimError::Delete {
                claim: name.to_owned(),
                namespace: self.namespace.clone(),
                cause: err.to_string(),
            }),
        }
    }
}

/// The spec of a claim on `config`'s pool: expiring at its lifetime's end
/// (deleted then, whatever becomes of this process), kept that long
/// after it finished when asked.
fn spec(config: &ClaimConfig) -> ClaimSpec {
    let shutdown_time = config.expire_after.map(|after| {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let at = now.saturating_add(i64::try_from(after.as_secs()).unwrap_or(i64::MAX / 2));
        k8s_openapi::jiff::Timestamp::from_second(at)
            .unwrap_or(k8s_openapi::jiff::Timestamp::MAX)
            .to_string()
    });
    let lifecycle =
        (shutdown_time.is_some() || config.ttl_after_finished.is_some()).then(|| Lifecycle {
            shutdown_policy: shutdown_time.as_ref().map(|_| "Delete".to_owned()),
            shutdown_time,
            // The CRD's int32.
            ttl_seconds_after_finished: config
                .ttl_after_finished
                .map(|ttl| ttl.min(i32::MAX.unsigned_abs())),
        });
    ClaimSpec {
        warm_pool_ref: PoolRef {
            name: config.warm_pool.clone(),
        },
        lifecycle,
    }
}

/// `claim` bound to a sandbox with a pod address and `Ready`, else none
/// (and what it says now in `last`).
fn bound(name: &str, claim: &SandboxClaim, last: &mut String) -> Option<Bound> {
    let status = claim.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|condition| condition.kind == "Ready");
    *last = match ready {
        Some(c) => format!("Ready={} ({}: {})", c.status, c.reason, c.message),
        None => "no Ready condition yet".to_owned(),
    };
    let is_ready = ready.is_some_and(|c| c.status == "True");
    if !is_ready {
        return None;
    }
    if status.sandbox.name.is_empty() || status.sandbox.pod_ips.is_empty() {
        "ready, but no sandbox or pod address in its status yet".clone_into(last);
        return None;
    }
    Some(Bound {
        claim: name.to_owned(),
        sandbox: status.sandbox.name,
        pod_ips: status.sandbox.pod_ips,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(status: serde_json::Value) -> SandboxClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": "c1"},
            "spec": {"warmPoolRef": {"name": "pool"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn bound_only_when_ready_with_a_sandbox_and_an_address() {
        let mut last = String::new();
        assert!(bound("c1", &claim(serde_json::json!({})), &mut last).is_none());
        assert_eq!(last, "no Ready condition yet");
        let pending = claim(serde_json::json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "Pending", "message": "no pod"}]}));
        assert!(bound("c1", &pending, &mut last).is_none());
        assert_eq!(last, "Ready=False (Pending: no pod)");
        let no_ip = claim(serde_json::json!({
            "conditions": [{"type": "Ready", "status": "True"}],
            "sandbox": {"name": "sb"}}));
        assert!(bound("c1", &no_ip, &mut last).is_none());
        assert!(last.contains("no sandbox or pod address"), "{last}");
        let ready = claim(serde_json::json!({
            "conditions": [{"type": "Ready", "status": "True"}],
            "sandbox": {"name": "sb", "podIPs": ["10.0.0.7"]}}));
        let bound = bound("c1", &ready, &mut last).unwrap();
        assert_eq!(
            (bound.sandbox.as_str(), bound.pod_ips),
            ("sb", vec!["10.0.0.7".to_owned()])
        );
    }

    #[test]
    fn a_claim_expires_at_its_lifetime_and_is_deleted_then() {
        let mut config = ClaimConfig::new("agents", "dsh-bash", "t");
        config.expire_after = Some(Duration::from_secs(3600));
        config.ttl_after_finished = Some(60);
        let made = serde_json::to_value(spec(&config)).unwrap();
        assert_eq!(made["warmPoolRef"]["name"], "dsh-bash");
        assert_eq!(made["lifecycle"]["shutdownPolicy"], "Delete");
        assert_eq!(made["lifecycle"]["ttlSecondsAfterFinished"], 60);
        let at: k8s_openapi::jiff::Timestamp = made["lifecycle"]["shutdownTime"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let ahead = at.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
        assert!((3590..=3600).contains(&ahead), "{ahead}");
        config.expire_after = None;
        config.ttl_after_finished = None;
        let made = serde_json::to_value(spec(&config)).unwrap();
        assert!(made.get("lifecycle").is_none(), "{made}");
    }
}
