//! The server's side of runs: a loop that follows the stored `Run`s in process (as a
//! controller follows its informer) and starts the process of each new one, writes its status
//! as it goes, and ends it when its run is deleted or the server shuts down; and what the
//! subresources ask of a run's process (its output, its stdin, `cancel`, the summary).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use extension_apiserver::lifecycle::ShutdownSignal;
use extension_apiserver::prelude::*;
use extension_apiserver::registry::context::RequestContext;
use extension_apiserver::registry::options::{ListOptions, WriteOptions};
use extension_apiserver::registry::rest::{RestStorage, WatchEventType, Watcher as _};
use extension_apiserver::registry::store::Store;
use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use tokio::sync::watch;

use crate::process::{Exit, Process};
use crate::types::{Run, RunPhase, RunStatus, RunSummary};

/// How long `attach` and `log` wait for a new run's process to start.
const START_WAIT: Duration = Duration::from_secs(10);

type Key = (String, String);

/// The runs of a server and their processes.
#[derive(Clone)]
pub struct Runs {
    shared: Arc<Shared>,
}

struct Shared {
    log_bytes: usize,
    store: OnceLock<(Store<Run>, RestStorage)>,
    table: Mutex<HashMap<Key, Entry>>,
    /// Bumped whenever a process starts: what `attach` and `log` wait on for a new run.
    started: watch::Sender<u64>,
}

#[derive(Clone)]
enum Entry {
    Started {
        process: Arc<Process>,
        /// True once its final status is stored.
        recorded: watch::Receiver<bool>,
    },
    /// Cancelled before its process started: it never will.
    CancelledBeforeStart,
}

