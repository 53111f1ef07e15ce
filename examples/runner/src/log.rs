//! The `log` subresource's reading of a run's [`Output`], as the kubelet reads a container's
//! log for `pods/log` (pkg/kubelet/kuberuntime/logs/logs.go): `sinceSeconds` first, then the
//! last `tailLines`, each line prefixed with its RFC 3339 time under `timestamps`, everything
//! cut at `limitBytes` (even within a line), and under `follow` the lines written later, until
//! the process has exited and its output is read.

use bytes::{Bytes, BytesMut};
use futures::Stream;
use jiff::{SignedDuration, Timestamp};

use crate::output::{Line, Output};

/// The default (and only) container of a run, as `container=` may name it.
pub const CONTAINER: &str = "run";

/// What to read of a log: `PodLogOptions`' fields that apply to a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogRead {
    /// Keep streaming what is written.
    pub follow: bool,
    /// Only the last lines.
    pub tail_lines: Option<u64>,
    /// Only the lines of the last seconds.
    pub since_seconds: Option<u64>,
    /// Only the lines read at or after this time.
    pub since_time: Option<Timestamp>,
    /// Each line prefixed with its time.
    pub timestamps: bool,
    /// At most these bytes in all.
    pub limit_bytes: Option<u64>,
}

impl LogRead {
    /// The lines `read` selects of `lines`, in order.
    fn select<'a>(&self, lines: &'a [Line], now: Timestamp) -> &'a [Line] {
        // Further back than the clock reaches is everything (kube reads it so); never an
        // overflow of the arithmetic.
        let since = self
            .since_seconds
            .map(|s| {
                i64::try_from(s)
                    .ok()
                    .and_then(|s| now.checked_sub(SignedDuration::from_secs(s)).ok())
                    .unwrap_or(Timestamp::MIN)
            })
            .or(self.since_time);
        let start = match since {
            Some(since) => lines.partition_point(|line| line.time < since),
            None => 0,
        };
        let lines = &lines[start..];
        match self.tail_lines {
            Some(n) => &lines[lines.len().saturating_sub(n as usize)..],
            None => lines,
        }
    }

    fn render(&self, line: &Line, out: &mut BytesMut) {
        if self.timestamps {
            out.extend_from_slice(rfc3339_nano(line.time).as_bytes());
            out.extend_from_slice(b" ");
        }
        out.extend_from_slice(&line.text);
    }
}

/// Go's `time.RFC3339Nano` in UTC: nanoseconds without trailing zeros.
pub fn rfc3339_nano(time: Timestamp) -> String {
    let seconds = time.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = time.subsec_nanosecond();
    if nanos == 0 {
        return format!("{seconds}Z");
    }
    let fraction = format!("{nanos:09}");
    format!("{seconds}.{}Z", fraction.trim_end_matches('0'))
}

/// The log of `output` as `read` asks, chunk by chunk: what is kept now at once, then under
/// `follow` each batch of lines as it is written. Ends when the output is complete, or at
/// `limitBytes`.
pub fn stream(output: Output, read: LogRead) -> impl Stream<Item = Bytes> + Send + 'static {
    let state = Reading {
        appended: output.appended(),
        output,
        read,
        next: None,
        sent: 0,
        done: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        let chunk = state.next_chunk().await?;
        Some((chunk, state))
    })
}

struct Reading {
    output: Output,
    appended: tokio::sync::watch::Receiver<u64>,
    read: LogRead,
    /// The next line to send; `None` before the first read.
    next: Option<u64>,
    sent: u64,
    done: bool,
}

impl Reading {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            self.appended.borrow_and_update();
            let first = self.next.is_none();
            let got = self.output.read_from(self.next.unwrap_or(0));
            self.next = Some(got.next);
            let lines = match first {
                true => self.read.select(&got.lines, Timestamp::now()),
                false => &got.lines[..],
            };
            let mut out = BytesMut::new();
            for line in lines {
                self.read.render(line, &mut out);
            }
            if let Some(limit) = self.read.limit_bytes {
                let room = limit.saturating_sub(self.sent) as usize;
                if out.len() >= room {
                    out.truncate(room);
                    self.done = true;
                }
            }
            if got.closed || !self.read.follow {
                self.done = true;
            }
            self.sent += out.len() as u64;
            if !out.is_empty() {
                return Some(out.freeze());
            }
            if !self.done && self.appended.changed().await.is_err() {
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Stream as Std;
    use futures::StreamExt;

    async fn all(output: &Output, read: LogRead) -> String {
        let chunks: Vec<Bytes> = stream(output.clone(), read).collect().await;
        String::from_utf8(chunks.concat()).unwrap()
    }

    fn written(text: &str) -> Output {
        let output = Output::new(1 << 20);
        output.write(Std::Stdout, Bytes::from(text.to_string()));
        output
    }

    #[tokio::test]
    async fn tail_limit_and_timestamps() {
        let output = written("1\n2\n3\n4\n");
        let tail = LogRead {
            tail_lines: Some(2),
            ..LogRead::default()
        };
        assert_eq!(all(&output, tail).await, "3\n4\n");
        let zero = LogRead {
            tail_lines: Some(0),
            ..LogRead::default()
        };
        assert_eq!(all(&output, zero).await, "");
        let limit = LogRead {
            limit_bytes: Some(3),
            ..LogRead::default()
        };
        assert_eq!(all(&output, limit).await, "1\n2");
        let stamped = LogRead {
            timestamps: true,
            tail_lines: Some(1),
            ..LogRead::default()
        };
        let line = all(&output, stamped).await;
        let (time, text) = line.split_once(' ').unwrap();
        assert!(
            time.ends_with('Z') && time.parse::<Timestamp>().is_ok(),
            "{line}"
        );
        assert_eq!(text, "4\n");
    }

    /// A `sinceSeconds` reaching back past the earliest time there is selects everything, as
    /// kube reads it, instead of overflowing the clock's arithmetic.
    #[tokio::test]
    async fn a_huge_since_seconds_selects_everything() {
        let output = written("1\n2\n");
        for seconds in [i64::MAX as u64, u64::MAX, 1 << 40] {
            let since = LogRead {
                since_seconds: Some(seconds),
                ..LogRead::default()
            };
            assert_eq!(all(&output, since).await, "1\n2\n", "{seconds}");
        }
    }

    #[tokio::test]
    async fn follow_ends_when_the_output_is_complete() {
        let output = written("a\n");
        let follow = LogRead {
            follow: true,
            ..LogRead::default()
        };
        let mut chunks = Box::pin(stream(output.clone(), follow));
        assert_eq!(chunks.next().await.unwrap(), "a\n");
        output.write(Std::Stdout, Bytes::from_static(b"b\n"));
        assert_eq!(chunks.next().await.unwrap(), "b\n");
        output.close();
        assert!(chunks.next().await.is_none());
    }

    #[test]
    fn go_nanosecond_times() {
        let time: Timestamp = "2026-01-02T03:04:05.120Z".parse().unwrap();
        assert_eq!(rfc3339_nano(time), "2026-01-02T03:04:05.12Z");
        let whole: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(rfc3339_nano(whole), "2026-01-02T03:04:05Z");
    }
}
