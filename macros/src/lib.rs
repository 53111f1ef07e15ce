//! `#[derive(Resource)]` for the `apiserver` framework.
use proc_macro::TokenStream;

/// Derives `apiserver::Resource`.
#[proc_macro_derive(Resource, attributes(resource))]
pub fn derive_resource(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}
