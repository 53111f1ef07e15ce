//! End to end with kubectl: books stored, authors computed from them, over TLS. What the
//! framework adds to the provider's list: selectors, pages, columns, 404, watch, and 405 for
//! writes.

use std::path::Path;

use extension_apiserver_testing::{KubectlOutput, KubectlWatch, TestServer};

/// Seven books by six authors in `default`.
const SHELF: [(&str, &str, &str, i64); 7] = [
    ("left-hand", "le-guin", "scifi", 300),
    ("dispossessed", "le-guin", "scifi", 380),
    ("dune", "herbert", "scifi", 600),
    ("hobbit", "tolkien", "fantasy", 310),
    ("good-omens", "pratchett", "fantasy", 400),
    ("strata", "pratchett", "scifi", 200),
    ("emma", "austen", "romance", 470),
];

fn book_yaml(name: &str, author: &str, genre: &str, pages: i64) -> String {
    format!(
        "apiVersion: catalog.example.com/v1alpha1\nkind: Book\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  author: {author}\n  genre: {genre}\n  pages: {pages}\n"
    )
}

fn write(dir: &Path, file: &str, body: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, body).unwrap();
    path.to_string_lossy().into_owned()
}

#[track_caller]
fn ok(out: KubectlOutput) -> String {
    assert!(
        out.success,
        "kubectl failed:\nstdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    out.stdout
}

async fn start_with_shelf(dir: &Path) -> TestServer {
    let server = TestServer::start(dir, vec![catalog::api_group()]).await;
    let all: Vec<String> = SHELF
        .iter()
        .map(|(n, a, g, p)| book_yaml(n, a, g, *p))
        .collect();
    let file = write(dir, "shelf.yaml", &all.join("---\n"));
    ok(server.kubectl(&["create", "-f", &file]));
    server
}

fn names(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn selectors_pages_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_shelf(dir.path()).await;

    let all = ok(server.kubectl(&["get", "authors", "-o", "name"]));
    let expected = ["austen", "herbert", "le-guin", "pratchett", "tolkien"];
    let expected: Vec<String> = expected
        .iter()
        .map(|n| format!("author.catalog.example.com/{n}"))
        .collect();
    assert_eq!(names(&all), expected);

    let scifi = ok(server.kubectl(&["get", "authors", "-l", "genre=scifi", "-o", "name"]));
    assert_eq!(
        names(&scifi),
        [
            "author.catalog.example.com/herbert",
            "author.catalog.example.com/le-guin"
        ]
    );
    let not_scifi =
        ok(server.kubectl(&["get", "au", "-l", "genre notin (scifi,mixed)", "-o", "name"]));
    assert_eq!(
        names(&not_scifi),
        [
            "author.catalog.example.com/austen",
            "author.catalog.example.com/tolkien"
        ]
    );
    let one = ok(server.kubectl(&[
        "get",
        "authors",
        "--field-selector",
        "metadata.name=tolkien",
        "-o",
        "name",
    ]));
    assert_eq!(names(&one), ["author.catalog.example.com/tolkien"]);

    // Three pages of two, followed by kubectl through continue tokens.
    let paged = server.kubectl(&["get", "authors", "--chunk-size=2", "-o", "name", "-v=6"]);
    assert_eq!(names(&ok(paged.clone())), expected);
    let requests = paged
        .stderr
        .lines()
        .filter(|l| l.contains("/authors?") && l.contains("limit=2"))
        .count();
    let continued = paged
        .stderr
        .lines()
        .filter(|l| l.contains("continue="))
        .count();
    assert_eq!((requests, continued), (3, 2), "{}", paged.stderr);

    let table = ok(server.kubectl(&["get", "authors"]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "BOOKS", "PAGES", "AGE"]);
    let wide = ok(server.kubectl(&["get", "authors", "-o", "wide"]));
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "BOOKS", "PAGES", "GENRES", "AGE"]);
    let pratchett = wide.lines().find(|l| l.starts_with("pratchett")).unwrap();
    let cells: Vec<&str> = pratchett.split_whitespace().collect();
    assert_eq!(
        (cells[1], cells[2], cells[3]),
        ("2", "600", r#"["fantasy","scifi"]"#),
        "{wide}"
    );

    let got = ok(server.kubectl(&[
        "get",
        "author",
        "le-guin",
        "-o",
        "jsonpath={.apiVersion} {.kind} {.books} {.metadata.labels.genre}",
    ]));
    assert_eq!(got, "catalog.example.com/v1alpha1 Author 2 scifi");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_author_is_404_and_writes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_shelf(dir.path()).await;

    let missing = server.kubectl(&["get", "author", "nobody"]);
    assert!(!missing.success);
    assert!(
        missing
            .stderr
            .contains(r#"authors.catalog.example.com "nobody" not found"#),
        "{}",
        missing.stderr
    );
    let raw = server.kubectl(&[
        "get",
        "--raw",
        "/apis/catalog.example.com/v1alpha1/namespaces/default/authors/nobody",
    ]);
    assert!(raw.stderr.contains("NotFound"), "{}", raw.stderr);

    let delete = server.kubectl(&["delete", "author", "herbert"]);
    assert!(!delete.success);
    assert!(
        delete.stderr.contains("(MethodNotAllowed)"),
        "{}",
        delete.stderr
    );
    let author = "apiVersion: catalog.example.com/v1alpha1\nkind: Author\nmetadata:\n  name: someone\n  namespace: default\nbooks: 1\npages: 1\ngenres: []\n";
    let file = write(dir.path(), "author.yaml", author);
    // Without --validate=false kubectl, finding no create operation for the kind in OpenAPI
    // v3, validates against OpenAPI v2 as protobuf, which this server does not serve.
    let create = server.kubectl(&["create", "--validate=false", "-f", &file]);
    assert!(!create.success, "{}", create.stdout);
    assert!(
        create.stderr.contains("(MethodNotAllowed)"),
        "{}",
        create.stderr
    );
    // Nothing changed: the author is computed, and still there.
    ok(server.kubectl(&["get", "author", "herbert"]));

    let resources = ok(server.kubectl(&[
        "api-resources",
        "--api-group=catalog.example.com",
        "-o",
        "wide",
    ]));
    let authors = resources
        .lines()
        .find(|l| l.starts_with("authors"))
        .unwrap();
    assert!(authors.contains(" get,list,watch "), "{resources}");
    server.stop().await;
}

/// Runs `kubectl get authors -w` with `extra` arguments.
fn watch_authors(server: &TestServer, extra: &[&str]) -> KubectlWatch {
    let mut args = vec![
        "get",
        "authors",
        "-w",
        "--output-watch-events",
        "--no-headers",
    ];
    args.extend_from_slice(extra);
    server.kubectl_watch(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_follows_the_books() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_shelf(dir.path()).await;
    let all = watch_authors(&server, &[]);
    let scifi = watch_authors(&server, &["-l", "genre=scifi"]);
    all.expect_line(&["ADDED", "austen", "1", "470"]);
    scifi.expect_line(&["ADDED", "herbert", "1", "600"]);

    // A new author.
    let file = write(
        dir.path(),
        "new.yaml",
        &book_yaml("foundation", "asimov", "scifi", 250),
    );
    ok(server.kubectl(&["create", "-f", &file]));
    all.expect_line(&["ADDED", "asimov", "1", "250"]);
    scifi.expect_line(&["ADDED", "asimov", "1", "250"]);

    // A book's pages change its author's total.
    ok(server.kubectl(&[
        "patch",
        "book",
        "dune",
        "--type=merge",
        "-p",
        r#"{"spec":{"pages":700}}"#,
    ]));
    all.expect_line(&["MODIFIED", "herbert", "1", "700"]);
    scifi.expect_line(&["MODIFIED", "herbert", "1", "700"]);

    // A fantasy book makes Asimov `mixed`: gone from the scifi selection.
    let file = write(
        dir.path(),
        "more.yaml",
        &book_yaml("magic", "asimov", "fantasy", 50),
    );
    ok(server.kubectl(&["create", "-f", &file]));
    all.expect_line(&["MODIFIED", "asimov", "2", "300"]);
    scifi.expect_line(&["DELETED", "asimov"]);

    // The last book of an author: the author is gone.
    ok(server.kubectl(&["delete", "book", "emma"]));
    all.expect_line(&["DELETED", "austen"]);

    server.stop().await;
}
