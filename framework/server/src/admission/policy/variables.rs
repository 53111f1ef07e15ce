//! A policy's `variables`, as kube's composition environment binds them for both policy
//! kinds: evaluated in order, each seeing the ones before it, only those some expression
//! reads; an expression that reads a variable that failed fails with that variable's error.

use std::collections::HashMap;

use extension_apiserver_machinery::cel::cost::Budget;
use extension_apiserver_machinery::cel::{Activation, Value};

use crate::admission::cel::{Compiled, OUT_OF_BUDGET};

/// `variables`, compiled, in order.
#[derive(Debug, Default)]
pub(crate) struct Variables {
    list: Vec<(String, Compiled)>,
}

/// An activation with `variables` bound, and the variables that failed, with why.
pub(crate) struct Bound {
    pub(crate) activation: Activation,
    failed: Vec<(String, String)>,
}

impl Variables {
    /// Compiles `(name, expression)` pairs.
    pub(crate) fn compile<'a>(variables: impl Iterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            list: variables
                .map(|(name, expression)| (name.to_string(), Compiled::new(expression)))
                .collect(),
        }
    }

    /// `activation` with `variables` bound to the variables `readers` (the sources of the
    /// policy's other expressions) read, each evaluated in order with the ones before it.
    pub(crate) fn bind<'s>(
        &self,
        activation: &Activation,
        readers: impl Iterator<Item = &'s str> + Clone,
        budget: &mut Budget,
    ) -> Bound {
        let mut bound = Bound {
            activation: activation.clone(),
            failed: Vec::new(),
        };
        if self.list.is_empty() {
            return bound;
        }
        let mut needed: Vec<bool> = self
            .list
            .iter()
            .map(|(name, _)| readers.clone().any(|source| reads(source, name)))
            .collect();
        // A variable read by a needed later one is needed too.
        for i in (0..self.list.len()).rev() {
            if needed[i] {
                let source = &self.list[i].1.source;
                for (j, (name, _)) in self.list[..i].iter().enumerate() {
                    needed[j] |= reads(source, name);
                }
            }
        }
        let mut values: HashMap<String, Value> = HashMap::new();
        for ((name, compiled), needed) in self.list.iter().zip(needed) {
            if !needed {
                continue;
            }
            // A variable reading one that failed fails with that one's error, as is.
            let upstream = bound
                .failed
                .iter()
                .find(|(n, _)| reads(&compiled.source, n))
                .map(|(_, why)| why.clone());
            let value = match upstream {
                Some(why) => Err(why),
                None => compiled.evaluate(&bound.activation, budget),
            };
            match value {
                Ok(value) => {
                    values.insert(name.clone(), value);
                    bound.activation.set("variables", values.clone().into());
                }
                Err(why) => bound.failed.push((name.clone(), why)),
            }
        }
        bound
    }
}

impl Bound {
    /// Evaluates `compiled` with the variables bound, failing when it reads one that
    /// failed (with kube's wording of that variable's error).
    pub(crate) fn evaluate(
        &self,
        compiled: &Compiled,
        budget: &mut Budget,
    ) -> Result<Value, String> {
        let failed = self
            .failed
            .iter()
            .find(|(name, _)| reads(&compiled.source, name));
        match failed {
            Some((_, why)) if why == OUT_OF_BUDGET => Err(OUT_OF_BUDGET.to_string()),
            Some((_, why)) => Err(format!(
                "expression '{}' resulted in error: {why}",
                compiled.source
            )),
            None => compiled.evaluate(&self.activation, budget),
        }
    }
}

/// Whether `source` reads `variables.{name}`.
fn reads(source: &str, name: &str) -> bool {
    let needle = format!("variables.{name}");
    source.match_indices(&needle).any(|(at, _)| {
        let next = source[at + needle.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_whole_names_only() {
        assert!(reads("variables.a + 1", "a"));
        assert!(!reads("variables.ab + 1", "a"));
    }
}