impl Runs {
    /// No runs yet; each process keeps the last `log_bytes` of its output.
    pub fn new(log_bytes: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                log_bytes,
                store: OnceLock::new(),
                table: Mutex::new(HashMap::new()),
                started: watch::channel(0).0,
            }),
        }
    }

    /// Follows the stored runs of `store` until `shutdown`, then ends every process.
    pub fn start(&self, store: Store<Run>, shutdown: ShutdownSignal) {
        let status = store.status_rest_storage();
        if self.shared.store.set((store, status)).is_err() {
            return;
        }
        let runs = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = runs.follow() => {}
                _ = shutdown.cancelled() => {}
            }
            runs.end_all();
        });
    }

    /// How many processes run now.
    pub fn running(&self) -> usize {
        self.table()
            .values()
            .filter(|entry| match entry {
                Entry::Started { process, .. } => process.exit().borrow().is_none(),
                Entry::CancelledBeforeStart => false,
            })
            .count()
    }

    /// How many `log` readers and `attach` clients run `name`'s output has now.
    pub fn readers(&self, namespace: &str, name: &str) -> (usize, usize) {
        match self.table().get(&(namespace.to_string(), name.to_string())) {
            Some(Entry::Started { process, .. }) => {
                (process.output.followers(), process.output.attached())
            }
            _ => (0, 0),
        }
    }

    async fn follow(&self) {
        let options = ListOptions {
            timeout_seconds: Some(i64::MAX),
            ..ListOptions::default()
        };
        loop {
            // No resourceVersion: every stored run first, as ADDED, then the changes.
            match self
                .store()
                .watch(&RequestContext::cluster(), &options)
                .await
            {
                Ok(mut events) => {
                    while let Some(event) = events.next().await {
                        self.handle(event.type_, event.object.to_value()).await;
                    }
                }
                Err(e) => tracing::warn!("watching runs: {e}"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn handle(&self, type_: WatchEventType, object: extension_apiserver::Result<Value>) {
        let Some(run) = object
            .ok()
            .and_then(|v| serde_json::from_value::<Run>(v).ok())
        else {
            return;
        };
        let key = key_of(&run);
        match type_ {
            WatchEventType::Added | WatchEventType::Modified => self.reconcile(key, run).await,
            WatchEventType::Deleted => self.forget(&key),
            _ => {}
        }
    }

    /// Starts the process of a new run; marks failed a run that was running when the server
    /// stopped (its process ended with the server).
    async fn reconcile(&self, key: Key, run: Run) {
        let phase = run.status.as_ref().map(|s| s.phase).unwrap_or_default();
        if phase.is_finished() || self.table().contains_key(&key) {
            return;
        }
        if phase == RunPhase::Running {
            let status = RunStatus {
                phase: RunPhase::Failed,
                message: Some("the server restarted while the process ran".into()),
                completion_time: Some(Time(Timestamp::now())),
                ..run.status.clone().unwrap_or_default()
            };
            let _ = self.write_status(&key, status).await;
            return;
        }
        let started = Process::start(&run.spec.command, run.spec.stdin, self.shared.log_bytes);
        let (process, child) = match started {
            Ok(started) => started,
            Err(e) => {
                let status = RunStatus {
                    phase: RunPhase::Failed,
                    message: Some(format!("the process did not start: {e}")),
                    completion_time: Some(Time(Timestamp::now())),
                    ..RunStatus::default()
                };
                let _ = self.write_status(&key, status).await;
                return;
            }
        };
        let (recorded_tx, recorded) = watch::channel(false);
        {
            let mut table = self.table();
            if table.contains_key(&key) {
                return; // cancelled meanwhile: the child is killed on drop
            }
            let entry = Entry::Started {
                process: process.clone(),
                recorded,
            };
            table.insert(key.clone(), entry);
        }
        self.shared.started.send_modify(|n| *n += 1);
        let runs = self.clone();
        tokio::spawn(async move {
            let running = RunStatus {
                phase: RunPhase::Running,
                start_time: Some(Time(process.started)),
                ..RunStatus::default()
            };
            let _ = runs.write_status(&key, running.clone()).await;
            let exit = process.wait(child).await;
            let _ = runs.write_status(&key, finished(running, exit)).await;
            recorded_tx.send_replace(true);
        });
    }

    fn forget(&self, key: &Key) {
        if let Some(Entry::Started { process, .. }) = self.table().remove(key) {
            process.kill(false);
        }
    }

    fn end_all(&self) {
        for (_, entry) in self.table().drain() {
            if let Entry::Started { process, .. } = entry {
                process.kill(false);
            }
        }
    }

    /// The process of run `name`, waiting a moment for a new run's to start. 400 as the
    /// kubelet answers for a container that has not started, or a run whose process ended
    /// with an earlier server.
    pub async fn process(
        &self,
        namespace: &str,
        name: &str,
    ) -> extension_apiserver::Result<Arc<Process>> {
        let key = (namespace.to_string(), name.to_string());
        let mut started = self.shared.started.subscribe();
        let deadline = tokio::time::Instant::now() + START_WAIT;
        loop {
            started.borrow_and_update();
            match self.table().get(&key) {
                Some(Entry::Started { process, .. }) => return Ok(process.clone()),
                Some(Entry::CancelledBeforeStart) => {
                    return Err(Error::bad_request(format!(
                        "run {name} was cancelled before its process started"
                    )));
                }
                None => {}
            }
            let run = self.get(namespace, name).await?;
            let phase = run.status.map(|s| s.phase).unwrap_or_default();
            if phase != RunPhase::Pending {
                return Err(Error::bad_request(format!(
                    "run {name} is {phase:?} and its process is gone (the server restarted)"
                )));
            }
            let waited = tokio::time::timeout_at(deadline, started.changed()).await;
            if !matches!(waited, Ok(Ok(()))) {
                return Err(Error::bad_request(format!(
                    "container \"{}\" in run \"{name}\" is waiting to start",
                    crate::log::CONTAINER
                )));
            }
        }
    }

    /// Run `name`, or 404.
    pub async fn get(&self, namespace: &str, name: &str) -> extension_apiserver::Result<Run> {
        let reader = self.store().reader();
        reader
            .get(Some(namespace), name)
            .await?
            .ok_or_else(|| Error::not_found(&Run::INFO, name))
    }

    /// Ends run `name`'s process and answers the run, phase `Cancelled`; a run that is not
    /// started yet never starts. 409 for a run that has already finished otherwise.
    pub async fn cancel(&self, namespace: &str, name: &str) -> extension_apiserver::Result<Run> {
        let run = self.get(namespace, name).await?;
        let key = (namespace.to_string(), name.to_string());
        let phase = run.status.as_ref().map(|s| s.phase).unwrap_or_default();
        let entry = {
            let mut table = self.table();
            let entry = table.get(&key).cloned();
            if entry.is_none() && !phase.is_finished() {
                table.insert(key.clone(), Entry::CancelledBeforeStart);
            }
            entry
        };
        match entry {
            Some(Entry::CancelledBeforeStart) => Ok(run),
            Some(Entry::Started {
                process,
                mut recorded,
            }) => {
                let exited = *process.exit().borrow();
                if let Some(exit) = exited.filter(|exit| !exit.cancelled) {
                    return Err(already_finished(name, exit.code));
                }
                process.kill(true);
                let _ = recorded.wait_for(|done| *done).await;
                self.get(namespace, name).await
            }
            None if phase == RunPhase::Cancelled => Ok(run),
            None if phase.is_finished() => Err(already_finished(name, exit_code(&run))),
            None => {
                let status = RunStatus {
                    phase: RunPhase::Cancelled,
                    message: Some("cancelled before its process started".into()),
                    completion_time: Some(Time(Timestamp::now())),
                    ..RunStatus::default()
                };
                self.write_status(&key, status).await
            }
        }
    }

    /// What run `name` wrote, and for how long it ran.
    pub async fn summary(
        &self,
        namespace: &str,
        name: &str,
    ) -> extension_apiserver::Result<RunSummary> {
        let run = self.get(namespace, name).await?;
        let process = match self.table().get(&(namespace.to_string(), name.to_string())) {
            Some(Entry::Started { process, .. }) => Some(process.clone()),
            _ => None,
        };
        let (stdout, stderr) = process
            .as_ref()
            .map(|p| p.output.totals())
            .unwrap_or_default();
        let status = run.status.unwrap_or_default();
        // The process's own clock when it ran here (the status keeps whole seconds).
        let duration = match &process {
            Some(p) => Some(p.ran().as_secs_f64()),
            None => status.start_time.as_ref().map(|start| {
                let end = status
                    .completion_time
                    .as_ref()
                    .map_or_else(Timestamp::now, |t| t.0);
                end.duration_since(start.0).as_secs_f64()
            }),
        };
        Ok(RunSummary {
            metadata: ObjectMeta {
                name: run.metadata.name,
                namespace: run.metadata.namespace,
                creation_timestamp: run.metadata.creation_timestamp,
                ..ObjectMeta::default()
            },
            phase: status.phase,
            stdout,
            stderr,
            duration_seconds: duration,
            exit_code: status.exit_code,
        })
    }

    async fn write_status(&self, key: &Key, status: RunStatus) -> extension_apiserver::Result<Run> {
        let (_, storage) = self.shared.store.get().expect("runs are followed");
        let updater = storage
            .updater
            .as_ref()
            .expect("the status subresource updates");
        let name = key.1.clone();
        let status = serde_json::to_value(&status).map_err(Error::internal)?;
        let update = Arc::new(move |current: Option<&Value>| {
            let mut run = current
                .cloned()
                .ok_or_else(|| Error::not_found(&Run::INFO, &name))?;
            run["status"] = status.clone();
            Ok(run)
        });
        let ctx = RequestContext::namespaced(&key.0);
        let (run, _) = updater
            .update(&ctx, &key.1, update, &WriteOptions::default())
            .await?;
        serde_json::from_value(run).map_err(Error::internal)
    }

    fn store(&self) -> &Store<Run> {
        &self
            .shared
            .store
            .get()
            .expect("runs are followed once the server has started")
            .0
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.shared
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn key_of(run: &Run) -> Key {
    let meta = &run.metadata;
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn finished(running: RunStatus, exit: Exit) -> RunStatus {
    let phase = match (exit.cancelled, exit.code) {
        (true, _) => RunPhase::Cancelled,
        (false, 0) => RunPhase::Succeeded,
        (false, _) => RunPhase::Failed,
    };
    RunStatus {
        phase,
        exit_code: Some(exit.code),
        completion_time: Some(Time(exit.time)),
        message: exit.cancelled.then(|| "cancelled".to_string()),
        ..running
    }
}

fn exit_code(run: &Run) -> i32 {
    run.status.as_ref().and_then(|s| s.exit_code).unwrap_or(-1)
}

fn already_finished(name: &str, code: i32) -> Error {
    let why = format!("the run has already finished (exit code {code})");
    Error::conflict_because(&Run::INFO, name, &why)
}
