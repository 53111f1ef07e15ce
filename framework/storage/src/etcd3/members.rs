//! The members of an etcd cluster as the etcd3 backend sees them: one client (one connection)
//! per `--etcd-servers` endpoint, and whether each answers.
//!
//! etcd-client balances several endpoints over tonic's balanced channel, which keeps a dead
//! endpoint in its rotation (its lazy connection reports ready and fails each call with the
//! connect error), so while one member of three is down a third of the calls would fail.
//! Here a member that fails a call or a health probe (every member is probed each second)
//! is set aside until a probe finds it serving again, and a call is tried on the next member
//! when it changes nothing (a read, the start of a watch) or provably never reached etcd
//! (the connection could not be made): what clientv3's balancer and retry interceptor do
//! for kube-apiserver.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{Client, Error as EtcdError, GetOptions};

use super::channel::{ConnectError, Dial, Direct};

/// Whether a call may be sent again to another member after it failed on one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Retry {
    /// A read, or the start of a watch: running it twice changes nothing, so any
    /// unavailability is retried.
    Idempotent,
    /// A write: retried only when it cannot have reached etcd, since a write that etcd
    /// applied but whose answer was lost must not be applied again.
    IfNotSent,
}

/// The members, and where the next call starts in the rotation.
pub(super) struct Members {
    members: Vec<Member>,
    next: AtomicUsize,
}

struct Member {
    endpoint: String,
    client: Client,
    /// Set when a call or a probe failed for want of etcd; cleared when it answers again.
    down: AtomicBool,
}

/// How often the members are probed, and how long a probe may take.
#[derive(Clone, Copy, Debug)]
pub(super) struct Probe {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Members {
    /// A client for each endpoint; with several, a task probes the members for as long as
    /// the returned value lives.
    pub(super) async fn connect(
        endpoints: &[String],
        dial: Dial,
        probe: Probe,
    ) -> Result<Arc<Members>, EtcdError> {
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let channel = Direct::channel(endpoint, dial.clone())?;
            let client = Client::from_channel(channel, None).await?;
            members.push(Member {
                endpoint: endpoint.clone(),
                client,
                down: AtomicBool::new(false),
            });
        }
        if members.is_empty() {
            return Err(EtcdError::InvalidArgs("no etcd endpoints".into()));
        }
        let members = Arc::new(Members {
            members,
            next: AtomicUsize::new(0),
        });
        if members.members.len() > 1 {
            tokio::spawn(probe_members(Arc::downgrade(&members), probe));
        }
        Ok(members)
    }

    /// Runs `call` on a member, and on the next ones while `retry` allows: members that are
    /// up first, in rotation, then those that are down (all may be marked down while one is
    /// already back). The error is the last member's. `call` gets the member's client to
    /// take the one service it needs from (not a copy of every service's channel).
    pub(super) async fn call<T, F, Fut>(&self, retry: Retry, mut call: F) -> Result<T, EtcdError>
    where
        F: FnMut(&Client) -> Fut,
        Fut: Future<Output = Result<T, EtcdError>>,
    {
        let order = self.order();
        let last = order.len() - 1;
        for (attempt, member) in order.into_iter().enumerate() {
            let error = match call(&member.client).await {
                Ok(answer) => {
                    member.up();
                    return Ok(answer);
                }
                Err(error) => error,
            };
            let not_sent = not_sent(&error);
            if !(not_sent || super::is_unavailable(&error)) {
                return Err(error);
            }
            member.set_aside(&error);
            if attempt == last || !(not_sent || retry == Retry::Idempotent) {
                return Err(error);
            }
            tracing::debug!(endpoint = %member.endpoint, %error, "etcd: trying the next member");
        }
        unreachable!("a cluster has at least one member")
    }

    /// The members in the order to try them.
    fn order(&self) -> Vec<&Member> {
        let count = self.members.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let rotation = (0..count).map(|i| &self.members[(start + i) % count]);
        let (mut order, down): (Vec<&Member>, Vec<&Member>) =
            rotation.partition(|member| !member.down.load(Ordering::Relaxed));
        order.extend(down);
        order
    }
}

