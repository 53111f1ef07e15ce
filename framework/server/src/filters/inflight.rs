//! Overload protection: at most `--max-requests-inflight` read-only and
//! `--max-mutating-requests-inflight` mutating requests at once, as kube-apiserver's
//! max-in-flight filter; a request beyond the limit is kube's 429 (a plain-text body, see
//! `filters::too_many_requests`) with `Retry-After: 1`, and changes nothing.
//!
//! In the spirit of API Priority and Fairness, requests are not all in one queue:
//! - exempt, never limited: long-running requests (watches), non-resource requests (health,
//!   discovery, OpenAPI, `/version`, `/metrics`: what the aggregator and kubelets probe) and
//!   `system:masters`, as kube's filter exempts them;
//! - system users (`system:kube-aggregator`, `system:apiserver`, … and `system:nodes`, but not
//!   service accounts) have seats of their own, so a flood of workload requests cannot starve
//!   the cluster's own components;
//! - everyone else shares the workload seats, and no one user may hold more than half of them,
//!   so one client flooding the server leaves room for the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::Request;

use crate::auth::UserInfo;
use crate::endpoints::{RequestInfo, Verb};

/// The limits of one server; 0 means no limit, as kube's flags.
#[derive(Debug)]
pub struct InflightLimits {
    /// System users: read-only, mutating.
    system: [Arc<Pool>; 2],
    /// Everyone else: read-only, mutating.
    workload: [Arc<Pool>; 2],
}

impl InflightLimits {
    /// `read_only` and `mutating` seats for each of the system and workload classes.
    pub fn new(read_only: usize, mutating: usize) -> Self {
        Self {
            system: [Pool::new(read_only, false), Pool::new(mutating, false)],
            workload: [Pool::new(read_only, true), Pool::new(mutating, true)],
        }
    }

    /// A seat for `request` (`None`: exempt), or the 429 that refuses it.
    pub(crate) fn admit(
        &self,
        request: &Request,
        long_running: bool,
    ) -> Result<Option<Seat>, Refused> {
        let (Some(info), Some(user)) = (
            request.extensions().get::<RequestInfo>(),
            request.extensions().get::<UserInfo>(),
        ) else {
            return Ok(None);
        };
        if long_running
            || !info.is_resource_request
            || user.groups.iter().any(|g| g == "system:masters")
        {
            return Ok(None);
        }
        let mutating = !matches!(info.verb, Verb::Get | Verb::List | Verb::Watch);
        let pools = if is_system(user) {
            &self.system
        } else {
            &self.workload
        };
        let pool = &pools[usize::from(mutating)];
        match pool.take(&user.name) {
            Some(seat) => Ok(Some(seat)),
            None => {
                let kind = if mutating { "mutating" } else { "readOnly" };
                crate::metrics::global()
                    .dropped
                    .with_label_values(&[kind])
                    .inc();
                Err(Refused)
            }
        }
    }
}

/// A request refused for want of a seat: kube's 429 with `Retry-After: 1`
/// (`filters::too_many_requests`).
#[derive(Debug)]
pub(crate) struct Refused;

/// The cluster's own components: `system:` users that are not service accounts, and nodes.
fn is_system(user: &UserInfo) -> bool {
    let component =
        user.name.starts_with("system:") && !user.name.starts_with("system:serviceaccount:");
    component || user.groups.iter().any(|g| g == "system:nodes")
}

/// Seats of one class of requests.
#[derive(Debug)]
struct Pool {
    seats: usize,
    /// Whether one user may hold at most half of the seats.
    fair: bool,
    taken: Mutex<Taken>,
}

#[derive(Debug, Default)]
struct Taken {
    total: usize,
    by_user: HashMap<String, usize>,
}

impl Pool {
    fn new(seats: usize, fair: bool) -> Arc<Self> {
        Arc::new(Self {
            seats,
            fair,
            taken: Mutex::default(),
        })
    }

    /// The most seats one user may hold.
    fn per_user(&self) -> usize {
        if self.fair {
            (self.seats / 2).max(1)
        } else {
            self.seats
        }
    }

    fn take(self: &Arc<Self>, user: &str) -> Option<Seat> {
        if self.seats == 0 {
            return Some(Seat {
                pool: None,
                user: String::new(),
            });
        }
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = taken.by_user.get(user).copied().unwrap_or(0);
        if taken.total >= self.seats || mine >= self.per_user() {
            return None;
        }
        taken.total += 1;
        *taken.by_user.entry(user.to_string()).or_default() += 1;
        Some(Seat {
            pool: Some(Arc::clone(self)),
            user: user.to_string(),
        })
    }
}

/// A seat held while a request runs.
pub(crate) struct Seat {
    pool: Option<Arc<Pool>>,
    user: String,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let Some(pool) = &self.pool else {
            return;
        };
        let mut taken = pool.taken.lock().unwrap_or_else(PoisonError::into_inner);
        taken.total -= 1;
        if let Some(mine) = taken.by_user.get_mut(&self.user) {
            *mine -= 1;
            if *mine == 0 {
                taken.by_user.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_holds_at_most_half_and_others_still_get_seats() {
        let pool = Pool::new(4, true);
        let flood: Vec<_> = (0..2).map(|_| pool.take("flood").unwrap()).collect();
        assert!(pool.take("flood").is_none(), "half of the seats at most");
        let other = pool.take("patient").unwrap();
        let another = pool.take("third").unwrap();
        assert!(pool.take("fourth").is_none(), "every seat is taken");
        drop(other);
        assert!(pool.take("fourth").is_some());
        drop((flood, another));
        assert_eq!(pool.taken.lock().unwrap().total, 0);
        assert!(pool.taken.lock().unwrap().by_user.is_empty());
    }

    #[test]
    fn zero_seats_is_no_limit_and_system_users_are_told_apart() {
        let pool = Pool::new(0, true);
        let seats: Vec<_> = (0..100).map(|_| pool.take("u").unwrap()).collect();
        assert_eq!(seats.len(), 100);
        let user =
            |name: &str, groups: &[&str]| UserInfo::new(name, groups.iter().map(|g| g.to_string()));
        assert!(is_system(&user("system:kube-aggregator", &[])));
        assert!(is_system(&user("system:node:n1", &["system:nodes"])));
        assert!(!is_system(&user("system:serviceaccount:ns:sa", &[])));
        assert!(!is_system(&user("alice", &[])));
    }
}
