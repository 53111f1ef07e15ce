//! End to end with kube-rs: typed lists of the computed `Author` in pages, an expired
//! `continue` (410), and a watch with bookmarks whose resourceVersions move only with a
//! change.

use std::time::Duration;

use catalog::{Author, Book, BookSpec};
use extension_apiserver::prelude::ComputedOptions;
use extension_apiserver_testing::TestServer;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

async fn client(server: &TestServer) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn book(name: &str, author: &str, pages: i64) -> Book {
    let mut book = Book {
        spec: BookSpec {
            author: author.into(),
            genre: "scifi".into(),
            pages,
        },
        ..Book::default()
    };
    book.metadata.name = Some(name.into());
    book
}

async fn shelve(books: &Api<Book>, n: usize) {
    for i in 0..n {
        let name = format!("book-{i}");
        let author = format!("author-{i}");
        books
            .create(&PostParams::default(), &book(&name, &author, 100))
            .await
            .unwrap();
    }
}

fn name(author: &Author) -> String {
    author.metadata.name.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_and_an_expired_continue() {
    let dir = tempfile::tempdir().unwrap();
    let options = ComputedOptions::default().compaction_interval(Duration::from_millis(100));
    let server = TestServer::start(dir.path(), vec![catalog::api_group_with(options)]).await;
    let client = client(&server).await;
    let books: Api<Book> = Api::namespaced(client.clone(), "default");
    let authors: Api<Author> = Api::namespaced(client.clone(), "default");
    shelve(&books, 5).await;

    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(2);
    let mut pages = 0;
    let mut first_token = None;
    let mut first_version = None;
    loop {
        let page = authors.list(&params).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        first_version.get_or_insert(page.metadata.resource_version.clone());
        assert_eq!(
            Some(&page.metadata.resource_version),
            first_version.as_ref(),
            "every page at the first page's revision"
        );
        seen.extend(page.items.iter().map(name));
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => {
                first_token.get_or_insert(token.clone());
                params = params.continue_token(&token);
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        seen,
        ["author-0", "author-1", "author-2", "author-3", "author-4"]
    );

    // The authors change, and the mirror's history of the first page's revision is compacted.
    books
        .create(&PostParams::default(), &book("more", "author-9", 1))
        .await
        .unwrap();
    authors.list(&ListParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let expired = ListParams::default()
        .limit(2)
        .continue_token(&first_token.unwrap());
    match authors.list(&expired).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (410, "Expired"),
                "{status:?}"
            )
        }
        other => panic!("an expired continue must be 410, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_events_and_versions_that_move_only_with_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let options = ComputedOptions::default()
        .relist_interval(Duration::from_millis(100))
        .bookmark_interval(Duration::from_millis(200));
    let server = TestServer::start(dir.path(), vec![catalog::api_group_with(options)]).await;
    let client = client(&server).await;
    let books: Api<Book> = Api::namespaced(client.clone(), "default");
    let authors: Api<Author> = Api::namespaced(client.clone(), "default");
    shelve(&books, 2).await;

    let listed = authors.list(&ListParams::default()).await.unwrap();
    let again = authors.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.metadata.resource_version, again.metadata.resource_version,
        "no change, same version"
    );
    let rv = listed.metadata.resource_version.unwrap();

    let params = WatchParams::default().timeout(20);
    let mut events = authors.watch(&params, &rv).await.unwrap().boxed();
    books
        .create(&PostParams::default(), &book("third", "author-0", 50))
        .await
        .unwrap();
    let mut bookmarks = 0;
    let modified = loop {
        match events.try_next().await.unwrap().expect("the watch goes on") {
            WatchEvent::Bookmark(_) => bookmarks += 1,
            WatchEvent::Modified(author) => break author,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(
        (name(&modified), modified.books, modified.pages),
        ("author-0".into(), 2, 150)
    );
    let before = listed.items.iter().find(|a| name(a) == "author-0").unwrap();
    assert_ne!(
        modified.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(
        modified.metadata.uid, before.metadata.uid,
        "the same author"
    );
    // Nothing changes any more: bookmarks only.
    while bookmarks < 3 {
        match events.try_next().await.unwrap().expect("the watch goes on") {
            WatchEvent::Bookmark(_) => bookmarks += 1,
            other => panic!("nothing changed, yet {other:?}"),
        }
    }
    server.stop().await;
}
