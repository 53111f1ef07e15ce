//! The book's flag reference (`book/src/flags.md`) is the server's command line, rendered from
//! its clap definitions (`APIServer::cli()`): this test fails when a flag, its value, default or
//! help changes and the page was not regenerated. `UPDATE_BOOK=1 cargo test -p
//! extension-apiserver-book --test book -- flags::` rewrites the page (build with `--features
//! extension-apiserver/etcd` so that the etcd flags are in it).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Arg, Command};
use extension_apiserver::APIServer;

/// Flags that exist only when `apiserver` is built with its `etcd` feature.
const ETCD_FEATURE_FLAGS: [&str; 4] = [
    "etcd-servers",
    "etcd-cafile",
    "etcd-certfile",
    "etcd-keyfile",
];

/// The sections of the page: clap's group of each options struct, in the order of `--help`.
const SECTIONS: [(&str, &str); 4] = [
    ("ServerOptions", "Serving, TLS and storage"),
    ("DelegatingOptions", "Authentication and authorization"),
    ("AdmissionOptions", "Admission"),
    (
        "AggregatorOptions",
        "The core API and APIService registration",
    ),
];

const HEADER: &str = "# Flag reference

<!-- Generated from the server's clap definitions by book/doctest/tests/flags.rs; do not edit.
     `UPDATE_BOOK=1 cargo test -p extension-apiserver-book --features extension-apiserver/etcd --test book -- flags::`
     rewrites it. -->

Every server built with `APIServer::from_args()` understands these flags, and `--help` prints
them. They are those of `ServerOptions` and `AggregatorOptions` (flatten both into a clap
parser of your own to add flags); `APIServer::cli()` returns the same command line as a
`clap::Command`. Flag names follow kube-apiserver's and `k8s.io/apiserver`'s where one
exists. A flag written `--flag[=true|false]` may be given alone for `true`; lists are
comma-separated. The chapters [Serving, flags and security](serving.md),
[Storage](storage.md), [Delegated authentication and authorization](delegated-auth.md) and
[Running behind the aggregator](aggregator.md) say what the flags do together.
";

fn page_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../src/flags.md")
}

/// One sentence or more on one line: clap's help with its line breaks joined, the final period
/// clap drops from a one-paragraph help put back, `|` escaped for a table.
fn one_line(text: &str) -> String {
    let mut joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !joined.is_empty() && !joined.ends_with('.') {
        joined.push('.');
    }
    joined.replace('|', "\\|")
}

/// `--name=VALUE`, `--name[=BOOL]` or `--name` as a user writes it.
fn usage(arg: &Arg) -> String {
    let long = arg.get_long().expect("every flag is long");
    if !arg.get_action().takes_values() {
        return format!("`--{long}`");
    }
    let possible: Vec<_> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    // The values themselves when clap knows them (enums, booleans), else the value's name.
    let value = match arg.get_value_names() {
        _ if !possible.is_empty() => possible.join("\\|"),
        Some(names) => names.join(" "),
        None => arg.get_id().as_str().to_uppercase(),
    };
    let optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
    if optional {
        format!("`--{long}[={value}]`")
    } else {
        format!("`--{long}={value}`")
    }
}

fn default(arg: &Arg) -> String {
    let values: Vec<_> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if values.is_empty() {
        String::new()
    } else {
        format!("`{}`", values.join(","))
    }
}

fn help(arg: &Arg) -> String {
    let text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| one_line(&h.to_string()))
        .unwrap_or_default();
    let long = arg.get_long().unwrap_or_default();
    if ETCD_FEATURE_FLAGS.contains(&long) {
        format!("{text} Only with the `etcd` feature of `apiserver`.")
    } else {
        text
    }
}

fn table(out: &mut String, args: &[&Arg]) {
    out.push_str("| flag | default | |\n|---|---|---|\n");
    for arg in args {
        let row = format!("| {} | {} | {} |", usage(arg), default(arg), help(arg));
        writeln!(out, "{row}").unwrap();
    }
}

