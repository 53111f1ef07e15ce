//! Apply conflicts and the `Status` kube-apiserver answers them with
//! (k8s.io/apimachinery `managedfields/internal/conflict.go`).

use std::collections::BTreeMap;

use kube_core::response::StatusCause;

use super::path::Path;
use crate::error::Error;

/// One field an apply would take from another manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Its entry's operation: `Apply` or `Update`.
    pub operation: String,
    /// The version an `Update` entry is in (an applier's entry is one for all versions).
    pub api_version: Option<String>,
    /// The subresource it wrote through.
    pub subresource: Option<String>,
    /// The contested field.
    pub path: Path,
}

impl Conflict {
    /// The manager as kube prints it (`printManager`): `"kubectl"`, then ` with
    /// subresource "status"` and, for an `Update` entry, ` using <apiVersion>`.
    pub fn manager_description(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {sub:?}"));
        }
        if let Some(version) = &self.api_version {
            out.push_str(&format!(" using {version}"));
        }
        out
    }
}

/// Every conflict of one apply, by manager, each manager's in SMD's path order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyConflicts {
    conflicts: Vec<Conflict>,
}

impl ApplyConflicts {
    pub(crate) fn new(mut conflicts: Vec<Conflict>) -> Self {
        // Stable: each manager's paths keep the order they came in.
        conflicts.sort_by_cached_key(Conflict::manager_description);
        Self { conflicts }
    }

    /// The conflicts, by manager.
    pub fn conflicts(&self) -> &[Conflict] {
        &self.conflicts
    }

    /// kube's message: one conflict on one line, several grouped by manager.
    pub fn message(&self) -> String {
        if let [only] = self.conflicts.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager_description(),
                only.path
            );
        }
        let mut by_manager: BTreeMap<String, Vec<&Path>> = BTreeMap::new();
        for c in &self.conflicts {
            let manager = c.manager_description();
            by_manager.entry(manager).or_default().push(&c.path);
        }
        let mut lines = Vec::new();
        for (manager, paths) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.conflicts.len(),
            lines.join("\n")
        )
    }

    /// 409 `Conflict` with one `FieldManagerConflict` cause per field.
    pub fn to_error(&self) -> Error {
        let causes = self
            .conflicts
            .iter()
            .map(|c| StatusCause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {}", c.manager_description()),
                field: c.path.to_string(),
            })
            .collect();
        Error::apply_conflict(self.message(), causes)
    }
}

impl From<ApplyConflicts> for Error {
    fn from(conflicts: ApplyConflicts) -> Self {
        conflicts.to_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fieldmanager::path::PathElement;
    use serde_json::json;

    fn conflict(
        manager: &str,
        version: Option<&str>,
        sub: Option<&str>,
        path: &[&str],
    ) -> Conflict {
        Conflict {
            manager: manager.into(),
            operation: if version.is_some() { "Update" } else { "Apply" }.into(),
            api_version: version.map(str::to_owned),
            subresource: sub.map(str::to_owned),
            path: Path(
                path.iter()
                    .map(|f| PathElement::Field((*f).into()))
                    .collect(),
            ),
        }
    }

    #[test]
    fn one_conflict_as_kube_words_it() {
        let conflicts = ApplyConflicts::new(vec![conflict(
            "kubectl",
            Some("wardle.example.com/v1alpha1"),
            None,
            &["spec", "reference"],
        )]);
        let e = conflicts.to_error();
        assert_eq!(e.code(), 409);
        assert_eq!(e.reason(), "Conflict");
        assert_eq!(
            e.message(),
            r#"Apply failed with 1 conflict: conflict with "kubectl" using wardle.example.com/v1alpha1: .spec.reference"#
        );
        let status = e.to_json();
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "FieldManagerConflict",
                    "message": "conflict with \"kubectl\" using wardle.example.com/v1alpha1",
                    "field": ".spec.reference"}])
        );
    }

    #[test]
    fn several_conflicts_grouped_by_manager() {
        let conflicts = ApplyConflicts::new(vec![
            conflict("b", None, None, &["spec", "x"]),
            conflict("a", Some("v1"), Some("status"), &["status", "x"]),
            conflict("b", None, None, &["spec", "y"]),
        ]);
        assert_eq!(
            conflicts.message(),
            "Apply failed with 3 conflicts: conflicts with \"a\" with subresource \"status\" using v1:\n- .status.x\nconflicts with \"b\":\n- .spec.x\n- .spec.y"
        );
        assert_eq!(
            conflicts
                .to_error()
                .status()
                .details
                .as_ref()
                .unwrap()
                .causes
                .len(),
            3
        );
    }
}
