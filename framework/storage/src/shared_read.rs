//! One backend call shared by every caller waiting for its result: a read of the current
//! revision, or a round of progress requests.
//!
//! A consistent read needs a revision read *after* it started (so that it sees every write
//! that finished before). A caller that arrives while fewer calls than the bound are on their
//! way begins one at once; past the bound it waits for the next call, begun as one ends, which
//! serves every caller that arrived meanwhile: under load a remote backend (etcd) answers one
//! request per round instead of one per caller. With a bound of one, a caller that arrives
//! while a call is on its way waits for the rest of it and then a whole one; a higher bound
//! shortens that wait for more calls. The etcd3 backend shares its progress requests the same
//! way: a round of sends that began after a caller asked serves it as a read that began after
//! it would.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::backend::StorageError;

/// Calls of one kind shared by the callers waiting (see the module's doc): each gets the
/// result of a call that began after it asked. `T` is what a call yields: a revision for
/// the reads of it, `()` for rounds of progress requests.
#[derive(Debug)]
pub(crate) struct SharedRounds<T> {
    /// How many calls may be on their way at once.
    overlap: usize,
    state: Mutex<State<T>>,
}

/// Callers are numbered (their tickets) in the order they ask; a call covers every ticket
/// given out before it began, and the first call to end that covers a ticket serves it.
#[derive(Debug)]
struct State<T> {
    /// Tickets given out.
    issued: u64,
    /// The last ticket covered by a call begun.
    begun: u64,
    /// Calls on their way.
    in_flight: usize,
    /// The callers not served yet, in the order of their tickets.
    waiting: VecDeque<(u64, oneshot::Sender<Result<T, StorageError>>)>,
}

