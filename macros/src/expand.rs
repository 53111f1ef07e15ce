//! Generation: `extension_apiserver::Resource` and `kube_core::Resource` impls from a checked model.
//!
//! Every runtime item is named through one path (`::extension_apiserver` or `crate = "..."`), so the
//! output compiles wherever the runtime is re-exported from.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, LitStr, Path, parse_quote};

use crate::ast::Container;
use crate::attrs::{PrintColumn, ResourceAttrs};
use crate::check;
use crate::ctxt::Ctxt;
use crate::names;

/// The derive: every mistake in `input` as one combined error, or the impls.
pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let cx = Ctxt::new();
    let cont = Container::from_ast(&cx, input);
    check::check(&cx, &cont);
    cx.check()?;
    Ok(expand(&cont))
}

fn expand(cont: &Container) -> TokenStream {
    let krate = cont
        .attrs
        .crate_path
        .clone()
        .unwrap_or_else(|| parse_quote!(::extension_apiserver));
    let names = Names::new(&cont.attrs);
    let resource = impl_resource(cont, &names, &krate);
    let kube_resource = impl_kube_resource(cont, &names, &krate);
    let status = assert_status_type(cont);
    let strategy = impl_strategy(cont, &krate);
    quote! { #resource #kube_resource #strategy #status }
}

/// The names of the kind, with defaults applied. Required keys are present: `check` ran.
struct Names {
    group: String,
    version: String,
    kind: String,
    plural: String,
    singular: String,
}

impl Names {
    fn new(attrs: &ResourceAttrs) -> Self {
        let value = |lit: &Option<LitStr>| lit.as_ref().map(LitStr::value).unwrap_or_default();
        let lower_kind = value(&attrs.kind).to_lowercase();
        Self {
            group: value(&attrs.group),
            version: value(&attrs.version),
            kind: value(&attrs.kind),
            plural: attrs
                .plural
                .as_ref()
                .map_or_else(|| names::plural(&lower_kind), LitStr::value),
            singular: attrs.singular.as_ref().map_or(lower_kind, LitStr::value),
        }
    }

    /// `group/version`, or `version` alone for the core group.
    fn api_version(&self) -> String {
        match self.group.as_str() {
            "" => self.version.clone(),
            group => format!("{group}/{}", self.version),
        }
    }
}

fn impl_resource(cont: &Container, names: &Names, krate: &Path) -> TokenStream {
    let ident = cont.ident;
    let (impl_generics, ty_generics, where_clause) = cont.generics.split_for_impl();
    let info = resource_info(&cont.attrs, names, krate);
    let (meta, meta_mut) = metadata_access(cont);
    let meta_ty = object_meta(krate);
    let gc = garbage_collection(&cont.attrs, krate);
    let validations = validations(&cont.attrs, krate);
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Resource for #ident #ty_generics #where_clause {
            const INFO: #krate::ResourceInfo = #info;

            fn metadata(&self) -> &#meta_ty { #meta }

            fn metadata_mut(&mut self) -> &mut #meta_ty { #meta_mut }

            #gc
            #validations
        }
    }
}

/// `VALIDATIONS`, when `validation(...)` rules are given.
fn validations(attrs: &ResourceAttrs, krate: &Path) -> TokenStream {
    if attrs.validations.is_empty() {
        return TokenStream::new();
    }
    let text = |lit: &Option<LitStr>| lit.as_ref().map(LitStr::value).unwrap_or_default();
    let rules = attrs.validations.iter().map(|v| {
        let (rule, message) = (text(&v.rule), text(&v.message));
        let (message_expression, reason) = (text(&v.message_expression), text(&v.reason));
        let (field_path, optional) = (text(&v.field_path), v.optional_old_self);
        quote! {
            #krate::ValidationRule {
                rule: #rule,
                message: #message,
                message_expression: #message_expression,
                reason: #reason,
                field_path: #field_path,
                optional_old_self: #optional,
            }
        }
    });
    quote! {
        const VALIDATIONS: &'static [#krate::ValidationRule] = &[#(#rules),*];
    }
}

