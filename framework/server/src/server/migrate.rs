//! The `migrate-storage` subcommand: opens the storage as the server does and rewrites, in
//! its current storage version, every stored object that is in an older one (the work of
//! kube-storage-version-migrator, for the resources of one server). The rewriting itself is
//! the registry's ([`StorageMigrator`]). With `--server-kubeconfig` it goes through a running
//! server's API instead, as kube-storage-version-migrator does: every object is read and
//! written back unchanged, which the server stores in its storage version.

use std::path::PathBuf;

use clap::Args;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};

use super::error::ServerError;
use super::options::ServerOptions;
use crate::registry::store::{MigrationReport, StorageMigrator};

/// `migrate-storage`: which resources, and the server's flags (of which the storage ones,
/// `--storage-backend`, `--sqlite-path`, `--etcd-servers`, `--etcd-prefix`..., say what to
/// migrate; the others are accepted so that the server's own command line can be reused).
#[derive(Clone, Debug, Default, Args)]
pub struct MigrateStorageOptions {
    /// Migrate only these resources, as `{plural}.{group}` (e.g.
    /// flunders.wardle.example.com); every resource the server stores by default.
    #[arg(long = "resource", value_name = "RESOURCE", value_delimiter = ',')]
    pub resources: Vec<String>,

    /// Migrate through the API of the running server this kubeconfig reaches (the admin
    /// kubeconfig in a standalone server's --cert-dir, or the cluster's, through the
    /// aggregator) instead of opening the storage: every object is read and
    /// written back unchanged, and the server stores those in an older version in the current
    /// one. Safe on every backend while the server runs (the only way on SQLite, whose file
    /// one process writes).
    #[arg(long = "server-kubeconfig", value_name = "FILE")]
    pub server_kubeconfig: Option<PathBuf>,

    /// The server's flags.
    #[command(flatten)]
    pub server: ServerOptions,
}

/// The migrators `resources` names (all of `stored` when empty), or which name is unknown.
pub(crate) fn select(
    stored: Vec<StorageMigrator>,
    resources: &[String],
) -> Result<Vec<StorageMigrator>, ServerError> {
    if resources.is_empty() {
        return Ok(stored);
    }
    resources
        .iter()
        .map(|wanted| {
            stored
                .iter()
                .find(|m| m.resource() == *wanted)
                .cloned()
                .ok_or_else(|| unknown(wanted, &stored))
        })
        .collect()
}

fn unknown(wanted: &str, stored: &[StorageMigrator]) -> ServerError {
    let names: Vec<String> = stored.iter().map(StorageMigrator::resource).collect();
    ServerError::Migration(format!(
        "this server stores no resource {wanted:?}; it stores: {}",
        names.join(", ")
    ))
}

/// Migrates each of `migrators` in turn, calling `progress` after each; stops at the first
/// failure (what was rewritten stays rewritten, and a new run goes on from there).
pub(crate) async fn run(
    migrators: &[StorageMigrator],
    progress: &mut dyn FnMut(&MigrationReport),
) -> Result<Vec<MigrationReport>, ServerError> {
    let mut reports = Vec::with_capacity(migrators.len());
    for migrator in migrators {
        let report = migrator.migrate().await.map_err(|e| {
            ServerError::Migration(format!("{}: {}", migrator.resource(), e.message()))
        })?;
        progress(&report);
        reports.push(report);
    }
    Ok(reports)
}

/// How often an object's no-op update is tried again after losing a race with another write.
const API_ATTEMPTS: usize = 8;

/// Objects per page of the API's lists.
const API_PAGE: u32 = 500;

/// Migrates each of `migrators`' resources through the server `kubeconfig` reaches: lists it
/// in its storage version, a page at a time, and writes every object back unchanged (a
/// conflict reads it again; one deleted meanwhile is skipped). Counts as rewritten the
/// objects whose resourceVersion the write changed: those stored in an older version.
pub(crate) async fn run_through_api(
    kubeconfig: &std::path::Path,
    migrators: &[StorageMigrator],
    progress: &mut dyn FnMut(&MigrationReport),
) -> Result<Vec<MigrationReport>, ServerError> {
    let client = api_client(kubeconfig).await?;
    let mut reports = Vec::with_capacity(migrators.len());
    for migrator in migrators {
        let report = migrate_resource(&client, migrator).await?;
        progress(&report);
        reports.push(report);
    }
    Ok(reports)
}

async fn api_client(kubeconfig: &std::path::Path) -> Result<kube::Client, ServerError> {
    crate::tls::install_crypto_provider();
    let bad = |e: String| ServerError::Migration(format!("--server-kubeconfig: {e}"));
    let file = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| bad(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| bad(e.to_string()))
}

async fn migrate_resource(
    client: &kube::Client,
    migrator: &StorageMigrator,
) -> Result<MigrationReport, ServerError> {
    let failed = |e: kube::Error| {
        ServerError::Migration(format!("{} through the API: {e}", migrator.resource()))
    };
    let info = migrator.info();
    let resource = ApiResource {
        group: info.group.to_string(),
        version: info.version.to_string(),
        api_version: info.api_version(),
        kind: info.kind.to_string(),
        plural: info.plural.to_string(),
    };
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut report = MigrationReport {
        resource: migrator.resource(),
        objects: 0,
        rewritten: 0,
    };
    let mut params = ListParams::default().limit(API_PAGE);
    loop {
        let page = all.list(&params).await.map_err(failed)?;
        for object in page.items {
            report.objects += 1;
            let api = match object.metadata.namespace.as_deref() {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            if rewrite(&api, object).await.map_err(|e| match e {
                Rewrite::Api(e) => failed(e),
                Rewrite::Conflicts(name) => ServerError::Migration(format!(
                    "{} through the API: {name}: still conflicting after {API_ATTEMPTS} attempts",
                    migrator.resource()
                )),
            })? {
                report.rewritten += 1;
            }
        }
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(report),
        }
    }
}

/// Why an object could not be written back.
enum Rewrite {
    Api(kube::Error),
    /// Other writes won every attempt.
    Conflicts(String),
}

/// Writes `object` back unchanged; whether the server wrote it (its resourceVersion moved).
async fn rewrite(api: &Api<DynamicObject>, mut object: DynamicObject) -> Result<bool, Rewrite> {
    let name = object.metadata.name.clone().unwrap_or_default();
    for _ in 0..API_ATTEMPTS {
        let before = object.metadata.resource_version.clone();
        match api.replace(&name, &PostParams::default(), &object).await {
            Ok(written) => return Ok(written.metadata.resource_version != before),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                match api.get_opt(&name).await.map_err(Rewrite::Api)? {
                    Some(current) => object = current,
                    None => return Ok(false),
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(false),
            Err(e) => return Err(Rewrite::Api(e)),
        }
    }
    Err(Rewrite::Conflicts(name))
}
