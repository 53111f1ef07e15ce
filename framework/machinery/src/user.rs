//! The identity that authentication attaches to a request and authorization, audit and
//! admission read: `k8s.io/apiserver`'s `user.Info`, serialised like
//! `authentication.k8s.io/v1` `UserInfo` so TokenReview responses decode straight into it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Group every authenticated user belongs to.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// Group of the anonymous user.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// Name of the anonymous user.
pub const ANONYMOUS: &str = "system:anonymous";
/// Group whose members may do anything (kube-apiserver's superuser group).
pub const SYSTEM_MASTERS: &str = "system:masters";

/// Who made a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user name, unique among all active users (`username` on the wire).
    #[serde(rename = "username", default)]
    pub name: String,
    /// A unique value that changes if the user is deleted and re-created; may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The groups the user belongs to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes from the authenticator (scopes, etc.).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups, no uid and no extras.
    pub fn new(name: impl Into<String>, groups: impl IntoIterator<Item = String>) -> Self {
        Self {
            name: name.into(),
            groups: groups.into_iter().collect(),
            ..Self::default()
        }
    }

    /// The anonymous user, as kube-apiserver names it when anonymous requests are enabled.
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS, [ALL_UNAUTHENTICATED.to_string()])
    }

    /// Adds `system:authenticated` unless present, as kube-apiserver's group adder does for
    /// every user an authenticator recognised (the anonymous user, and a user already in
    /// `system:unauthenticated` as a front proxy forwards anonymous requests, excepted).
    pub fn with_authenticated_group(mut self) -> Self {
        let anonymous = self.name == ANONYMOUS || self.in_group(ALL_UNAUTHENTICATED);
        if !anonymous && !self.in_group(ALL_AUTHENTICATED) {
            self.groups.push(ALL_AUTHENTICATED.to_string());
        }
        self
    }

    /// Whether the user belongs to `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Whether an authenticator recognised this user (not anonymous).
    pub fn is_authenticated(&self) -> bool {
        self.name != ANONYMOUS && self.in_group(ALL_AUTHENTICATED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_added_once() {
        let user = UserInfo::new("admin", [SYSTEM_MASTERS.to_string()])
            .with_authenticated_group()
            .with_authenticated_group();
        assert_eq!(user.groups, [SYSTEM_MASTERS, ALL_AUTHENTICATED]);
        assert!(user.is_authenticated());
    }

    #[test]
    fn anonymous_is_never_authenticated() {
        let user = UserInfo::anonymous().with_authenticated_group();
        assert_eq!(user.groups, [ALL_UNAUTHENTICATED]);
        assert!(!user.is_authenticated());
    }

    #[test]
    fn serialises_like_authentication_k8s_io() {
        let user = UserInfo::new("jane", ["devs".to_string()]);
        let json = serde_json::to_value(&user).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"username": "jane", "groups": ["devs"]})
        );
        assert_eq!(serde_json::from_value::<UserInfo>(json).unwrap(), user);
    }
}
