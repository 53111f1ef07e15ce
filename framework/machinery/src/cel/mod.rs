//! The Common Expression Language as Kubernetes evaluates it (`k8s.io/apiserver/pkg/cel`):
//! the environment with kube's libraries, compilation with kube's error wording, values from
//! JSON objects, and cost limits, so that a rule that loops or explodes is refused or cut,
//! never a hung request.
//!
//! Three users above share it: the registry's schema rules (`x-kubernetes-validations`),
//! and admission's ValidatingAdmissionPolicy and webhooks' `matchConditions`. Each declares
//! its variables ([`Environment::new`]), compiles once ([`Environment::compile`]), and
//! evaluates per request with an [`Activation`] and a [`Budget`].
//!
//! - [`library`]: the functions kube adds to CEL's standard ones (strings, lists, regex,
//!   URLs, IP and CIDR, quantity, format, sets);
//! - [`cost`]: estimated cost of an expression (from the sizes a schema allows) and the
//!   runtime cost of an evaluation, in kube's units;
//! - [`convert`]: JSON to CEL values and back.
//! - [`reads`]: what an expression reads of its variables, so that a caller converts only
//!   that much of a JSON object for each evaluation.

pub mod authz;
mod check;
pub mod convert;
pub mod cost;
pub mod library;
pub mod mutation;
pub mod reads;
mod stack;

use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;

pub use cel::Value;

use self::cost::{Budget, CostEstimate, Sizes};

/// Per-expression runtime cost limit of admission CEL (`PerCallLimit` in
/// `k8s.io/apiserver/pkg/apis/cel/config.go`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// Runtime cost budget of one request's CEL in admission (`RuntimeCELCostBudget`).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// Estimated cost limit of one `x-kubernetes-validations` rule (`PerCallLimit` as the CRD
/// validator applies it statically: `StaticEstimatedCostLimit`).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;

/// Estimated cost limit of all rules of one type (`StaticEstimatedCRDCostLimit`).
pub const STATIC_ESTIMATED_TOTAL_COST_LIMIT: u64 = 100_000_000;

/// Longest expression accepted (`MaxRequestSizeBytes`-derived limit kube applies to a rule's
/// source: `celconfig.MaxRequestSizeBytes`).
pub const MAX_EXPRESSION_LENGTH: usize = 3 * 1024 * 1024;

/// An environment: CEL's standard library, kube's libraries, and the variables the user of
/// this environment declares (`self` and `oldSelf` for schema rules; `object`, `oldObject`,
/// `request`, `params`, `namespaceObject`, `variables`, `authorizer` for admission).
#[derive(Clone)]
pub struct Environment {
    env: Arc<cel::Env>,
    variables: Arc<[&'static str]>,
    /// Functions known beyond CEL's and kube's libraries ([`mutation::FUNCTIONS`]).
    functions: &'static [&'static str],
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("variables", &self.variables)
            .finish_non_exhaustive()
    }
}

