//! The `migrate-storage` subcommand: opens the storage as the server does and rewrites, in
//! its current storage version, every stored object that is in an older one (the work of
//! kube-storage-version-migrator, for the resources of one server). The rewriting itself is
//! the registry's ([`StorageMigrator`]).

use clap::Args;

use super::builder::ServerError;
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
