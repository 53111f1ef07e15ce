//! A run's process on the server's host: started with its stdout and stderr read into its
//! [`Output`], its stdin fed by `attach`, ended by `cancel`, by the deletion of its run or by
//! the server's shutdown.

use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jiff::Timestamp;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex, Notify, watch};

use crate::output::{Output, Stream};

/// How long the output of an exited process is still read: a child it left behind may hold
/// its pipes open.
const DRAIN: Duration = Duration::from_secs(1);

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code, 128 + the signal's number when a signal ended it (as a shell and the
    /// kubelet report it).
    pub code: i32,
    /// When it ended.
    pub time: Timestamp,
    /// How long it ran, on the monotonic clock (a step of the wall clock does not change it).
    pub ran: Duration,
    /// Whether `cancel` ended it.
    pub cancelled: bool,
}

/// A started process.
pub struct Process {
    /// What it writes.
    pub output: Output,
    /// When it started.
    pub started: Timestamp,
    stdin: Mutex<Option<ChildStdin>>,
    kill: Notify,
    cancelled: SyncMutex<bool>,
    exit: watch::Sender<Option<Exit>>,
    /// When it started, on the monotonic clock.
    began: Instant,
}

impl Process {
    /// Starts `command` (program and arguments), with a stdin of its own when `stdin`; its
    /// output kept in an [`Output`] of `log_bytes`. The process is killed when the returned
    /// handle's [`wait`](Self::wait) future is dropped or on [`kill`](Self::kill).
    pub fn start(
        command: &[String],
        stdin: bool,
        log_bytes: usize,
    ) -> std::io::Result<(Arc<Self>, Child)> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("no program"))?;
        let began = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (exit, _) = watch::channel(None);
        let process = Arc::new(Self {
            output: Output::new(log_bytes),
            started: Timestamp::now(),
            stdin: Mutex::new(child.stdin.take()),
            kill: Notify::new(),
            cancelled: SyncMutex::new(false),
            exit,
            began,
        });
        Ok((process, child))
    }

    /// Reads its output, waits for it to end (or kills it when asked), and records how it
    /// ended. The caller runs it to the end; dropping it kills the process.
    pub async fn wait(&self, mut child: Child) -> Exit {
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let reading = async {
            tokio::join!(
                self.read(Stream::Stdout, stdout),
                self.read(Stream::Stderr, stderr)
            )
        };
        tokio::pin!(reading);
        let waiting = async {
            tokio::select! {
                status = child.wait() => status,
                _ = self.kill.notified() => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            }
        };
        tokio::pin!(waiting);
        // Output is read while the process runs (a full pipe would stop it).
        let mut read_all = false;
        let status = loop {
            tokio::select! {
                status = &mut waiting => break status,
                _ = &mut reading, if !read_all => read_all = true,
            }
        };
        if !read_all {
            let _ = tokio::time::timeout(DRAIN, &mut reading).await;
        }
        self.output.close();
        let exit = Exit {
            code: status.map(exit_code).unwrap_or(-1),
            time: Timestamp::now(),
            ran: self.began.elapsed(),
            cancelled: *self
                .cancelled
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        };
        self.stdin.lock().await.take();
        self.exit.send_replace(Some(exit));
        exit
    }

    async fn read(&self, stream: Stream, from: Option<impl AsyncRead + Unpin>) {
        let Some(mut from) = from else { return };
        let mut buf = vec![0; 8192];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            self.output.write(stream, Bytes::copy_from_slice(&buf[..n]));
        }
    }

    /// Ends the process (SIGKILL); `cancelled` when `cancel` asked.
    pub fn kill(&self, cancelled: bool) {
        if cancelled {
            *self
                .cancelled
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = true;
        }
        self.kill.notify_one();
    }

    /// How it ended, once it has.
    pub fn exit(&self) -> watch::Receiver<Option<Exit>> {
        self.exit.subscribe()
    }

    /// How long it ran, or has run so far, on the monotonic clock.
    pub fn ran(&self) -> Duration {
        self.exit
            .borrow()
            .map_or_else(|| self.began.elapsed(), |exit| exit.ran)
    }

    /// Whether it has a stdin (its run's `spec.stdin`) still open.
    pub async fn has_stdin(&self) -> bool {
        self.stdin.lock().await.is_some()
    }

    /// Writes to its stdin; false when it has none (any more).
    pub async fn write_stdin(&self, data: &[u8]) -> bool {
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return false;
        };
        if pipe.write_all(data).await.is_err() || pipe.flush().await.is_err() {
            stdin.take();
            return false;
        }
        true
    }

    /// Closes its stdin: the process reads an end of file.
    pub async fn close_stdin(&self) {
        self.stdin.lock().await.take();
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[tokio::test]
    async fn output_and_exit_code() {
        let sh = command(&["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]);
        let (process, child) = Process::start(&sh, false, 1024).unwrap();
        let exit = process.wait(child).await;
        assert_eq!((exit.code, exit.cancelled), (3, false));
        let (out, err) = process.output.totals();
        assert_eq!((out.lines, err.lines), (1, 1));
        assert!(process.output.read_from(0).closed);
    }

    #[tokio::test]
    async fn output_is_read_while_the_process_runs() {
        let sh = command(&["/bin/sh", "-c", "echo first; sleep 30"]);
        let (process, child) = Process::start(&sh, false, 1024).unwrap();
        let waiting = tokio::spawn({
            let process = process.clone();
            async move { process.wait(child).await }
        });
        let mut appended = process.output.appended();
        while process.output.read_from(0).lines.is_empty() {
            appended.changed().await.unwrap();
        }
        process.kill(false);
        assert_eq!(waiting.await.unwrap().code, 128 + 9);
    }

    #[tokio::test]
    async fn stdin_and_kill() {
        let (cat, child) = Process::start(&command(&["/bin/cat"]), true, 1024).unwrap();
        let waiting = tokio::spawn({
            let cat = cat.clone();
            async move { cat.wait(child).await }
        });
        assert!(cat.write_stdin(b"hi\n").await);
        cat.close_stdin().await;
        assert_eq!(waiting.await.unwrap().code, 0);
        assert_eq!(&cat.output.read_from(0).lines[0].text[..], b"hi\n");

        let (sleep, child) = Process::start(&command(&["/bin/sleep", "30"]), false, 1024).unwrap();
        sleep.kill(true);
        let exit = sleep.wait(child).await;
        assert_eq!((exit.code, exit.cancelled), (128 + 9, true));
    }
}
