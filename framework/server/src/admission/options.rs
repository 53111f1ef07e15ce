//! The admission flags of `k8s.io/apiserver` (`--enable-admission-plugins`,
//! `--disable-admission-plugins`), flattened into [`ServerOptions`](crate::server::ServerOptions).

use clap::Args;

/// Which admission plugins run. A plugin on by default runs unless disabled; one off by
/// default runs only when enabled. A name the server does not know is an error at start, as
/// in kube-apiserver.
#[derive(Clone, Debug, Default, Args)]
pub struct AdmissionOptions {
    /// Admission plugins to turn on besides those on by default (comma-separated).
    /// Known: `NamespaceLifecycle`, `MutatingAdmissionPolicy`, `MutatingAdmissionWebhook`,
    /// `ValidatingAdmissionWebhook`, `ValidatingAdmissionPolicy` (all on by default whenever there is a core API) and the server's own plugins (on by
    /// default).
    #[arg(long = "enable-admission-plugins", value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,

    /// Admission plugins to turn off (comma-separated), even if on by default.
    #[arg(long = "disable-admission-plugins", value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
}

/// `--enable-admission-plugins` or `--disable-admission-plugins` names a plugin the server
/// does not have, or names one in both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionOptionsError {
    /// An unknown name.
    #[error("--{flag} names the unknown admission plugin {name:?} (known: {known})")]
    Unknown {
        /// The flag.
        flag: &'static str,
        /// The name given.
        name: String,
        /// The plugins the server has, comma-separated.
        known: String,
    },
    /// A name in both lists.
    #[error("admission plugin {0:?} is both enabled and disabled")]
    Both(String),
    /// Two plugins of the server have the same name.
    #[error("two admission plugins are named {0:?}")]
    Duplicate(String),
}

impl AdmissionOptions {
    /// Checks every name against the plugins the server has (`known`).
    pub fn validate(&self, known: &[&str]) -> Result<(), AdmissionOptionsError> {
        let lists = [
            ("enable-admission-plugins", &self.enable_admission_plugins),
            ("disable-admission-plugins", &self.disable_admission_plugins),
        ];
        for (flag, names) in lists {
            if let Some(name) = names.iter().find(|n| !known.contains(&n.as_str())) {
                return Err(AdmissionOptionsError::Unknown {
                    flag,
                    name: name.clone(),
                    known: known.join(", "),
                });
            }
        }
        match self
            .enable_admission_plugins
            .iter()
            .find(|n| self.disable_admission_plugins.contains(n))
        {
            Some(name) => Err(AdmissionOptionsError::Both(name.clone())),
            None => Ok(()),
        }
    }

    /// Whether the plugin `name` runs, given whether it is on by default.
    pub fn enabled(&self, name: &str, on_by_default: bool) -> bool {
        if self.disable_admission_plugins.iter().any(|p| p == name) {
            return false;
        }
        on_by_default || self.enable_admission_plugins.iter().any(|p| p == name)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: AdmissionOptions,
    }

    fn parse(args: &[&str]) -> AdmissionOptions {
        let argv = std::iter::once("server").chain(args.iter().copied());
        Cli::try_parse_from(argv).unwrap().options
    }

    #[test]
    fn on_by_default_unless_disabled() {
        let none = parse(&[]);
        assert!(none.enabled("NamespaceLifecycle", true));
        assert!(!none.enabled("Extra", false));
        let off = parse(&["--disable-admission-plugins=NamespaceLifecycle,Extra"]);
        assert!(!off.enabled("NamespaceLifecycle", true));
        let on = parse(&["--enable-admission-plugins=Extra"]);
        assert!(on.enabled("Extra", false));
    }

    #[test]
    fn unknown_and_contradictory_names_are_refused() {
        let known = ["NamespaceLifecycle"];
        assert!(
            parse(&["--disable-admission-plugins=NamespaceLifecycle"])
                .validate(&known)
                .is_ok()
        );
        let unknown = parse(&["--disable-admission-plugins=NamespaceLifecycle,Other"]);
        let message = unknown.validate(&known).unwrap_err().to_string();
        assert!(message.contains("\"Other\""), "{message}");
        let both = parse(&[
            "--enable-admission-plugins=NamespaceLifecycle",
            "--disable-admission-plugins=NamespaceLifecycle",
        ]);
        assert!(matches!(
            both.validate(&known),
            Err(AdmissionOptionsError::Both(_))
        ));
    }
}
