//! Error collection for the derive, as serde_derive's `internals/ctxt.rs`.
//!
//! Every stage reports into one [`Ctxt`] and carries on, so the user sees all mistakes of one
//! `#[resource(...)]` at once instead of fixing them one compile at a time.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// The errors found so far. Shared by reference: parsing closures only need `&Ctxt`.
#[derive(Default)]
pub struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports `msg` spanning all of `tokens`, e.g. a whole `key = value` item.
    pub fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, msg: M) {
        self.syn_error(syn::Error::new_spanned(tokens.into_token_stream(), msg));
    }

    /// Reports an error from syn, e.g. a malformed attribute.
    pub fn syn_error(&self, err: syn::Error) {
        self.errors.borrow_mut().push(err);
    }

    /// All errors combined into one, or `Ok` when there were none.
    pub fn check(self) -> syn::Result<()> {
        let mut errors = self.errors.into_inner().into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for err in errors {
            combined.combine(err);
        }
        Err(combined)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_ok() {
        assert!(Ctxt::new().check().is_ok());
    }

    #[test]
    fn keeps_every_error() {
        let cx = Ctxt::new();
        cx.error_spanned_by(quote::quote!(a), "first");
        cx.error_spanned_by(quote::quote!(b), "second");
        let messages: Vec<String> = cx
            .check()
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages, ["first", "second"]);
    }
}
