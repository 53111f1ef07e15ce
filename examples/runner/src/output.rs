//! A run's output: what its process writes to stdout and stderr, kept twice. As lines with the
//! time each was read, the last `--log-buffer-bytes` of them, for `log` (the kubelet keeps a
//! container's log as timestamped lines in a file it rotates); and as chunks, live, for
//! `attach`, which sees only what is written while it is attached.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use jiff::Timestamp;
use tokio::sync::{broadcast, watch};

use crate::types::StreamSummary;

/// The longest line kept whole; a longer one is kept in pieces of this size, as the CRI's
/// log writers split lines at 16 KiB.
pub const MAX_LINE: usize = 16 * 1024;

/// How many live chunks an attached client may fall behind before it misses some.
const LIVE_CHUNKS: usize = 256;

/// One of the process's output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    fn index(self) -> usize {
        self as usize
    }
}

/// A line of the log (with its newline, unless it was the last, unfinished one).
#[derive(Clone, Debug)]
pub struct Line {
    /// Its place in the output: each line's is one more than the one before.
    pub seq: u64,
    /// When it was read.
    pub time: Timestamp,
    /// Which stream it was written to.
    pub stream: Stream,
    /// Its bytes.
    pub text: Bytes,
}

/// A run's output, shared by the readers of its process and the clients reading it.
#[derive(Clone)]
pub struct Output {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Bumped at each appended line and at the end: what followers wait on.
    appended: watch::Sender<u64>,
    live: broadcast::Sender<(Stream, Bytes)>,
}

struct State {
    lines: VecDeque<Line>,
    /// Bytes of `lines`.
    kept: usize,
    limit: usize,
    next_seq: u64,
    /// The unfinished line of each stream.
    partial: [Vec<u8>; 2],
    totals: [StreamSummary; 2],
    closed: bool,
}

/// What a reader gets of the log from a given line on.
#[derive(Debug)]
pub struct Read {
    /// The lines kept from the asked one on (earlier ones may be gone).
    pub lines: Vec<Line>,
    /// Where the next read starts.
    pub next: u64,
    /// Whether the output is complete: no line will follow.
    pub closed: bool,
}

impl Output {
    /// An empty output keeping the last `limit` bytes of lines.
    pub fn new(limit: usize) -> Self {
        let (appended, _) = watch::channel(0);
        let (live, _) = broadcast::channel(LIVE_CHUNKS);
        let state = State {
            lines: VecDeque::new(),
            kept: 0,
            limit,
            next_seq: 0,
            partial: [Vec::new(), Vec::new()],
            totals: [StreamSummary::default(); 2],
            closed: false,
        };
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                appended,
                live,
            }),
        }
    }

    /// Takes what the process wrote to `stream`.
    pub fn write(&self, stream: Stream, chunk: Bytes) {
        let _ = self.inner.live.send((stream, chunk.clone()));
        let now = Timestamp::now();
        let mut state = self.state();
        let total = &mut state.totals[stream.index()];
        total.bytes += chunk.len() as u64;
        total.lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let partial = &mut state.partial[stream.index()];
            let room = MAX_LINE - partial.len();
            let end = match rest.iter().take(room).position(|&b| b == b'\n') {
                Some(newline) => newline + 1,
                None => rest.len().min(room),
            };
            partial.extend_from_slice(&rest[..end]);
            rest = &rest[end..];
            if partial.ends_with(b"\n") || partial.len() == MAX_LINE {
                let text = Bytes::from(std::mem::take(partial));
                state.push(now, stream, text);
            }
        }
        drop(state);
        self.notify();
    }

    /// The process has exited and both streams are read: an unfinished line is a line.
    pub fn close(&self) {
        let now = Timestamp::now();
        let mut state = self.state();
        for stream in [Stream::Stdout, Stream::Stderr] {
            let partial = std::mem::take(&mut state.partial[stream.index()]);
            if !partial.is_empty() {
                state.totals[stream.index()].lines += 1;
                state.push(now, stream, partial.into());
            }
        }
        state.closed = true;
        drop(state);
        self.notify();
    }

    /// The lines kept from line `from` on.
    pub fn read_from(&self, from: u64) -> Read {
        let state = self.state();
        let lines = state
            .lines
            .iter()
            .filter(|line| line.seq >= from)
            .cloned()
            .collect();
        Read {
            lines,
            next: state.next_seq.max(from),
            closed: state.closed,
        }
    }

    /// What was written to stdout and stderr, from the start.
    pub fn totals(&self) -> (StreamSummary, StreamSummary) {
        let state = self.state();
        (state.totals[0], state.totals[1])
    }

    /// Waits for lines after `seen` were appended (returns at once if they were).
    pub fn appended(&self) -> watch::Receiver<u64> {
        self.inner.appended.subscribe()
    }

    /// What the process writes from now on, as it writes it.
    pub fn live(&self) -> broadcast::Receiver<(Stream, Bytes)> {
        self.inner.live.subscribe()
    }

    /// How many readers wait for its lines (a `log?follow=true` each): none left once their
    /// clients went away.
    pub fn followers(&self) -> usize {
        self.inner.appended.receiver_count()
    }

    /// How many clients are attached to it.
    pub fn attached(&self) -> usize {
        self.inner.live.receiver_count()
    }

    fn notify(&self) {
        self.inner.appended.send_modify(|n| *n += 1);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    fn push(&mut self, time: Timestamp, stream: Stream, text: Bytes) {
        self.kept += text.len();
        self.lines.push_back(Line {
            seq: self.next_seq,
            time,
            stream,
            text,
        });
        self.next_seq += 1;
        while self.kept > self.limit {
            match self.lines.pop_front() {
                Some(old) => self.kept -= old.text.len(),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(read: &Read) -> Vec<&[u8]> {
        read.lines.iter().map(|l| &l.text[..]).collect()
    }

    #[test]
    fn lines_across_chunks_and_the_last_unfinished_one() {
        let output = Output::new(1024);
        output.write(Stream::Stdout, Bytes::from_static(b"a\nb"));
        output.write(Stream::Stderr, Bytes::from_static(b"oops\n"));
        output.write(Stream::Stdout, Bytes::from_static(b"c\nd"));
        let read = output.read_from(0);
        assert_eq!(texts(&read), [&b"a\n"[..], b"oops\n", b"bc\n"]);
        assert!(!read.closed);
        output.close();
        let read = output.read_from(read.next);
        assert_eq!(texts(&read), [&b"d"[..]]);
        assert!(read.closed);
        let (out, err) = output.totals();
        assert_eq!((out.lines, out.bytes, err.lines, err.bytes), (3, 6, 1, 5));
    }

    #[test]
    fn only_the_last_bytes_are_kept_but_totals_count_everything() {
        let output = Output::new(10);
        for i in 0..10 {
            output.write(Stream::Stdout, Bytes::from(format!("{i}\n")));
        }
        let read = output.read_from(0);
        assert_eq!(read.lines.len(), 5);
        assert_eq!(read.lines[0].seq, 5);
        assert_eq!(output.totals().0.lines, 10);
    }

    #[test]
    fn a_long_line_is_kept_in_pieces() {
        let output = Output::new(1 << 20);
        output.write(Stream::Stdout, Bytes::from(vec![b'x'; MAX_LINE + 1]));
        output.close();
        let read = output.read_from(0);
        let sizes: Vec<usize> = read.lines.iter().map(|l| l.text.len()).collect();
        assert_eq!(sizes, [MAX_LINE, 1]);
        assert_eq!(output.totals().0.lines, 1);
    }
}
