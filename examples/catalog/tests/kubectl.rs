//! End to end with kubectl: books stored, authors computed from them, over TLS. What the
//! framework adds to the provider's list: selectors, pages, columns, 404, watch, and 405 for
//! writes.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use apiserver::testing::{KubectlOutput, TestServer};

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

/// Runs `kubectl get authors -w`, collecting its lines on a channel.
fn spawn_watch(
    server: &TestServer,
    extra: &[&str],
) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args([
            "get",
            "authors",
            "-w",
            "--output-watch-events",
            "--no-headers",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Waits (at most 20 s) for a watch line starting with `words`.
fn expect_line(rx: &mpsc::Receiver<String>, words: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while std::time::Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if words
                .iter()
                .enumerate()
                .all(|(i, w)| parts.get(i) == Some(w))
            {
                return;
            }
            seen.push(line);
        }
    }
    panic!("no watch line starting with {words:?}; saw {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_follows_the_books() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_shelf(dir.path()).await;
    let (mut all, all_rx) = spawn_watch(&server, &[]);
    let (mut scifi, scifi_rx) = spawn_watch(&server, &["-l", "genre=scifi"]);
    expect_line(&all_rx, &["ADDED", "austen", "1", "470"]);
    expect_line(&scifi_rx, &["ADDED", "herbert", "1", "600"]);

    // A new author.
    let file = write(
        dir.path(),
        "new.yaml",
        &book_yaml("foundation", "asimov", "scifi", 250),
    );
    ok(server.kubectl(&["create", "-f", &file]));
    expect_line(&all_rx, &["ADDED", "asimov", "1", "250"]);
    expect_line(&scifi_rx, &["ADDED", "asimov", "1", "250"]);

    // A book's pages change its author's total.
    ok(server.kubectl(&[
        "patch",
        "book",
        "dune",
        "--type=merge",
        "-p",
        r#"{"spec":{"pages":700}}"#,
    ]));
    expect_line(&all_rx, &["MODIFIED", "herbert", "1", "700"]);
    expect_line(&scifi_rx, &["MODIFIED", "herbert", "1", "700"]);

    // A fantasy book makes Asimov `mixed`: gone from the scifi selection.
    let file = write(
        dir.path(),
        "more.yaml",
        &book_yaml("magic", "asimov", "fantasy", 50),
    );
    ok(server.kubectl(&["create", "-f", &file]));
    expect_line(&all_rx, &["MODIFIED", "asimov", "2", "300"]);
    expect_line(&scifi_rx, &["DELETED", "asimov"]);

    // The last book of an author: the author is gone.
    ok(server.kubectl(&["delete", "book", "emma"]));
    expect_line(&all_rx, &["DELETED", "austen"]);

    for child in [&mut all, &mut scifi] {
        child.kill().unwrap();
        let _ = child.wait();
    }
    server.stop().await;
}