/// `Strategy` with the hooks the attributes name, or nothing with `custom_strategy`.
fn impl_strategy(cont: &Container, krate: &Path) -> TokenStream {
    if cont.attrs.custom_strategy.is_some() {
        return TokenStream::new();
    }
    let ident = cont.ident;
    let (impl_generics, ty_generics, where_clause) = cont.generics.split_for_impl();
    let hooks = hooks(&cont.attrs, krate);
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Strategy for #ident #ty_generics #where_clause {
            // No attribute writes `canonicalize`: the object validated is the one stored.
            const CANONICALIZES: bool = false;
            #hooks
        }
    }
}

fn resource_info(attrs: &ResourceAttrs, names: &Names, krate: &Path) -> TokenStream {
    let Names {
        group,
        version,
        kind,
        plural,
        singular,
    } = names;
    let scope = if attrs.namespaced {
        quote!(Namespaced)
    } else {
        quote!(Cluster)
    };
    let short_names = &attrs.shortnames;
    let categories = &attrs.categories;
    let status = attrs.status.is_some();
    let scale = match &attrs.scale {
        Some(scale) => {
            let path = |lit: &Option<LitStr>| lit.as_ref().map(LitStr::value).unwrap_or_default();
            let spec = path(&scale.spec_replicas_path);
            let status = path(&scale.status_replicas_path);
            let selector = match &scale.label_selector_path {
                Some(lit) => quote!(::core::option::Option::Some(#lit)),
                None => quote!(::core::option::Option::None),
            };
            quote! {
                ::core::option::Option::Some(#krate::ScaleInfo {
                    spec_replicas_path: #spec,
                    status_replicas_path: #status,
                    label_selector_path: #selector,
                })
            }
        }
        None => quote!(::core::option::Option::None),
    };
    let columns = attrs
        .printcolumns
        .iter()
        .map(|column| printer_column(column, krate));
    let selectable_fields = attrs.selectable_fields.iter().map(selectable_field);
    quote! {
        #krate::ResourceInfo {
            group: #group,
            version: #version,
            kind: #kind,
            plural: #plural,
            singular: #singular,
            scope: #krate::Scope::#scope,
            short_names: &[#(#short_names),*],
            categories: &[#(#categories),*],
            status: #status,
            scale: #scale,
            printer_columns: &[#(#columns),*],
            selectable_fields: &[#(#selectable_fields),*],
        }
    }
}

fn printer_column(column: &PrintColumn, krate: &Path) -> TokenStream {
    let value = |lit: &Option<LitStr>, default: &str| {
        lit.as_ref().map_or(default.to_owned(), LitStr::value)
    };
    let name = value(&column.name, "");
    // check.rs has refused any other name.
    let type_ = match value(&column.type_, "string").as_str() {
        "integer" => quote!(Integer),
        "number" => quote!(Number),
        "boolean" => quote!(Boolean),
        "date" => quote!(Date),
        _ => quote!(String),
    };
    let format = value(&column.format, "");
    let json_path = value(&column.json_path, "");
    let description = value(&column.description, "");
    let priority = column.priority.unwrap_or(0);
    quote! {
        #krate::PrinterColumn {
            name: #name,
            type_: #krate::ColumnType::#type_,
            format: #format,
            json_path: #json_path,
            description: #description,
            priority: #priority,
        }
    }
}

/// `".spec.reference"` → `"spec.reference"`, the form field selectors use.
fn selectable_field(lit: &LitStr) -> String {
    let value = lit.value();
    value.strip_prefix('.').unwrap_or(&value).to_owned()
}

fn object_meta(krate: &Path) -> TokenStream {
    quote!(#krate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta)
}

/// `&self.metadata` and `&mut self.metadata`, spanned at the field's type so that a field of
/// the wrong type is reported there.
fn metadata_access(cont: &Container) -> (TokenStream, TokenStream) {
    let span = cont
        .field("metadata")
        .map_or_else(proc_macro2::Span::call_site, |f| f.ty.span());
    (
        quote_spanned!(span=> &self.metadata),
        quote_spanned!(span=> &mut self.metadata),
    )
}

/// The strategy hooks that were given, each delegating to the user's function. A function of
/// the wrong signature is reported at its path.
fn hooks(attrs: &ResourceAttrs, krate: &Path) -> TokenStream {
    let errors = quote!(::std::vec::Vec<#krate::FieldError>);
    let ctx = quote!(_: &#krate::StrategyContext<'_>);
    let validate = attrs.validate.as_ref().map(|f| {
        let call = quote_spanned!(f.span()=> #f(self));
        quote!(fn validate(&self, #ctx) -> #errors { #call })
    });
    let validate_update = attrs.validate_update.as_ref().map(|f| {
        let call = quote_spanned!(f.span()=> #f(self, old));
        quote!(fn validate_update(&self, old: &Self, #ctx) -> #errors { #call })
    });
    let defaults = attrs.defaults.as_ref().map(|f| {
        let call = quote_spanned!(f.span()=> #f(self));
        quote!(fn default_fields(&mut self) { #call })
    });
    let unconditional = attrs.allow_unconditional_update.then(|| {
        quote!(
            fn allow_unconditional_update() -> bool {
                true
            }
        )
    });
    let create_on_update = attrs.allow_create_on_update.then(|| {
        quote!(
            fn allow_create_on_update() -> bool {
                true
            }
        )
    });
    quote!(#unconditional #create_on_update #validate #validate_update #defaults)
}

/// `GARBAGE_COLLECTION_POLICY`, when `garbage_collection = "..."` is given.
fn garbage_collection(attrs: &ResourceAttrs, krate: &Path) -> TokenStream {
    let Some(lit) = &attrs.garbage_collection else {
        return TokenStream::new();
    };
    let policy = syn::Ident::new(&lit.value(), lit.span());
    quote! {
        const GARBAGE_COLLECTION_POLICY: #krate::GarbageCollectionPolicy =
            #krate::GarbageCollectionPolicy::#policy;
    }
}

/// kube-core's view of the same type, so `kube::Api<T>` works in clients and tests.
fn impl_kube_resource(cont: &Container, names: &Names, krate: &Path) -> TokenStream {
    let ident = cont.ident;
    let (impl_generics, ty_generics, where_clause) = cont.generics.split_for_impl();
    let scope = if cont.attrs.namespaced {
        quote!(NamespaceResourceScope)
    } else {
        quote!(ClusterResourceScope)
    };
    let (meta, meta_mut) = metadata_access(cont);
    let meta_ty = object_meta(krate);
    let statics = [
        ("kind", &names.kind),
        ("group", &names.group),
        ("version", &names.version),
        ("plural", &names.plural),
        ("api_version", &names.api_version()),
    ]
    .map(|(name, value)| static_str_fn(name, value));
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::kube_core::Resource for #ident #ty_generics #where_clause {
            type DynamicType = ();
            type Scope = #krate::k8s_openapi::#scope;

            #(#statics)*

            fn meta(&self) -> &#meta_ty { #meta }

            fn meta_mut(&mut self) -> &mut #meta_ty { #meta_mut }
        }
    }
}

/// `fn name(_: &()) -> Cow<'_, str>` returning a string known at compile time.
fn static_str_fn(name: &str, value: &str) -> TokenStream {
    let name = syn::Ident::new(name, proc_macro2::Span::call_site());
    quote! {
        fn #name(_: &()) -> ::std::borrow::Cow<'_, str> {
            ::std::borrow::Cow::Borrowed(#value)
        }
    }
}

/// A compile-time check that the `status` field is the type named by `status = "..."`, or an
/// `Option` of it; a mismatch is reported at the string.
fn assert_status_type(cont: &Container) -> TokenStream {
    let Some(status) = &cont.attrs.status else {
        return TokenStream::new();
    };
    let ident = cont.ident;
    let (impl_generics, ty_generics, where_clause) = cont.generics.split_for_impl();
    let ty = &status.ty;
    let assertion = quote_spanned!(status.lit.span()=> status_is::<#ty, _>(&object.status));
    quote! {
        const _: () = {
            #[diagnostic::on_unimplemented(
                message = "the `status` field must be `{S}` or `Option<{S}>`, \
                           as `status = \"...\"` says",
                label = "`status` names this type"
            )]
            trait StatusOf<S> {}
            impl<S> StatusOf<S> for S {}
            impl<S> StatusOf<S> for ::std::option::Option<S> {}
            fn status_is<S, F: StatusOf<S>>(_: &F) {}
            #[allow(dead_code)]
            fn check_status #impl_generics (object: &#ident #ty_generics) #where_clause {
                #assertion;
            }
        };
    }
}
