//! The runner's flags, beside the framework's.

use std::path::Path;

/// What may run, and how much of its output is kept.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RunnerOptions {
    /// A program a run may start, as an absolute path (repeatable); a run of any other is
    /// refused (422).
    #[arg(long = "allow-command", value_name = "PATH", value_parser = absolute)]
    pub allow_commands: Vec<String>,

    /// How much of each run's output (the last bytes, as lines) `log` can read.
    #[arg(long, value_name = "BYTES", default_value_t = crate::DEFAULT_LOG_BYTES)]
    pub log_buffer_bytes: usize,
}

impl RunnerOptions {
    /// Allows `commands`, keeping the default log buffer.
    pub fn allowing(commands: &[&str]) -> Self {
        Self {
            allow_commands: commands.iter().map(|c| c.to_string()).collect(),
            log_buffer_bytes: crate::DEFAULT_LOG_BYTES,
        }
    }
}

fn absolute(value: &str) -> Result<String, String> {
    match Path::new(value).is_absolute() {
        true => Ok(value.to_string()),
        false => Err(format!("{value:?} is not an absolute path")),
    }
}
