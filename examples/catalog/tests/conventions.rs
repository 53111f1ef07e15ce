//! The API-conventions conformance suite of the test kit on every version of every resource
//! catalog serves that clients can write: Book (namespaced, SQLite, with the watch cache).
//! Author is computed and read-only, and the suite's checks write the objects they check, so
//! its reads are checked in `kubectl.rs` and `kube_client.rs`; a resource or version added
//! without its suite fails `every_served_version_has_the_suite`.

use catalog::{Book, BookSpec};
use extension_apiserver_testing::conformance::served_resources;

/// A valid book; its author differs per name.
fn book(name: &str) -> Book {
    Book {
        spec: BookSpec {
            author: format!("author of {name}"),
            genre: "scifi".into(),
            pages: 100,
        },
        ..Book::default()
    }
}

extension_apiserver_testing::conformance!(
    book_conventions,
    group: catalog::api_group(),
    resource: Book,
    sample: book,
    // catalog's validation: a book has an author.
    invalid: |name| {
        let mut b = book(name);
        b.spec.author = " ".into();
        b
    },
    sqlite: true,
);

/// The resources of each version that a `conformance!` above checks.
const CHECKED: [(&str, &str); 1] = [("v1alpha1", "books")];

/// Served, and not writable: no suite.
const COMPUTED: [(&str, &str); 1] = [("v1alpha1", "authors")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_version_has_the_suite() {
    let served = served_resources(vec![catalog::api_group()]).await;
    let mut expected: Vec<_> = CHECKED
        .iter()
        .chain(&COMPUTED)
        .map(|(v, r)| (format!("{}/{v}", catalog::GROUP), r.to_string()))
        .collect();
    expected.sort();
    assert_eq!(served, expected);
}
