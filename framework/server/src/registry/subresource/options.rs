//! Query parameters to typed options, as kube's parameter codec converts a query into
//! `PodLogOptions`: booleans (`true`/`false`/`1`/`0`, Go's `strconv.ParseBool`), integers,
//! strings, repeated parameters for lists; unknown parameters ignored; a bad value 400.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;

/// Options of a subresource that takes none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoOptions {}

/// Decodes `O` from query parameters `pairs` (decoded, in order): what no parameter names
/// keeps `O::default()`'s value. A value that does not convert to its field's type is 400
/// `BadRequest`, as kube answers `?tailLines=abc`.
///
/// ```
/// use extension_apiserver::registry::subresource::decode_options;
/// #[derive(Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// #[serde(rename_all = "camelCase")]
/// struct LogOptions { follow: bool, tail_lines: Option<i64>, container: Option<String> }
/// let pairs = [("follow".to_string(), "1".to_string()), ("tailLines".into(), "10".into())];
/// let o: LogOptions = decode_options(&pairs).unwrap();
/// assert!(o.follow);
/// assert_eq!(o.tail_lines, Some(10));
/// let bad = [("tailLines".to_string(), "ten".to_string())];
/// assert!(decode_options::<LogOptions>(&bad).is_err());
/// ```
pub fn decode_options<O>(pairs: &[(String, String)]) -> Result<O>
where
    O: DeserializeOwned + Default + Serialize + JsonSchema,
{
    let _ = pairs;
    todo!()
}

#[allow(dead_code)]
fn unused(_: Map<String, Value>) {}
