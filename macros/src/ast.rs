//! The derive's input as a small model: the type's name and generics, its `#[resource(...)]`
//! attributes, and its named fields.

use syn::{Data, DeriveInput, Field, Fields, FieldsNamed, Generics, Ident};

use crate::attrs::ResourceAttrs;
use crate::ctxt::Ctxt;

/// The type being derived.
pub struct Container<'a> {
    /// The type's name, e.g. `Flunder`.
    pub ident: &'a Ident,
    /// Its generics, passed through to the impls.
    pub generics: &'a Generics,
    /// Its `#[resource(...)]` attributes.
    pub attrs: ResourceAttrs,
    /// Its fields; `None` (and reported) when it is not a struct with named fields.
    pub fields: Option<&'a FieldsNamed>,
}

impl<'a> Container<'a> {
    /// Reads `input`, reporting every problem found on the way.
    pub fn from_ast(cx: &Ctxt, input: &'a DeriveInput) -> Self {
        reject_inner_attributes(cx, &input.data);
        Self {
            ident: &input.ident,
            generics: &input.generics,
            attrs: ResourceAttrs::from_attributes(cx, &input.attrs),
            fields: named_fields(cx, input),
        }
    }

    /// The field called `name`, if the type has named fields and one of them is it.
    pub fn field(&self, name: &str) -> Option<&'a Field> {
        let fields = self.fields?;
        fields
            .named
            .iter()
            .find(|f| f.ident.as_ref().is_some_and(|i| i == name))
    }
}

/// The named fields of a struct; anything else is reported at the token that makes it wrong.
fn named_fields<'a>(cx: &Ctxt, input: &'a DeriveInput) -> Option<&'a FieldsNamed> {
    let msg = "#[derive(Resource)] needs a struct with named fields (`metadata`, `spec`, ...)";
    match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => return Some(named),
            Fields::Unnamed(unnamed) => cx.error_spanned_by(unnamed, msg),
            Fields::Unit => cx.error_spanned_by(&input.ident, msg),
        },
        Data::Enum(data) => cx.error_spanned_by(data.enum_token, msg),
        Data::Union(data) => cx.error_spanned_by(data.union_token, msg),
    }
    None
}

/// `#[resource]` is only read on the type; on a field or variant it would be silently ignored.
fn reject_inner_attributes(cx: &Ctxt, data: &Data) {
    let attrs = match data {
        Data::Struct(s) => s.fields.iter().flat_map(|f| &f.attrs).collect::<Vec<_>>(),
        Data::Enum(e) => e.variants.iter().flat_map(|v| &v.attrs).collect(),
        Data::Union(u) => u.fields.named.iter().flat_map(|f| &f.attrs).collect(),
    };
    for attr in attrs.into_iter().filter(|a| a.path().is_ident("resource")) {
        cx.error_spanned_by(
            attr,
            "#[resource(...)] belongs on the type, not on a field or variant",
        );
    }
}
