//! API semantics: REST storage traits, the generic store, strategies and group assembly.

pub mod served;