impl Member {
    fn set_aside(&self, error: &dyn std::fmt::Display) {
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(endpoint = %self.endpoint, %error, "etcd member unavailable; using the others");
        }
    }

    fn up(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!(endpoint = %self.endpoint, "etcd member serves again");
        }
    }

    /// Whether the member serves a linearizable read, which needs it to have a leader (a
    /// live member cut off from the quorum does not), as etcd's own `/health` does.
    async fn serves(&self, timeout: Duration) -> bool {
        let mut kv = self.client.kv_client();
        let read = kv.get("health", Some(GetOptions::new().with_count_only()));
        matches!(tokio::time::timeout(timeout, read).await, Ok(Ok(_)))
    }
}

/// Probes every member, all at once, until `members` is dropped: a member that is down comes
/// back when it serves, and one that hangs or has lost the quorum (which no call may have
/// told yet) is set aside.
async fn probe_members(members: Weak<Members>, probe: Probe) {
    loop {
        tokio::time::sleep(probe.interval).await;
        let Some(members) = members.upgrade() else {
            return;
        };
        let probes = members.members.iter().map(|member| async move {
            if member.serves(probe.timeout).await {
                member.up();
            } else {
                member.set_aside(&"no answer to a health probe");
            }
        });
        futures::future::join_all(probes).await;
    }
}

/// Whether a failed call provably never reached etcd: tonic reports a connection that could
/// not be made (refused, unreachable, TLS handshake failed) with its `ConnectError` among
/// the causes, and no request goes out on a connection that does not exist.
pub(super) fn not_sent(error: &EtcdError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = match error {
        EtcdError::GRpcStatus(status) => Some(status),
        EtcdError::TransportError(error) => Some(error),
        _ => None,
    };
    // Bounded: error chains are short, and a cycle must not loop forever.
    for _ in 0..16 {
        let Some(error) = source else { return false };
        if error.is::<ConnectError>() {
            return true;
        }
        source = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback port nobody listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    fn probe() -> Probe {
        Probe {
            interval: Duration::from_millis(50),
            timeout: Duration::from_millis(500),
        }
    }

    /// Guards the downcast: were the channel's connect errors to reach etcd-client's callers
    /// in another shape, they would no longer be recognised and writes no longer moved to a
    /// live member.
    #[tokio::test]
    async fn a_refused_connection_is_known_not_sent() {
        let endpoint = format!("http://127.0.0.1:{}", closed_port());
        let members = Members::connect(&[endpoint], Dial::default(), probe())
            .await
            .unwrap();
        let read = members
            .call(Retry::IfNotSent, |client| {
                let mut kv = client.kv_client();
                async move { kv.get("a", None).await }
            })
            .await;
        let Err(error) = read else {
            panic!("nobody listens, yet a read succeeded");
        };
        assert!(not_sent(&error), "{error:?}");
        assert!(super::super::is_unavailable(&error), "{error:?}");
        // A lone member is set aside (and logged) as it would be among several.
        assert!(members.members[0].down.load(Ordering::Relaxed));
    }

    /// Every member is dead: each is tried once, all end marked down, the error is a
    /// connect error, and calls still go out (to members that are down) rather than fail
    /// without trying.
    #[tokio::test]
    async fn all_members_down_are_each_tried() {
        let endpoints: Vec<String> = (0..3)
            .map(|_| format!("http://127.0.0.1:{}", closed_port()))
            .collect();
        let members = Members::connect(&endpoints, Dial::default(), probe())
            .await
            .unwrap();
        let tried = AtomicUsize::new(0);
        let write = members
            .call(Retry::IfNotSent, |client| {
                tried.fetch_add(1, Ordering::Relaxed);
                let mut kv = client.kv_client();
                async move { kv.put("a", "b", None).await }
            })
            .await;
        assert!(not_sent(&write.err().unwrap()));
        assert_eq!(tried.load(Ordering::Relaxed), 3);
        assert!(
            members
                .members
                .iter()
                .all(|m| m.down.load(Ordering::Relaxed))
        );
        assert_eq!(members.order().len(), 3);
    }
}
