//! The model of `#[resource(...)]`: every key as written, with its span, before any checks.
//!
//! Parsing only reads shapes (a string here, a list there) and reports unknown or repeated
//! keys; whether the values make sense is `check.rs`'s job, so both kinds of mistake are
//! reported together.

mod keys;
mod printcolumn;
mod scale;
mod validation;
mod value;

use std::collections::HashSet;

use syn::{Attribute, LitStr, Meta, Path, Type};

use crate::ctxt::Ctxt;
use keys::Keys;
pub use printcolumn::PrintColumn;
pub use scale::Scale;
pub use validation::Validation;

const KEYS: &[&str] = &[
    "group",
    "version",
    "kind",
    "plural",
    "singular",
    "namespaced",
    "status",
    "scale",
    "shortnames",
    "categories",
    "printcolumn",
    "selectable_field",
    "validation",
    "validate",
    "validate_update",
    "defaults",
    "allow_unconditional_update",
    "allow_create_on_update",
    "custom_strategy",
    "garbage_collection",
    "crate",
];

const REPEATABLE: &[&str] = &["printcolumn", "selectable_field", "validation"];

/// Everything given in the `#[resource(...)]` attributes of one type.
#[derive(Default)]
pub struct ResourceAttrs {
    /// The first `#[resource(...)]`, where errors about missing keys point.
    pub attr: Option<Attribute>,
    /// `group = "..."`.
    pub group: Option<LitStr>,
    /// `version = "..."`.
    pub version: Option<LitStr>,
    /// `kind = "..."`.
    pub kind: Option<LitStr>,
    /// `plural = "..."`.
    pub plural: Option<LitStr>,
    /// `singular = "..."`.
    pub singular: Option<LitStr>,
    /// `namespaced`.
    pub namespaced: bool,
    /// `status = "Type"`.
    pub status: Option<Status>,
    /// `scale(...)`.
    pub scale: Option<Scale>,
    /// `shortnames = [...]`.
    pub shortnames: Vec<LitStr>,
    /// `categories = [...]`.
    pub categories: Vec<LitStr>,
    /// Each `printcolumn(...)`, in order.
    pub printcolumns: Vec<PrintColumn>,
    /// Each `selectable_field = "..."`, in order.
    pub selectable_fields: Vec<LitStr>,
    /// Each `validation(...)` rule, in order.
    pub validations: Vec<Validation>,
    /// `validate = path`.
    pub validate: Option<Path>,
    /// `validate_update = path`.
    pub validate_update: Option<Path>,
    /// `defaults = path`.
    pub defaults: Option<Path>,
    /// `allow_unconditional_update`.
    pub allow_unconditional_update: bool,
    /// `allow_create_on_update`.
    pub allow_create_on_update: bool,
    /// `custom_strategy`: the path of the key, where conflicts point.
    pub custom_strategy: Option<Path>,
    /// `garbage_collection = "OrphanDependents"`.
    pub garbage_collection: Option<LitStr>,
    /// `crate = "path"`.
    pub crate_path: Option<Path>,
    /// The keys that appeared, well-formed or not.
    pub given: HashSet<String>,
}

/// `status = "FlunderStatus"`: the type of the `status` field.
pub struct Status {
    /// The whole `status = "..."` item, where errors about the field point.
    pub item: Meta,
    /// The string as written, where type mismatches point.
    pub lit: LitStr,
    /// The type it names.
    pub ty: Type,
}

impl ResourceAttrs {
    /// Reads every `#[resource(...)]` among `attrs`, reporting malformed or unknown keys.
    pub fn from_attributes(cx: &Ctxt, attrs: &[Attribute]) -> Self {
        let mut out = Self::default();
        let mut keys = Keys::new("#[resource(...)]", KEYS, REPEATABLE);
        for attr in attrs.iter().filter(|a| a.path().is_ident("resource")) {
            out.attr.get_or_insert_with(|| attr.clone());
            for item in value::items(cx, attr) {
                if let Some(key) = keys.accept(cx, &item) {
                    out.set(cx, &key, &item);
                }
            }
        }
        out.given = keys.into_given();
        out
    }

    fn set(&mut self, cx: &Ctxt, key: &str, item: &Meta) {
        match key {
            "group" => self.group = value::string(cx, item),
            "version" => self.version = value::string(cx, item),
            "kind" => self.kind = value::string(cx, item),
            "plural" => self.plural = value::string(cx, item),
            "singular" => self.singular = value::string(cx, item),
            "namespaced" => self.namespaced = value::flag(cx, item),
            "status" => self.status = Status::from_meta(cx, item),
            "scale" => self.scale = Scale::from_meta(cx, item),
            "shortnames" => self.shortnames = value::strings(cx, item),
            "categories" => self.categories = value::strings(cx, item),
            "printcolumn" => self.printcolumns.extend(PrintColumn::from_meta(cx, item)),
            "selectable_field" => self.selectable_fields.extend(value::string(cx, item)),
            "validation" => self.validations.extend(Validation::from_meta(cx, item)),
            "validate" => self.validate = value::path(cx, item),
            "validate_update" => self.validate_update = value::path(cx, item),
            "defaults" => self.defaults = value::path(cx, item),
            "allow_unconditional_update" => self.allow_unconditional_update = value::flag(cx, item),
            "allow_create_on_update" => self.allow_create_on_update = value::flag(cx, item),
            "custom_strategy" => {
                if value::flag(cx, item) {
                    self.custom_strategy = Some(item.path().clone());
                }
            }
            "garbage_collection" => self.garbage_collection = value::string(cx, item),
            "crate" => {
                self.crate_path =
                    value::parsed(cx, item, "a path such as `my::path`").map(|(_, p)| p)
            }
            _ => unreachable!("`Keys` accepts only the keys in `KEYS`"),
        }
    }
}

impl Status {
    fn from_meta(cx: &Ctxt, item: &Meta) -> Option<Self> {
        let (lit, ty) = value::parsed(cx, item, "a type such as `FlunderStatus`")?;
        Some(Self {
            item: item.clone(),
            lit,
            ty,
        })
    }
}
