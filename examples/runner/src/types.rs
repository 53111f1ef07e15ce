//! The kinds of `runner.example.com/v1alpha1`: `Run`, stored, and `RunSummary`, computed from
//! a run's output by its `summary` subresource.

use extension_apiserver::prelude::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A command the server runs on its own host, once.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "runner.example.com",
    version = "v1alpha1",
    kind = "Run",
    namespaced,
    status = "RunStatus",
    shortnames = ["rn"],
    printcolumn(name = "Phase", type = "string", json_path = ".status.phase"),
    printcolumn(name = "Exit", type = "integer", json_path = ".status.exitCode"),
    printcolumn(name = "Command", type = "string", json_path = ".spec.command", priority = 1),
    validate = validate_run,
    validate_update = validate_run_update
)]
pub struct Run {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What to run.
    #[serde(default)]
    pub spec: RunSpec,
    /// What became of it, written by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
}

/// What to run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSpec {
    /// The program (an absolute path the server allows with `--allow-command`) and its
    /// arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// Whether the process reads its standard input from `attach` (otherwise it reads an
    /// empty one).
    #[serde(default)]
    pub stdin: bool,
}

/// The life of a run, as a pod's phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RunPhase {
    /// Created; its process is not started yet.
    #[default]
    Pending,
    /// Its process runs.
    Running,
    /// Its process exited with 0.
    Succeeded,
    /// Its process exited otherwise, or could not start.
    Failed,
    /// Ended by `cancel`.
    Cancelled,
}

impl RunPhase {
    /// Whether the run is over.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

/// What became of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Where it is in its life.
    #[serde(default)]
    pub phase: RunPhase,
    /// The process's exit code, once it exited (128 + the signal's number when a signal
    /// ended it, as a shell and the kubelet report it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// When the process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Why it failed to start, or was ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn validate_run(run: &Run) -> Vec<FieldError> {
    match run.spec.command.first() {
        None => vec![FieldError::required("spec.command", "the program to run")],
        Some(program) if program.is_empty() => {
            vec![FieldError::required(
                "spec.command[0]",
                "the program to run",
            )]
        }
        Some(_) => Vec::new(),
    }
}

fn validate_run_update(run: &Run, old: &Run) -> Vec<FieldError> {
    // Its process started from the spec it had (a pod's containers are as immutable).
    match run.spec == old.spec {
        true => validate_run(run),
        false => vec![FieldError::forbidden("spec", "a run's spec may not change")],
    }
}

/// A run's output and time, computed when asked for (`runs/{name}/summary`).
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "runner.example.com",
    version = "v1alpha1",
    kind = "RunSummary",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// The run's name and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The run's phase.
    #[serde(default)]
    pub phase: RunPhase,
    /// What it wrote to its standard output.
    #[serde(default)]
    pub stdout: StreamSummary,
    /// What it wrote to its standard error.
    #[serde(default)]
    pub stderr: StreamSummary,
    /// How long it ran, or has run so far, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// Its exit code, once it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// What a process wrote to one stream, from its start (the log keeps only its last part).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamSummary {
    /// Lines (a last one without a newline counts).
    pub lines: u64,
    /// Bytes.
    pub bytes: u64,
}