impl<T> SharedRounds<T> {
    /// Calls shared with at most `overlap` (at least one) on their way at once.
    pub(crate) fn new(overlap: usize) -> Self {
        Self {
            overlap: overlap.max(1),
            state: Mutex::new(State {
                issued: 0,
                begun: 0,
                in_flight: 0,
                waiting: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Clone + Send + 'static> SharedRounds<T> {
    /// What `fetch` yielded in a call that began after this one, shared with concurrent
    /// callers.
    /// `fetch` runs in a task of its own, so a caller that goes away stops no one else.
    pub(crate) async fn read<F, Fut>(self: &Arc<Self>, fetch: F) -> Result<T, StorageError>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send + 'static,
    {
        let (served, result) = oneshot::channel();
        let begin = {
            let mut state = self.lock();
            state.issued += 1;
            let ticket = state.issued;
            state.waiting.push_back((ticket, served));
            let begin = state.in_flight < self.overlap;
            if begin {
                state.in_flight += 1;
                state.begun = ticket;
            }
            begin.then_some(ticket)
        };
        if let Some(covers) = begin {
            tokio::spawn(Arc::clone(self).run(fetch, covers));
        }
        result
            .await
            .unwrap_or_else(|_| Err(StorageError::Internal("shared calls ended".into())))
    }

    /// [`read`](Self::read) with `fetch` given a clone of `subject` (the backend, or its
    /// connections) for each call.
    pub(crate) async fn read_from<S, F, Fut>(
        self: &Arc<Self>,
        subject: &S,
        fetch: F,
    ) -> Result<T, StorageError>
    where
        S: Clone + Send + Sync + 'static,
        F: Fn(S) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send + 'static,
    {
        let subject = subject.clone();
        self.read(move || fetch(subject.clone())).await
    }

    /// Calls `fetch` for the tickets up to `covers`, then again for those given out
    /// meanwhile that no call on its way covers, until there are none.
    async fn run<F, Fut>(self: Arc<Self>, fetch: F, mut covers: u64)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StorageError>>,
    {
        // Should `fetch` panic, the waiters get an error and the next caller a new call.
        let guard = Running(&self);
        loop {
            let result = fetch().await;
            let mut state = self.lock();
            let served = state.served_up_to(covers);
            let next = (state.issued > state.begun).then_some(state.issued);
            match next {
                Some(issued) => state.begun = issued,
                None => state.in_flight -= 1,
            }
            drop(state);
            serve(served, &result);
            match next {
                Some(issued) => covers = issued,
                None => break,
            }
        }
        std::mem::forget(guard);
    }
}

impl<T> State<T> {
    /// The callers waiting whose tickets are up to `covers`: a call that ends after a later
    /// one finds those served already, and serves no ticket it does not cover.
    fn served_up_to(&mut self, covers: u64) -> Vec<oneshot::Sender<Result<T, StorageError>>> {
        let up_to = self
            .waiting
            .partition_point(|(ticket, _)| *ticket <= covers);
        self.waiting
            .drain(..up_to)
            .map(|(_, sender)| sender)
            .collect()
    }
}

fn serve<T: Clone>(
    served: Vec<oneshot::Sender<Result<T, StorageError>>>,
    result: &Result<T, StorageError>,
) {
    for sender in served {
        // A caller that went away needs nothing.
        let _ = sender.send(result.clone());
    }
}

/// Ends a call that did not finish normally (its `fetch` panicked): every caller waiting
/// gets an error, as no call begun after them may be coming, and the next caller begins a
/// new call.
struct Running<'a, T: Clone>(&'a SharedRounds<T>);

impl<T: Clone> Drop for Running<'_, T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight -= 1;
        state.begun = state.issued;
        let issued = state.issued;
        let served = state.served_up_to(issued);
        drop(state);
        serve(
            served,
            &Err(StorageError::Internal("the shared call failed".into())),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    /// Each caller gets a value read after it called; concurrent callers share reads, with
    /// one read on its way at a time or several.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_share_reads_that_began_after_them() {
        for overlap in 1..=3 {
            callers_share_reads_with(overlap).await;
        }
    }

    async fn callers_share_reads_with(overlap: usize) {
        let reads = Arc::new(SharedRounds::new(overlap));
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
        let reads = Arc::new(SharedRounds::new(1));
        let panicking = || async { panic!("fetch panicked") };
        assert!(reads.read(panicking).await.is_err());
        assert_eq!(reads.read(|| async { Ok(3) }).await, Ok(3));
    }

    #[tokio::test]
    async fn errors_reach_the_callers_they_cover() {
        let reads = Arc::new(SharedRounds::new(1));
        let failing = || async { Err(StorageError::Unavailable("down".into())) };
        assert!(reads.read(failing).await.is_err());
        assert_eq!(reads.read(|| async { Ok(7) }).await, Ok(7));
    }

    /// What ends a fetch with a value.
    type Ended = oneshot::Sender<Result<i64, StorageError>>;

    /// Fetches that the test ends one by one, in the order it chooses: each call hands the
    /// test the sender that ends it with a value.
    fn held() -> (
        impl Fn() -> futures_like::Held + Send + Clone + 'static,
        tokio::sync::mpsc::UnboundedReceiver<Ended>,
    ) {
        let (calls, begun) = tokio::sync::mpsc::unbounded_channel();
        let fetch = move || {
            let (end, ended) = oneshot::channel();
            calls.send(end).unwrap();
            futures_like::Held(ended)
        };
        (fetch, begun)
    }

    mod futures_like {
        use super::*;
        use std::pin::Pin;
        use std::task::{Context, Poll};

        /// A fetch's future: what the test sends it, or a panic if the test dropped it.
        pub(super) struct Held(pub(super) oneshot::Receiver<Result<i64, StorageError>>);

        impl Future for Held {
            type Output = Result<i64, StorageError>;

            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                Pin::new(&mut self.0)
                    .poll(cx)
                    .map(|ended| ended.expect("the test ends every fetch"))
            }
        }
    }

    /// Spawns a caller and lets it take its ticket.
    async fn caller(
        reads: &Arc<SharedRounds<i64>>,
        fetch: impl Fn() -> futures_like::Held + Send + Clone + 'static,
    ) -> Caller {
        let (reads, fetch) = (reads.clone(), fetch.clone());
        let handle = tokio::spawn(async move { reads.read(fetch).await });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        handle
    }

    type Caller = tokio::task::JoinHandle<Result<i64, StorageError>>;

    /// Reads with two on their way at most, and three callers: the first two began a read
    /// each, the third waits.
    async fn three_callers_two_reads() -> (
        Arc<SharedRounds<i64>>,
        impl Fn() -> futures_like::Held + Send + Clone + 'static,
        tokio::sync::mpsc::UnboundedReceiver<Ended>,
        [Caller; 3],
    ) {
        let reads = Arc::new(SharedRounds::new(2));
        let (fetch, begun) = held();
        let first = caller(&reads, fetch.clone()).await;
        let second = caller(&reads, fetch.clone()).await;
        let third = caller(&reads, fetch.clone()).await;
        (reads, fetch, begun, [first, second, third])
    }

    /// A caller that arrives while a read is on its way begins another at once, up to the
    /// bound; past it, callers wait for a read that begins after one ends, and share it.
    #[tokio::test]
    async fn callers_begin_reads_up_to_the_bound() {
        let (reads, fetch, mut begun, [first, second, third]) = three_callers_two_reads().await;
        let fourth = caller(&reads, fetch.clone()).await;
        let (a, b) = (begun.recv().await.unwrap(), begun.recv().await.unwrap());
        assert!(begun.try_recv().is_err(), "two reads at most on their way");
        a.send(Ok(1)).unwrap();
        assert_eq!(first.await.unwrap(), Ok(1));
        // The read that ended begins the next for the callers past the bound.
        let c = begun.recv().await.unwrap();
        b.send(Ok(2)).unwrap();
        assert_eq!(second.await.unwrap(), Ok(2));
        assert!(
            !third.is_finished(),
            "a read begun before the third caller served it"
        );
        c.send(Ok(3)).unwrap();
        assert_eq!(third.await.unwrap(), Ok(3));
        assert_eq!(fourth.await.unwrap(), Ok(3));
        assert!(begun.try_recv().is_err(), "one read served both callers");
    }

    /// Ends `stale`, a read begun before `waiting` asked, which must not serve it, then
    /// `next`, which must.
    async fn ends_late(stale: Ended, next: Ended, waiting: Caller) {
        stale.send(Ok(10)).unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "served by a read begun before it asked"
        );
        next.send(Ok(30)).unwrap();
        assert_eq!(waiting.await.unwrap(), Ok(30));
    }

