//! The cost of schema rules per write, in process: the work the store adds to each create of
//! a Flunder (its CEL rules and its `referenceType` enum: encode the object, validate it)
//! against a Fischer, whose schema declares nothing (no validator, no work). Printed beside
//! the serving figures, never asserted.

use std::hint::black_box;
use std::time::Instant;

use extension_apiserver::codec::encode_typed;
use extension_apiserver::registry::schema_validation::SchemaValidator;
use wardle::{Fischer, Flunder};

use crate::report::Row;

/// Validations timed per figure.
const ROUNDS: u32 = 20_000;

pub fn rows() -> Vec<Row> {
    let flunder: Flunder = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "f", "namespace": "default"},
        "spec": {"reference": "trout", "referenceType": "Fischer"},
    }))
    .expect("a flunder");
    let with = match SchemaValidator::for_type::<Flunder>() {
        Ok(Some(validator)) => validator,
        other => return vec![Row::plain("schema rules per write", format!("{other:?}"))],
    };
    let without = SchemaValidator::for_type::<Fischer>().ok().flatten();
    let started = Instant::now();
    for _ in 0..ROUNDS {
        let object = encode_typed(black_box(&flunder)).expect("encodes");
        black_box(with.validate(&object, None));
    }
    let per_write = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
    vec![
        Row::plain(
            "schema rules per write: Flunder (2 CEL rules, 1 enum)",
            format!("{per_write:.1} µs"),
        ),
        Row::plain(
            "schema rules per write: Fischer (none declared)",
            match without {
                None => "0 µs (no validator)".to_string(),
                Some(_) => "has a validator".to_string(),
            },
        ),
    ]
}