impl Environment {
    /// CEL with kube's libraries and `variables` declared.
    pub fn new(variables: &[&'static str]) -> Self {
        Self::with_libraries(variables, |_| {})
    }

    /// CEL with kube's libraries, the functions `extra` adds (admission's `authorizer`), and
    /// `variables` declared.
    pub fn with_libraries(variables: &[&'static str], extra: impl FnOnce(&mut cel::Env)) -> Self {
        let mut env = cel::Env::stdlib().with_optional_support(true);
        library::install(&mut env);
        extra(&mut env);
        Self {
            env: Arc::new(env),
            variables: variables.into(),
            functions: &[],
        }
    }

    /// The environment of a MutatingAdmissionPolicy's mutation `source`: as
    /// [`with_libraries`](Self::with_libraries), with the struct types `source` constructs
    /// (`Object`, `Object.spec`, …, `JSONPatch`) and `jsonpatch.escapeKey` ([`mutation`]).
    pub fn for_mutation(
        variables: &[&'static str],
        source: &str,
        extra: impl FnOnce(&mut cel::Env),
    ) -> Self {
        let names = mutation::struct_type_names(source);
        let mut environment = Self::with_libraries(variables, |env| {
            extra(env);
            mutation::install(env, &names);
        });
        environment.functions = mutation::FUNCTIONS;
        environment
    }

    /// The variables declared.
    pub fn variables(&self) -> &[&'static str] {
        &self.variables
    }

    /// Compiles `source`: a syntax error (with cel-rust's position), a reference to a
    /// variable this environment does not declare or to a function it does not know
    /// (`undeclared reference to 'foo'`), or nesting deeper than [`MAX_NESTING`] (or 96
    /// brackets, cel-rust's parser's limit) is a [`CompileError`] in kube's words.
    pub fn compile(&self, source: &str) -> Result<Expression, CompileError> {
        if source.len() > MAX_EXPRESSION_LENGTH {
            return Err(CompileError::new(format!(
                "expression too long ({} bytes, at most {MAX_EXPRESSION_LENGTH})",
                source.len()
            )));
        }
        // The parser recurses once a bracket, the evaluator once a node: both run on a
        // stack grown to fit the nesting this environment accepts, so deep input is an
        // error, never an overflow of the caller's (a tokio worker's 2 MiB) stack.
        let (program, depth) = stack::grow(stack::PARSE, || self.parse(source))?;
        let constant_cost =
            stack::grow(stack::walk(depth), || cost::constant(program.expression()));
        Ok(Expression {
            program: Arc::new(program),
            source: source.into(),
            env: self.env.clone(),
            depth,
            constant_cost,
        })
    }

    /// Parses and checks `source`; its program and the depth of its tree.
    fn parse(&self, source: &str) -> Result<(cel::Program, usize), CompileError> {
        let program = self.env.compile(source).map_err(|e| {
            let message = e.to_string();
            if message.contains("Recursion limit") {
                CompileError::new(format!("ERROR: <input>: {MAX_NESTING_ERROR}"))
            } else {
                CompileError::new(message)
            }
        })?;
        let depth = stack::depth(program.expression());
        if depth > MAX_NESTING {
            return Err(CompileError::new(format!(
                "ERROR: <input>: {MAX_NESTING_ERROR}"
            )));
        }
        check::references(
            program.expression(),
            program.source_info(),
            &self.variables,
            self.functions,
        )?;
        Ok((program, depth))
    }
}

/// The deepest expression tree accepted: cel-go's default `maxRecursionDepth`, which kube
/// keeps (`self.x == ` repeated 249 times compiles, 250 times does not).
pub const MAX_NESTING: usize = 250;

/// cel-go's words for an expression nested deeper than [`MAX_NESTING`].
const MAX_NESTING_ERROR: &str = "max recursion depth exceeded";

/// A compiled expression, cheap to clone and share between requests.
#[derive(Clone)]
pub struct Expression {
    program: Arc<cel::Program>,
    source: Arc<str>,
    env: Arc<cel::Env>,
    /// The depth of its tree, for the stack its evaluation needs.
    depth: usize,
    /// Its cost when that does not depend on the sizes of the values: found once, when it
    /// is compiled, rather than bounded again for each evaluation.
    constant_cost: Option<u64>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl Expression {
    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The expression's syntax tree (for cost estimation and inspection).
    pub fn ast(&self) -> &cel::common::ast::Expr {
        &self.program.expression().expr
    }

    /// The expression's syntax tree with its node ids (for [`cost`]).
    pub fn ided(&self) -> &cel::IdedExpr {
        self.program.expression()
    }

    /// What each evaluation costs when that does not depend on the sizes of the values:
    /// what [`evaluate`](Self::evaluate) charges the budget.
    pub fn constant_cost(&self) -> Option<u64> {
        self.constant_cost
    }

    /// Its estimated cost, with the largest sizes the variables may have.
    pub fn estimated_cost(&self, sizes: &dyn Sizes) -> CostEstimate {
        stack::grow(stack::walk(self.depth), || {
            cost::estimate(self.program.expression(), sizes)
        })
    }

    /// Evaluates the expression with `activation`'s variables, charging `budget`: an
    /// evaluation whose cost would exceed the budget is not run to the end but refused with
    /// [`EvalError::CostExceeded`].
    pub fn evaluate(
        &self,
        activation: &Activation,
        budget: &mut Budget,
    ) -> Result<Value, EvalError> {
        stack::grow(stack::walk(self.depth), || {
            let bound = match self.constant_cost {
                Some(cost) => cost,
                None => cost::runtime_bound(self.program.expression(), activation),
            };
            budget.charge(bound)?;
            let mut context = cel::Context::with_env(self.env.clone());
            context.set_variable_resolver(activation);
            self.program
                .execute(&context)
                .map_err(|e| EvalError::Runtime(cel_go_message(&e)))
        })
    }
}

/// An evaluation error in cel-go's words where the two engines name the same failure (what
/// kube's messages quote: `resulted in error: no such key: x`); a library function's own
/// error without cel-rust's `Error executing function 'f':` before it, as cel-go reports it.
fn cel_go_message(error: &cel::ExecutionError) -> String {
    use cel::ExecutionError as E;
    match error {
        E::NoSuchKey(key) => format!("no such key: {key}"),
        E::FunctionError { message, .. } => message.clone(),
        E::DivisionByZero(_) => "division by zero".to_string(),
        E::RemainderByZero(_) => "modulus by zero".to_string(),
        E::Overflow(..) => "integer overflow".to_string(),
        other => other.to_string(),
    }
}

/// The values of an evaluation's variables. Each is converted to cel-rust's evaluated form
/// when an evaluation first reads it and kept for the next evaluations with the same
/// activation (the rules of one schema node share their `self`), instead of once per
/// evaluation.
#[derive(Debug, Clone, Default)]
pub struct Activation {
    variables: Vec<Binding>,
}

/// A variable: its name, its value, and the value in the form cel-rust evaluates, once read.
/// A clone of an activation shares its bindings' converted values: a copy that binds one more
/// variable (a rule's optional `oldSelf`) does not convert `self` again.
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    value: Value,
    evaluated: Arc<OnceLock<Box<dyn Val>>>,
}

impl VariableResolver for Activation {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let binding = self.variables.iter().find(|b| b.name == variable)?;
        let evaluated = binding.evaluated.get_or_init(|| {
            // What `Context::add_variable_from_value` did with it: every `Value` a binding
            // holds converts (only a function value does not, and none is bound).
            binding
                .value
                .clone()
                .try_into()
                .expect("a variable's value converts")
        });
        Some(CowVal::Borrowed(evaluated.as_ref()))
    }
}

impl Activation {
    /// No variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to `value`.
    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.set(name, value);
        self
    }

    /// Binds `name` to `value`, replacing an earlier binding.
    pub fn set(&mut self, name: &str, value: Value) {
        let binding = Binding {
            name: name.to_string(),
            value,
            evaluated: Arc::default(),
        };
        match self.variables.iter_mut().find(|b| b.name == name) {
            Some(slot) => *slot = binding,
            None => self.variables.push(binding),
        }
    }

    /// Binds `name` to the CEL value of a JSON value.
    pub fn with_json(self, name: &str, value: &serde_json::Value) -> Self {
        self.with(name, convert::from_json(value))
    }

    /// The value bound to `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.variables
            .iter()
            .find(|b| b.name == name)
            .map(|b| &b.value)
    }
}

