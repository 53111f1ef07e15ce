//! A run's subresources on the framework's subresource API: `log` (a [`Streamer`] with
//! pods/log's options), `attach` (a [`Connecter`]: channel.k8s.io over WebSocket), `cancel` (an
//! [`Action`], POST, answering the run) and `summary` (a [`View`] of kind `RunSummary`).

use std::sync::Arc;

use extension_apiserver::prelude::*;
use extension_apiserver::registry::subresource::{
    Action, ActionVerb, ByteStream, Channels, Connecter, ExitStatus, NoOptions, Session, Streamer,
    SubresourceRequest, View,
};
use futures::StreamExt as _;
use jiff::Timestamp;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::GROUP;
use crate::log::{CONTAINER, LogRead};
use crate::output::Stream as Std;
use crate::process::Process;
use crate::runs::Runs;
use crate::types::{Run, RunSummary};

/// `runs/{name}/log`'s options: `PodLogOptions`' query parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunLogOptions {
    /// The container: a run has one, `run`, the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Keep streaming what the process writes, until it exits.
    #[serde(default)]
    pub follow: bool,
    /// The log of a previous instance: a run has none.
    #[serde(default)]
    pub previous: bool,
    /// Only lines of the last seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_seconds: Option<i64>,
    /// Only lines from this time on (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_time: Option<String>,
    /// Each line prefixed with its RFC 3339 time.
    #[serde(default)]
    pub timestamps: bool,
    /// Only the last lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_lines: Option<i64>,
    /// At most these bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<i64>,
}

