//! `BanFlunder`, sample-apiserver's admission plugin: a flunder may not be created under a
//! name any fischer lists in `disallowedFlunders`.

use extension_apiserver::prelude::*;
use extension_apiserver::server::PluginContext;

use crate::{Fischer, Flunder};

/// The plugin's name, as `--disable-admission-plugins` takes it.
pub const NAME: &str = "BanFlunder";

/// The plugin: reads the fischers in process, from their store's watch cache, as
/// sample-apiserver's reads them from an informer.
pub struct BanFlunder {
    fischers: Reader<Fischer>,
}

impl BanFlunder {
    /// The plugin over the fischers of `fischers`.
    pub fn new(fischers: Reader<Fischer>) -> Self {
        Self { fischers }
    }

    /// Makes the plugin for [`APIServer::admission_plugin`].
    pub fn make(context: &PluginContext<'_>) -> Plugin {
        Plugin::validating(Self::new(context.storage.reader::<Fischer>()))
    }
}

#[async_trait]
impl AdmissionPlugin for BanFlunder {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }
    /// Runs as the object will be stored, so a name made from `generateName` is judged too.
    /// The fischers are read from their watch cache as they are now, as sample-apiserver
    /// reads them from an informer (a consistent list when the server runs without one).
    async fn validate(&self, attributes: &Attributes) -> extension_apiserver::Result<()> {
        if !attributes.is::<Flunder>() {
            return Ok(());
        }
        let fischers = match self.fischers.list_cached(None) {
            Some(cached) => cached?,
            None => self.fischers.list(None).await?,
        };
        let banned = fischers
            .iter()
            .any(|fischer| fischer.disallowed_flunders.contains(&attributes.name));
        if banned {
            return Err(
                attributes.forbidden("this name may not be used, please change the resource name")
            );
        }
        Ok(())
    }
}