/// An expression that does not compile, in kube's words (`compilation failed: ERROR: …`
/// is how the callers above word it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    message: String,
}

impl CompileError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// An evaluation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The evaluation would exceed its cost budget (kube: `operation cancelled: actual cost
    /// limit exceeded`).
    #[error("operation cancelled: actual cost limit exceeded")]
    CostExceeded,
    /// An error of the expression itself (no such key, no matching overload, …).
    #[error("{0}")]
    Runtime(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(source: &str) -> Result<Expression, CompileError> {
        Environment::new(&["self", "oldSelf"]).compile(source)
    }

    fn error_of(source: &str) -> String {
        compile(source).unwrap_err().message().to_string()
    }

    #[test]
    fn undeclared_variables_and_functions_are_refused_in_cel_gos_words() {
        assert_eq!(
            error_of("foo == 1"),
            "ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')"
        );
        assert_eq!(
            error_of("self.x == 1 &&\n  frob(self)"),
            "ERROR: <input>:2:7: undeclared reference to 'frob' (in container '')"
        );
        assert!(error_of("self.frobnicate()").contains("undeclared reference to 'frobnicate'"));
        assert!(error_of("self.all(x, y > 0)").contains("undeclared reference to 'y'"));
    }

    #[test]
    fn what_kube_declares_compiles() {
        for source in [
            "self.all(x, x > 0)",
            "self.exists(x, x == oldSelf)",
            "self.exists_one(x, x == 1)",
            "self.map(x, x * 2).filter(y, y > 2).size() > 0",
            "has(self.a) && type(self) == map",
            "optional.of(1).hasValue() && !optional.none().hasValue()",
            "self.?a.orValue(1) == 1",
            "sets.contains([1], [1])",
            "format.dns1123Label().validate('a') == optional.none()",
            "ip.isCanonical('1.2.3.4') && isIP('1.2.3.4') && cidr('1.2.3.0/24').containsIP('1.2.3.4')",
            "url('https://x/').getHost() == 'x' && quantity('1').isInteger()",
            "'a'.lowerAscii().split('').join(',') == 'a' && [2, 1].sortBy(x, x) == [1, 2]",
            "self.matches('^a') && 'abc'.find('b') == 'b' && [1].sum() == 1",
            "duration('1s') < duration('2s') && timestamp('2024-01-01T00:00:00Z').getFullYear() == 2024",
            "int('1') + uint(1) > 0 && double(1) > 0.0 && string(1) == '1' && bytes('a').size() == 1",
        ] {
            assert!(compile(source).is_ok(), "{source}: {:?}", compile(source));
        }
    }

    #[test]
    fn evaluation_errors_say_what_cel_go_says() {
        let run = |source: &str| {
            let expression = Environment::new(&[]).compile(source).unwrap();
            let mut budget = Budget::admission();
            expression
                .evaluate(&Activation::default(), &mut budget)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(run("{'a': 1}.b == 1"), "no such key: b");
        assert_eq!(run("1 / 0 == 1"), "division by zero");
        assert_eq!(run("1 % 0 == 1"), "modulus by zero");
        assert_eq!(run("9223372036854775807 + 1 > 0"), "integer overflow");
    }

    #[test]
    fn a_syntax_error_keeps_its_position() {
        let message = error_of("self.a ==");
        assert!(message.starts_with("ERROR: "), "{message}");
        assert!(message.contains("1:"), "{message}");
    }

    /// Deep nesting is a compile error, and nesting within the limit evaluates, on a
    /// thread with a small stack (a tokio worker's 2 MiB): never a stack overflow.
    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let handle = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(|| {
                let parens = format!("{}1{}", "(".repeat(500), ")".repeat(500));
                let chain = "self == ".repeat(MAX_NESTING) + "self";
                let lists = format!("{}1{}", "[".repeat(500), "]".repeat(500));
                let refused = [parens, chain, lists].map(|source| compile(&source).map(|_| ()));
                let deepest = compile(&("self == ".repeat(MAX_NESTING - 1) + "self"))
                    .unwrap()
                    .evaluate(
                        &Activation::new().with("self", Value::Bool(true)),
                        &mut Budget::admission(),
                    );
                (refused, deepest)
            })
            .unwrap();
        let (refused, deepest) = handle.join().unwrap();
        for result in refused {
            let error = result.unwrap_err();
            assert_eq!(
                error.message(),
                "ERROR: <input>: max recursion depth exceeded"
            );
        }
        assert!(deepest.is_ok(), "{deepest:?}");
    }

    /// One activation serves several evaluations (its values converted once), and a value
    /// bound again is the one the next evaluation sees, not the one converted before.
    #[test]
    fn an_activation_is_shared_and_rebound() {
        let evaluate = |source: &str, activation: &Activation| {
            compile(source)
                .unwrap()
                .evaluate(activation, &mut Budget::admission())
        };
        let object = convert::from_json(&serde_json::json!({"a": {"b": "x"}, "n": 1}));
        let mut activation = Activation::new().with("self", object);
        assert_eq!(
            evaluate("self.a.b == 'x'", &activation),
            Ok(Value::Bool(true))
        );
        assert_eq!(evaluate("self.n + 1", &activation), Ok(Value::Int(2)));
        assert_eq!(evaluate("has(self.c)", &activation), Ok(Value::Bool(false)));
        activation.set("self", convert::from_json(&serde_json::json!({"n": 5})));
        assert_eq!(evaluate("self.n + 1", &activation), Ok(Value::Int(6)));
        let mut copy = activation.clone();
        assert_eq!(evaluate("self.n", &copy), Ok(Value::Int(5)));
        // The copy lends the original's converted `self` (converted above, not again).
        assert!(Arc::ptr_eq(
            &copy.variables[0].evaluated,
            &activation.variables[0].evaluated
        ));
        // A variable bound in the copy only is not the original's.
        copy.set("oldSelf", Value::Int(1));
        assert_eq!(evaluate("oldSelf == 1", &copy), Ok(Value::Bool(true)));
        assert!(evaluate("oldSelf == 1", &activation).is_err());
        copy.set("self", Value::Int(7));
        assert_eq!(evaluate("self", &copy), Ok(Value::Int(7)));
        assert_eq!(evaluate("self.n", &activation), Ok(Value::Int(5)));
    }
}