impl RunLogOptions {
    /// What to read, or kube's answer for these options: 422 `Invalid` as
    /// `ValidatePodLogOptions` (pkg/apis/core/validation), 400 for a container the run does
    /// not have (pod's `LogLocation`), a previous instance or a bad `sinceTime`.
    pub fn check(&self, name: &str) -> extension_apiserver::Result<LogRead> {
        check_container(self.container.as_deref(), name)?;
        if self.previous {
            return Err(Error::bad_request(format!(
                "previous terminated container \"{CONTAINER}\" in run \"{name}\" not found"
            )));
        }
        let mut errors = Vec::new();
        if let Some(n) = self.tail_lines.filter(|n| *n < 0) {
            errors.push(FieldError::invalid(
                "tailLines",
                n,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(n) = self.limit_bytes.filter(|n| *n < 1) {
            errors.push(FieldError::invalid(
                "limitBytes",
                n,
                "must be greater than 0",
            ));
        }
        match (self.since_seconds, &self.since_time) {
            (Some(_), Some(_)) => errors.push(FieldError::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(n), None) if n < 1 => {
                errors.push(FieldError::invalid(
                    "sinceSeconds",
                    n,
                    "must be greater than 0",
                ));
            }
            _ => {}
        }
        if !errors.is_empty() {
            return Err(Error::invalid_in(GROUP, "RunLogOptions", name, &errors));
        }
        let since_time = match &self.since_time {
            Some(time) => Some(time.parse::<Timestamp>().map_err(|e| {
                Error::bad_request(format!("sinceTime: {time:?} is not an RFC 3339 time: {e}"))
            })?),
            None => None,
        };
        Ok(LogRead {
            follow: self.follow,
            tail_lines: self.tail_lines.map(|n| n as u64),
            since_seconds: self.since_seconds.map(|n| n as u64),
            since_time,
            timestamps: self.timestamps,
            limit_bytes: self.limit_bytes.map(|n| n as u64),
        })
    }
}

fn check_container(container: Option<&str>, name: &str) -> extension_apiserver::Result<()> {
    match container {
        None | Some("") | Some(CONTAINER) => Ok(()),
        Some(other) => Err(Error::bad_request(format!(
            "container {other} is not valid for run {name}"
        ))),
    }
}

fn namespace<O>(request: &SubresourceRequest<O>) -> &str {
    request.namespace.as_deref().unwrap_or_default()
}

/// `runs/{name}/log`.
pub struct Log(pub Runs);

#[async_trait]
impl Streamer for Log {
    type Parent = Run;
    type Options = RunLogOptions;

    async fn stream(
        &self,
        request: SubresourceRequest<RunLogOptions>,
    ) -> extension_apiserver::Result<ByteStream> {
        let read = request.options.check(&request.name)?;
        let process = self.0.process(namespace(&request), &request.name).await?;
        let chunks = crate::log::stream(process.output.clone(), read);
        Ok(Box::pin(chunks.map(Ok)))
    }
}

/// `runs/{name}/attach`'s options: `PodAttachOptions`' query parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunAttachOptions {
    /// Send stdin to the process (its run must have `spec.stdin`).
    #[serde(default)]
    pub stdin: bool,
    /// Read its stdout.
    #[serde(default)]
    pub stdout: bool,
    /// Read its stderr.
    #[serde(default)]
    pub stderr: bool,
    /// A terminal: a run has none.
    #[serde(default)]
    pub tty: bool,
    /// The container: `run`, the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// `runs/{name}/attach`: the process's stdin, stdout and stderr, live, and its exit status.
pub struct Attach(pub Runs);

#[async_trait]
impl Connecter for Attach {
    type Parent = Run;
    type Options = RunAttachOptions;

    fn channels(&self, options: &RunAttachOptions) -> Channels {
        Channels {
            stdin: options.stdin,
            stdout: options.stdout,
            stderr: options.stderr,
            tty: options.tty,
        }
    }

    async fn check(
        &self,
        request: &SubresourceRequest<RunAttachOptions>,
    ) -> extension_apiserver::Result<()> {
        let options = &request.options;
        check_container(options.container.as_deref(), &request.name)?;
        let run = self.0.get(namespace(request), &request.name).await?;
        if options.tty {
            return Err(Error::bad_request(format!(
                "container {CONTAINER} of run {} has no terminal (tty)",
                request.name
            )));
        }
        if options.stdin && !run.spec.stdin {
            return Err(Error::bad_request(format!(
                "stdin is not enabled for run {} (spec.stdin)",
                request.name
            )));
        }
        Ok(())
    }

    async fn connect(
        &self,
        request: SubresourceRequest<RunAttachOptions>,
        session: Session,
    ) -> extension_apiserver::Result<ExitStatus> {
        let process = self.0.process(namespace(&request), &request.name).await?;
        // From now on: attach sees what is written while it is attached, as the CRI's.
        let mut live = process.output.live();
        let mut exit = process.exit();
        let exited = async move { exit.wait_for(Option::is_some).await.ok().and_then(|e| *e) };
        tokio::pin!(exited);
        let Session {
            stdin,
            stdout,
            stderr,
            ..
        } = session;
        // As a container's `stdinOnce`: the end of the attached client's stdin is the
        // process's, also when the client goes away and the framework drops this session.
        let _close_stdin = stdin.is_some().then(|| CloseStdinOnDrop(process.clone()));
        let feed = {
            let process = process.clone();
            async move {
                if let Some(mut stdin) = stdin {
                    while let Some(chunk) = stdin.recv().await {
                        if !process.write_stdin(&chunk).await {
                            break;
                        }
                    }
                    // As a container's `stdinOnce`: the attached client's end is the process's.
                    process.close_stdin().await;
                }
                std::future::pending::<()>().await
            }
        };
        tokio::pin!(feed);
        let send = |stream: Std, data| match stream {
            Std::Stdout => stdout.write(data),
            Std::Stderr => stderr.write(data),
        };
        let ended = loop {
            tokio::select! {
                chunk = live.recv() => match chunk {
                    Ok((stream, data)) => send(stream, data).await?,
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => {}
                },
                ended = &mut exited => break ended,
                _ = &mut feed => {}
            }
        };
        // What was written before the exit was seen.
        loop {
            match live.try_recv() {
                Ok((stream, data)) => send(stream, data).await?,
                Err(TryRecvError::Lagged(_)) => {}
                Err(_) => break,
            }
        }
        Ok(match ended.map(|e| e.code) {
            Some(0) => ExitStatus::Success,
            Some(code) => ExitStatus::Code(code),
            None => ExitStatus::Failed("the process's end is unknown".into()),
        })
    }
}

/// Closes a process's stdin when an attach that fed it ends, however it ends.
struct CloseStdinOnDrop(Arc<Process>);

impl Drop for CloseStdinOnDrop {
    fn drop(&mut self) {
        let process = self.0.clone();
        // The pipe's lock is async; the runtime is there while sessions are.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { process.close_stdin().await });
        }
    }
}

/// `runs/{name}/cancel` (POST): ends the process; answers the run, `Cancelled`.
pub struct Cancel(pub Runs);

#[async_trait]
impl Action for Cancel {
    type Parent = Run;
    type Options = NoOptions;
    type Body = serde_json::Value;
    type Output = Run;
    const VERBS: &'static [ActionVerb] = &[ActionVerb::Create];

    async fn act(
        &self,
        _: ActionVerb,
        request: SubresourceRequest<NoOptions>,
        _: Option<serde_json::Value>,
    ) -> extension_apiserver::Result<Run> {
        self.0.cancel(namespace(&request), &request.name).await
    }
}

/// `runs/{name}/summary` (GET): a `RunSummary`.
pub struct Summary(pub Runs);

#[async_trait]
impl View for Summary {
    type Parent = Run;
    type Options = NoOptions;
    type Output = RunSummary;

    async fn get(
        &self,
        request: SubresourceRequest<NoOptions>,
    ) -> extension_apiserver::Result<RunSummary> {
        self.0.summary(namespace(&request), &request.name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_options_as_kube_checks_them() {
        let negative = RunLogOptions {
            tail_lines: Some(-1),
            limit_bytes: Some(0),
            ..RunLogOptions::default()
        };
        let error = negative.check("x").unwrap_err();
        assert_eq!(error.code(), 422);
        assert!(
            error
                .message()
                .contains("tailLines: Invalid value: -1: must be greater than or equal to 0"),
            "{}",
            error.message()
        );
        let other = RunLogOptions {
            container: Some("sidecar".into()),
            ..RunLogOptions::default()
        };
        let error = other.check("x").unwrap_err();
        assert_eq!(
            (error.code(), error.message()),
            (400, "container sidecar is not valid for run x")
        );
        let named = RunLogOptions {
            container: Some(CONTAINER.into()),
            tail_lines: Some(3),
            ..RunLogOptions::default()
        };
        assert_eq!(named.check("x").unwrap().tail_lines, Some(3));
    }
}
