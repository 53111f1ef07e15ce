//! One backend call shared by every caller waiting for its result: a read of the current
//! revision, or a round of progress requests.
//!
//! A consistent read needs a revision read *after* it started (so that it sees every write
//! that finished before). Callers that arrive while a read is on its way wait for the next
//! one, which starts as soon as the current one ends and serves all of them: under load a
//! remote backend (etcd) answers one request per round instead of one per caller. The etcd3
//! backend shares its progress requests the same way: a round of sends that began after a
//! caller asked serves it as a read that began after it would.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use super::backend::StorageError;

/// The last result and the callers it serves: every ticket up to `covers`.
type Done<T> = (u64, Option<Result<T, StorageError>>);

/// Calls of one kind shared by the callers waiting (see the module's doc): each gets the
/// result of a call that began after it asked. `T` is what a call yields: a revision for
/// the reads of it, `()` for rounds of progress requests.
#[derive(Debug)]
pub(crate) struct SharedRounds<T> {
    /// Tickets given out, and whether a read task is running.
    state: Mutex<(u64, bool)>,
    done: watch::Sender<Done<T>>,
}

impl<T> Default for SharedRounds<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new((0, false)),
            done: watch::Sender::new((0, None)),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> SharedRounds<T> {
    /// What `fetch` yielded in a call that began after this one, shared with concurrent
    /// callers.
    /// `fetch` runs in a task of its own, so a caller that goes away stops no one else.
    pub(crate) async fn read<F, Fut>(self: &Arc<Self>, fetch: F) -> Result<T, StorageError>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send + 'static,
    {
        let mut done = self.done.subscribe();
        let (ticket, start) = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.0 += 1;
            let start = !state.1;
            state.1 = true;
            (state.0, start)
        };
        if start {
            tokio::spawn(Arc::clone(self).run(fetch));
        }
        let result = done
            .wait_for(|(covers, _)| *covers >= ticket)
            .await
            .map_err(|_| StorageError::Internal("shared calls ended".into()))?;
        result
            .1
            .clone()
            .unwrap_or_else(|| Err(StorageError::Internal("no shared call".into())))
    }

    /// Reads until every ticket given out has a result.
    async fn run<F, Fut>(self: Arc<Self>, fetch: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StorageError>>,
    {
        // Should `fetch` panic, the waiters get an error and the next caller a new task.
        let guard = Running(&self);
        loop {
            let covers = self.lock().0;
            let result = fetch().await;
            self.done.send_replace((covers, Some(result)));
            let mut state = self.lock();
            if state.0 == covers {
                state.1 = false;
                std::mem::forget(guard);
                return;
            }
        }
    }
}

impl<T> SharedRounds<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, bool)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ends a task of calls that did not finish normally: every ticket given out gets an error.
struct Running<'a, T>(&'a SharedRounds<T>);

impl<T> Drop for Running<'_, T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.1 = false;
        let failed = Err(StorageError::Internal("the shared call failed".into()));
        self.0.done.send_replace((state.0, Some(failed)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    /// Each caller gets a value read after it called; concurrent callers share reads.
    #[tokio::test]
    async fn callers_share_reads_that_began_after_them() {
        let reads = Arc::new(SharedRounds::default());
        let revision = Arc::new(AtomicI64::new(0));
        let fetches = Arc::new(AtomicI64::new(0));
        let fetch = {
            let (revision, fetches) = (revision.clone(), fetches.clone());
            move || {
                let (revision, fetches) = (revision.clone(), fetches.clone());
                async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    let seen = revision.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(seen)
                }
            }
        };
        let mut callers = tokio::task::JoinSet::new();
        for i in 1..=50 {
            // A write finishes, then a reader starts: it must see at least that write.
            revision.store(i, Ordering::SeqCst);
            let (reads, fetch) = (reads.clone(), fetch.clone());
            callers.spawn(async move { (i, reads.read(fetch).await.unwrap()) });
            tokio::task::yield_now().await;
        }
        while let Some(done) = callers.join_next().await {
            let (written, read) = done.unwrap();
            assert!(read >= written, "a read began before the write it must see");
        }
        assert!(fetches.load(Ordering::SeqCst) < 50, "reads were shared");
    }

    #[tokio::test]
    async fn a_read_that_panics_fails_its_callers_and_the_next_read_works() {
        let reads = Arc::new(SharedRounds::default());
        let panicking = || async { panic!("fetch panicked") };
        assert!(reads.read(panicking).await.is_err());
        assert_eq!(reads.read(|| async { Ok(3) }).await, Ok(3));
    }

    #[tokio::test]
    async fn errors_reach_the_callers_they_cover() {
        let reads = Arc::new(SharedRounds::default());
        let failing = || async { Err(StorageError::Unavailable("down".into())) };
        assert!(reads.read(failing).await.is_err());
        assert_eq!(reads.read(|| async { Ok(7) }).await, Ok(7));
    }
}