    /// A read that ends after a later one serves no one: the later one served every caller
    /// the earlier covered, and a caller that came after both began is served by neither.
    #[tokio::test]
    async fn a_read_that_ends_after_a_later_one_moves_no_caller_backwards() {
        let (reads, fetch, mut begun, [first, second, third]) = three_callers_two_reads().await;
        let (early, late) = (begun.recv().await.unwrap(), begun.recv().await.unwrap());
        late.send(Ok(20)).unwrap();
        assert_eq!(first.await.unwrap(), Ok(20));
        assert_eq!(second.await.unwrap(), Ok(20));
        let next = begun.recv().await.unwrap();
        ends_late(early, next, third).await;
        // Nothing is on its way or waiting: the next caller begins a read of its own.
        let fourth = caller(&reads, fetch.clone()).await;
        begun.recv().await.unwrap().send(Ok(40)).unwrap();
        assert_eq!(fourth.await.unwrap(), Ok(40));
    }

    /// A read that panics while another is on its way fails every caller waiting; the other
    /// read ends normally, serving no one, and callers after the panic get reads of their own.
    #[tokio::test]
    async fn a_read_that_panics_among_others_fails_the_waiting_callers() {
        let (reads, fetch, mut begun, [first, second, third]) = three_callers_two_reads().await;
        let (panics, other) = (begun.recv().await.unwrap(), begun.recv().await.unwrap());
        drop(panics);
        assert!(first.await.unwrap().is_err());
        assert!(second.await.unwrap().is_err());
        assert!(third.await.unwrap().is_err());
        let fourth = caller(&reads, fetch.clone()).await;
        let next = begun.recv().await.unwrap();
        ends_late(other, next, fourth).await;
    }

    /// A caller that goes away stops no read: the others it shares with are served.
    #[tokio::test]
    async fn a_caller_that_goes_away_stops_no_one() {
        let reads = Arc::new(SharedRounds::new(1));
        let (fetch, mut begun) = held();
        let gone = caller(&reads, fetch.clone()).await;
        let stays = caller(&reads, fetch.clone()).await;
        gone.abort();
        begun.recv().await.unwrap().send(Ok(1)).unwrap();
        begun.recv().await.unwrap().send(Ok(2)).unwrap();
        assert_eq!(stays.await.unwrap(), Ok(2));
    }
}
