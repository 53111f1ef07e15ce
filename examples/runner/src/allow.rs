//! `--allow-command`: the programs a run may start, checked by an admission plugin (the list
//! is the server's, which a type's strategy cannot see). A run of any other program is
//! refused as invalid, as a validation of `spec.command[0]` would refuse it.

use std::sync::Arc;

use extension_apiserver::prelude::*;

use crate::types::Run;

/// The plugin's name, as `--disable-admission-plugins` takes it.
pub const NAME: &str = "RunnerAllowedCommands";

/// Refuses runs whose program is not one of the allowed.
#[derive(Clone, Debug)]
pub struct AllowedCommands {
    allowed: Arc<[String]>,
}

impl AllowedCommands {
    /// Allows exactly `allowed` (absolute paths, compared as written).
    pub fn new(allowed: &[String]) -> Self {
        Self {
            allowed: allowed.into(),
        }
    }

    /// The `spec.command[0]` error of `run`, if its program is not allowed.
    pub fn check(&self, run: &Run) -> Option<FieldError> {
        let program = run.spec.command.first()?;
        if self.allowed.contains(program) {
            return None;
        }
        let allowed: Vec<&str> = self.allowed.iter().map(String::as_str).collect();
        Some(FieldError::not_supported(
            "spec.command[0]",
            program,
            &allowed,
        ))
    }
}

#[async_trait]
impl AdmissionPlugin for AllowedCommands {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    async fn validate(&self, attributes: &Attributes) -> extension_apiserver::Result<()> {
        if !attributes.is::<Run>() || !attributes.subresource.is_empty() {
            return Ok(());
        }
        let Some(run) = attributes.object_as::<Run>()? else {
            return Ok(());
        };
        match self.check(&run) {
            Some(error) => Err(Error::invalid(&Run::INFO, &attributes.name, &[error])),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlisted_program_is_an_unsupported_value() {
        let allowed = AllowedCommands::new(&["/bin/sh".into(), "/bin/cat".into()]);
        let mut run = Run::default();
        run.spec.command = vec!["/bin/sh".into(), "-c".into(), "true".into()];
        assert!(allowed.check(&run).is_none());
        run.spec.command[0] = "/usr/bin/rm".into();
        let error = allowed.check(&run).unwrap();
        assert_eq!(
            error.to_string(),
            "spec.command[0]: Unsupported value: \"/usr/bin/rm\": supported values: \"/bin/sh\", \"/bin/cat\""
        );
    }
}
