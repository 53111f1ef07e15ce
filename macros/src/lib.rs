//! `#[derive(Resource)]` for the `apiserver` framework.
//!
//! The derive runs in three stages, as serde_derive's: `ast.rs` and `attrs.rs` read the input
//! into a small model, `check.rs` reports every mistake at once through `ctxt.rs`, and
//! `expand.rs` generates the impls.

use proc_macro::TokenStream;

mod ast;
mod attrs;
mod check;
mod ctxt;
mod expand;
mod names;

#[doc = include_str!("docs/resource.md")]
#[proc_macro_derive(Resource, attributes(resource))]
pub fn derive_resource(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