/// The ids of the flags of one options struct: clap's derive makes a group named after it.
fn group_ids<'a>(command: &'a Command, group: &str) -> Vec<&'a clap::Id> {
    let group = command
        .get_groups()
        .find(|g| g.get_id() == group)
        .unwrap_or_else(|| panic!("no clap group {group}"));
    group.get_args().collect()
}

/// The flags of one section. `ServerOptions`' own group comes out empty (it flattens other
/// structs), so its flags are those of no other section.
fn section_args<'a>(command: &'a Command, group: &str) -> Vec<&'a Arg> {
    let flags = command
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "help"));
    if group != "ServerOptions" {
        let ids = group_ids(command, group);
        return flags.filter(|a| ids.contains(&a.get_id())).collect();
    }
    let others: Vec<_> = SECTIONS[1..]
        .iter()
        .flat_map(|(g, _)| group_ids(command, g))
        .collect();
    flags.filter(|a| !others.contains(&a.get_id())).collect()
}

fn render(command: &Command) -> String {
    let mut out = String::from(HEADER);
    let mut listed = 0;
    for (group, title) in SECTIONS {
        let args = section_args(command, group);
        listed += args.len();
        write!(out, "\n## {title}\n\n").unwrap();
        table(&mut out, &args);
    }
    let all = command
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "help"));
    assert_eq!(listed, all.count(), "a flag in two sections");
    let manifests = command
        .find_subcommand("manifests")
        .expect("the manifests subcommand");
    let about = one_line(&manifests.get_about().expect("manifests' about").to_string());
    write!(out, "\n## `manifests`\n\n`SERVER manifests --namespace=NS --image=IMAGE [...]`: {about} See [Deploying to a cluster](deploying.md).\n\n").unwrap();
    let args: Vec<_> = manifests
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "help"))
        .collect();
    table(&mut out, &args);
    let migrate = command
        .find_subcommand("migrate-storage")
        .expect("the migrate-storage subcommand");
    let about = one_line(
        &migrate
            .get_about()
            .expect("migrate-storage's about")
            .to_string(),
    );
    write!(out, "\n## `migrate-storage`\n\n`SERVER migrate-storage [--resource=RESOURCE] [SERVER FLAGS]`: {about} It takes the server's flags too, of which the storage ones say which storage it rewrites. See [Changing the storage version](resources.md#changing-the-storage-version).\n\n").unwrap();
    // Its own flags: the server's are listed above.
    let server = |a: &Arg| command.get_arguments().any(|s| s.get_id() == a.get_id());
    let args: Vec<_> = migrate
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "help") && !server(a))
        .collect();
    table(&mut out, &args);
    out
}

/// The page without the rows of flags that need the etcd feature, for builds without it.
fn without_etcd_flags(page: &str) -> String {
    page.lines()
        .filter(|line| {
            !ETCD_FEATURE_FLAGS
                .iter()
                .any(|f| line.starts_with(&format!("| `--{f}=")))
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn the_flag_reference_is_the_command_line() {
    let command = APIServer::cli();
    let rendered = render(&command);
    let path = page_path();
    let with_etcd = command
        .get_arguments()
        .any(|a| a.get_long() == Some("etcd-servers"));
    if std::env::var_os("UPDATE_BOOK").is_some() {
        assert!(
            with_etcd,
            "regenerate with --features extension-apiserver/etcd, or the etcd flags go missing"
        );
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let page = std::fs::read_to_string(&path).unwrap();
    let expected = if with_etcd {
        page
    } else {
        without_etcd_flags(&page)
    };
    assert!(
        rendered == expected,
        "book/src/flags.md is not the command line; rewrite it with \
         `UPDATE_BOOK=1 cargo test -p extension-apiserver-book --features extension-apiserver/etcd --test book -- flags::`\n\
         --- rendered ---\n{rendered}"
    );
}

#[test]
fn every_flag_has_help() {
    let command = APIServer::cli();
    for arg in command.get_arguments().filter(|a| a.get_long().is_some()) {
        assert!(
            !help(arg).is_empty(),
            "--{} has no help",
            arg.get_long().unwrap()
        );
    }
}
