//! Readers for the value of one `key = value` item, each reporting a wrong shape into the
//! [`Ctxt`] with a hint of the right one and returning `None` so parsing goes on.

use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, ExprLit, Ident, Lit, LitInt, LitStr, parenthesized, token};
use syn::{MacroDelimiter, Meta, MetaList, MetaNameValue, Path, Token};

use crate::attrs::keys;
use crate::ctxt::Ctxt;

/// The comma-separated items of `#[resource(...)]`.
pub fn items(cx: &Ctxt, attr: &Attribute) -> Vec<Meta> {
    parse_items(cx, attr.parse_args_with(item_list))
}

/// The comma-separated items of `key(...)`, e.g. `printcolumn(name = "...")`; `None` when
/// `item` has another shape.
pub fn nested_items(cx: &Ctxt, item: &Meta, example: &str) -> Option<Vec<Meta>> {
    let Meta::List(list) = item else {
        let key = keys::name(item.path());
        cx.error_spanned_by(
            item,
            format!("`{key}` takes a list of settings, e.g. `{example}`"),
        );
        return None;
    };
    Some(parse_items(cx, item_list.parse2(list.tokens.clone())))
}

fn item_list(input: ParseStream) -> syn::Result<Punctuated<Meta, Token![,]>> {
    Punctuated::parse_terminated_with(input, item)
}

/// One `key`, `key = value` or `key(...)`. Unlike `Meta`'s own parser this takes keywords
/// as keys, for `type = "..."` and `crate = "..."`.
fn item(input: ParseStream) -> syn::Result<Meta> {
    let path = Path::from(Ident::parse_any(input)?);
    if input.peek(Token![=]) {
        let (eq_token, value) = (input.parse()?, input.parse()?);
        return Ok(Meta::NameValue(MetaNameValue {
            path,
            eq_token,
            value,
        }));
    }
    if input.peek(token::Paren) {
        let content;
        let delimiter = MacroDelimiter::Paren(parenthesized!(content in input));
        return Ok(Meta::List(MetaList {
            path,
            delimiter,
            tokens: content.parse()?,
        }));
    }
    Ok(Meta::Path(path))
}

fn parse_items(cx: &Ctxt, parsed: syn::Result<Punctuated<Meta, Token![,]>>) -> Vec<Meta> {
    match parsed {
        Ok(items) => items.into_iter().collect(),
        Err(err) => {
            cx.syn_error(err);
            Vec::new()
        }
    }
}

/// `key = "text"`.
pub fn string(cx: &Ctxt, item: &Meta) -> Option<LitStr> {
    match expr(item) {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        })) => Some(s.clone()),
        _ => wrong(cx, item, "a string, e.g. `{key} = \"...\"`"),
    }
}

/// `key = ["a", "b"]`.
pub fn strings(cx: &Ctxt, item: &Meta) -> Vec<LitStr> {
    let Some(Expr::Array(array)) = expr(item) else {
        return wrong(cx, item, "a list of strings, e.g. `{key} = [\"...\"]`").unwrap_or_default();
    };
    let mut out = Vec::new();
    for elem in &array.elems {
        match elem {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => out.push(s.clone()),
            other => {
                let key = keys::name(item.path());
                cx.error_spanned_by(
                    other,
                    format!("`{key}` takes a list of strings: expected a string here"),
                );
            }
        }
    }
    out
}

/// `key = path::to::function`.
pub fn path(cx: &Ctxt, item: &Meta) -> Option<Path> {
    match expr(item) {
        Some(Expr::Path(p)) if p.qself.is_none() => Some(p.path.clone()),
        _ => wrong(
            cx,
            item,
            "the path of a function, e.g. `{key} = my_function`",
        ),
    }
}

/// `key = 1`: a non-negative `i32` literal.
pub fn int(cx: &Ctxt, item: &Meta) -> Option<i32> {
    let Some(Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    })) = expr(item)
    else {
        return wrong(cx, item, "a non-negative integer, e.g. `{key} = 1`");
    };
    parse_i32(cx, item, int)
}

fn parse_i32(cx: &Ctxt, item: &Meta, int: &LitInt) -> Option<i32> {
    let parsed = int.base10_parse::<i32>();
    if parsed.is_err() {
        let key = keys::name(item.path());
        cx.error_spanned_by(int, format!("`{key}` must be at most {}", i32::MAX));
    }
    parsed.ok()
}

/// `key` alone. Anything more is reported: the presence of the key is the value.
pub fn flag(cx: &Ctxt, item: &Meta) -> bool {
    match item {
        Meta::Path(_) => true,
        _ => wrong(cx, item, "no value: write `{key}` alone").unwrap_or(false),
    }
}

/// `key = "..."` where the string holds Rust syntax, e.g. `crate = "my::path"`.
pub fn parsed<T: Parse>(cx: &Ctxt, item: &Meta, what: &str) -> Option<(LitStr, T)> {
    let lit = string(cx, item)?;
    match lit.parse::<T>() {
        Ok(value) => Some((lit, value)),
        Err(err) => {
            let key = keys::name(item.path());
            cx.error_spanned_by(&lit, format!("`{key}` must be {what}: {err}"));
            None
        }
    }
}

/// The value of a `key = value` item.
fn expr(item: &Meta) -> Option<&Expr> {
    match item {
        Meta::NameValue(nv) => Some(&nv.value),
        _ => None,
    }
}

/// Reports that `item` has the wrong shape; `expected` may say `{key}` for the item's key.
fn wrong<T>(cx: &Ctxt, item: &Meta, expected: &str) -> Option<T> {
    let key = keys::name(item.path());
    let expected = expected.replace("{key}", &key);
    cx.error_spanned_by(item, format!("`{key}` takes {expected}"));
    None
}
