//! kube's `authorizer` library (`k8s.io/apiserver/pkg/cel/library/authz.go`) for admission
//! CEL: `authorizer.group('apps').resource('deployments').namespace('ns').name('n')
//! .check('create').allowed()`, `authorizer.path('/healthz').check('get')`,
//! `authorizer.serviceAccount('ns', 'sa')…`, and a decision's `allowed()`, `reason()`,
//! `errored()`, `error()`.
//!
//! CEL is synchronous: [`Authorize::authorize`] is called on the thread evaluating the
//! expression, so the caller evaluates on a blocking thread when its authorizer is async.
//!
//! ```
//! use std::sync::Arc;
//! use extension_apiserver_machinery::cel::{Activation, Environment, authz, cost::Budget};
//!
//! struct OnlyGet;
//! impl authz::Authorize for OnlyGet {
//!     fn authorize(&self, check: &authz::Check) -> authz::Decision {
//!         authz::Decision::allowed_if(check.verb == "get")
//!     }
//! }
//!
//! let env = Environment::with_libraries(&["authorizer"], authz::install);
//! let expression = env
//!     .compile("authorizer.group('apps').resource('deployments').check('get').allowed()")
//!     .unwrap();
//! let activation = Activation::new().with("authorizer", authz::authorizer(Arc::new(OnlyGet)));
//! let value = expression.evaluate(&activation, &mut Budget::admission()).unwrap();
//! assert_eq!(value, cel::Value::Bool(true));
//! ```

use std::sync::Arc;

use cel::Value;
use cel::common::types::{STRING_TYPE, Type};
use cel::common::value::CowVal;
use cel::objects::Opaque;

/// What a check asks, as kube's `authorizer.AttributesRecord` of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// `serviceAccount(namespace, name)`: ask for this service account rather than the
    /// requester (`system:serviceaccount:{namespace}:{name}`).
    pub service_account: Option<(String, String)>,
    /// A non-resource check's path (`path('/healthz')`); empty for a resource check.
    pub path: String,
    /// The API group.
    pub group: String,
    /// The resource.
    pub resource: String,
    /// The subresource.
    pub subresource: String,
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The verb of `check(verb)`.
    pub verb: String,
}

/// An authorizer's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Whether it is allowed.
    pub allowed: bool,
    /// Why.
    pub reason: String,
    /// An error of the authorizer (empty: none).
    pub error: String,
}

impl Decision {
    /// Allowed when `allowed`, with no reason.
    pub fn allowed_if(allowed: bool) -> Self {
        Self {
            allowed,
            ..Self::default()
        }
    }
}

/// What answers the checks (the server's authorizer, for the requester).
pub trait Authorize: Send + Sync {
    /// Answers `check`.
    fn authorize(&self, check: &Check) -> Decision;
}

const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
const PATH_CHECK: &str = "kubernetes.authorization.PathCheck";
const GROUP_CHECK: &str = "kubernetes.authorization.GroupCheck";
const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";
const DECISION: &str = "kubernetes.authorization.Decision";

/// The authorizer, or a check being built, as an opaque CEL value.
#[derive(Clone)]
struct Builder {
    authorize: Arc<dyn Authorize>,
    check: Check,
    /// One of the type names above.
    kind: &'static str,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.kind)
            .field("check", &self.check)
            .finish()
    }
}

impl PartialEq for Builder {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.authorize, &other.authorize)
            && self.check == other.check
            && self.kind == other.kind
    }
}

impl Eq for Builder {}

impl Opaque for Builder {
    fn runtime_type_name(&self) -> &str {
        self.kind
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct DecisionValue(Decision);

impl Opaque for DecisionValue {
    fn runtime_type_name(&self) -> &str {
        DECISION
    }
}

/// The value of the `authorizer` variable, answering with `authorize`.
pub fn authorizer(authorize: Arc<dyn Authorize>) -> Value {
    Value::Opaque(Arc::new(Builder {
        authorize,
        check: Check::default(),
        kind: AUTHORIZER,
    }))
}

/// The value of `authorizer.requestResource`: a resource check of the request's own resource
/// (`check`'s group, resource, subresource, namespace and name), as kube's
/// `NewResourceAuthorizerVal`; `.check(verb)` asks about it.
pub fn request_resource(authorize: Arc<dyn Authorize>, check: Check) -> Value {
    Value::Opaque(Arc::new(Builder {
        authorize,
        check,
        kind: RESOURCE_CHECK,
    }))
}

type Result<T> = std::result::Result<T, cel::ExecutionError>;

fn value_of(arg: &CowVal<'_, '_>) -> Result<Value> {
    Value::try_from(&**arg)
}

fn builder(arg: &CowVal<'_, '_>, function: &str) -> Result<Builder> {
    match value_of(arg)? {
        Value::Opaque(o) => o
            .downcast_ref::<Builder>()
            .cloned()
            .ok_or_else(|| cel::ExecutionError::function_error(function, "not an authorizer")),
        _ => Err(cel::ExecutionError::function_error(
            function,
            "not an authorizer",
        )),
    }
}

fn string(arg: &CowVal<'_, '_>, function: &str) -> Result<String> {
    match value_of(arg)? {
        Value::String(s) => Ok(s.to_string()),
        _ => Err(cel::ExecutionError::function_error(
            function,
            "expected a string",
        )),
    }
}

fn owned<'b, 'v>(value: Value) -> Result<CowVal<'b, 'v>> {
    let boxed: Box<dyn cel::common::value::Val> = Box::try_from(value)?;
    Ok(CowVal::Owned(boxed))
}

fn decision(arg: &CowVal<'_, '_>, function: &str) -> Result<Decision> {
    match value_of(arg)? {
        Value::Opaque(o) => o
            .downcast_ref::<DecisionValue>()
            .map(|d| d.0.clone())
            .ok_or_else(|| cel::ExecutionError::function_error(function, "not a decision")),
        _ => Err(cel::ExecutionError::function_error(
            function,
            "not a decision",
        )),
    }
}

/// A step of the builder: `target.{function}(string)` sets a field and makes a `kind`.
macro_rules! step {
    ($fn:ident, $name:literal, $kind:expr, |$check:ident, $value:ident| $set:expr) => {
        fn $fn<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
            let mut b = builder(&args[0], $name)?;
            let $value = string(&args[1], $name)?;
            let $check = &mut b.check;
            $set;
            b.kind = $kind;
            owned(Value::Opaque(Arc::new(b)))
        }
    };
}

step!(group, "group", GROUP_CHECK, |c, v| c.group = v);
step!(path, "path", PATH_CHECK, |c, v| c.path = v);
step!(resource, "resource", RESOURCE_CHECK, |c, v| c.resource = v);
step!(subresource, "subresource", RESOURCE_CHECK, |c, v| c
    .subresource =
    v);
step!(namespace, "namespace", RESOURCE_CHECK, |c, v| c.namespace =
    v);
step!(name, "name", RESOURCE_CHECK, |c, v| c.name = v);

fn service_account<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
    let mut b = builder(&args[0], "serviceAccount")?;
    let namespace = string(&args[1], "serviceAccount")?;
    let name = string(&args[2], "serviceAccount")?;
    b.check.service_account = Some((namespace, name));
    owned(Value::Opaque(Arc::new(b)))
}

fn check<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
    let mut b = builder(&args[0], "check")?;
    b.check.verb = string(&args[1], "check")?;
    let answer = b.authorize.authorize(&b.check);
    owned(Value::Opaque(Arc::new(DecisionValue(answer))))
}

fn allowed<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
    owned(Value::Bool(decision(&args[0], "allowed")?.allowed))
}

fn reason<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
    owned(Value::String(decision(&args[0], "reason")?.reason.into()))
}

fn errored<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
    owned(Value::Bool(
        !decision(&args[0], "errored")?.error.is_empty(),
    ))
}

fn error<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>> {
    owned(Value::String(decision(&args[0], "error")?.error.into()))
}

/// Adds the library's functions to `env` (for [`Environment::with_libraries`](super::Environment::with_libraries)).
pub fn install(env: &mut cel::Env) {
    let t = Type::new_opaque_type;
    let s = || STRING_TYPE;
    let member = |env: &mut cel::Env, name: &str, target: &'static str, args: Vec<Type>, op| {
        let id = format!("{target}_{name}");
        env.add_member_overload(name, &id, t(target), args, op)
            .expect("authorizer library overloads are distinct");
    };
    member(env, "group", AUTHORIZER, vec![s()], group);
    member(env, "path", AUTHORIZER, vec![s()], path);
    member(
        env,
        "serviceAccount",
        AUTHORIZER,
        vec![s(), s()],
        service_account,
    );
    member(env, "resource", GROUP_CHECK, vec![s()], resource);
    member(env, "subresource", RESOURCE_CHECK, vec![s()], subresource);
    member(env, "namespace", RESOURCE_CHECK, vec![s()], namespace);
    member(env, "name", RESOURCE_CHECK, vec![s()], name);
    member(env, "check", RESOURCE_CHECK, vec![s()], check);
    member(env, "check", PATH_CHECK, vec![s()], check);
    member(env, "allowed", DECISION, vec![], allowed);
    member(env, "reason", DECISION, vec![], reason);
    member(env, "errored", DECISION, vec![], errored);
    member(env, "error", DECISION, vec![], error);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::cel::cost::Budget;
    use crate::cel::{Activation, Environment};

    #[derive(Default)]
    struct Recorder(Mutex<Vec<Check>>);

    impl Authorize for Recorder {
        fn authorize(&self, check: &Check) -> Decision {
            self.0.lock().unwrap().push(check.clone());
            Decision {
                allowed: check.verb == "get",
                reason: "by the test".into(),
                error: if check.verb == "fail" {
                    "broken".into()
                } else {
                    String::new()
                },
            }
        }
    }

    fn evaluate(source: &str, recorder: &Arc<Recorder>) -> Value {
        let env = Environment::with_libraries(&["authorizer"], install);
        let expression = env.compile(source).unwrap();
        let activation = Activation::new().with("authorizer", authorizer(recorder.clone()));
        expression
            .evaluate(&activation, &mut Budget::admission())
            .unwrap()
    }

    #[test]
    fn resource_checks_carry_every_field() {
        let recorder = Arc::new(Recorder::default());
        let source = "authorizer.serviceAccount('ns', 'sa').group('apps').resource('deployments').subresource('scale').namespace('default').name('web').check('get').allowed()";
        assert_eq!(evaluate(source, &recorder), Value::Bool(true));
        let checks = recorder.0.lock().unwrap().clone();
        assert_eq!(
            checks,
            [Check {
                service_account: Some(("ns".into(), "sa".into())),
                group: "apps".into(),
                resource: "deployments".into(),
                subresource: "scale".into(),
                namespace: "default".into(),
                name: "web".into(),
                verb: "get".into(),
                ..Check::default()
            }]
        );
    }

    #[test]
    fn the_request_resource_is_a_ready_resource_check() {
        let recorder = Arc::new(Recorder::default());
        let env = Environment::with_libraries(&["authorizer"], install);
        let own = Check {
            group: "wardle.example.com".into(),
            resource: "flunders".into(),
            namespace: "default".into(),
            name: "a".into(),
            ..Check::default()
        };
        let activation = Activation::new()
            .with("authorizer", authorizer(recorder.clone()))
            .with(
                "authorizer.requestResource",
                request_resource(recorder.clone(), own.clone()),
            );
        let source =
            "authorizer.requestResource.subresource('status').check('custom-verb').allowed()";
        let expression = env.compile(source).unwrap();
        let value = expression.evaluate(&activation, &mut Budget::admission());
        assert_eq!(value.unwrap(), Value::Bool(false));
        let checks = recorder.0.lock().unwrap().clone();
        let expected = Check {
            subresource: "status".into(),
            verb: "custom-verb".into(),
            ..own
        };
        assert_eq!(checks, [expected]);
    }

    #[test]
    fn paths_and_decisions() {
        let recorder = Arc::new(Recorder::default());
        let source = "authorizer.path('/healthz').check('post').allowed()";
        assert_eq!(evaluate(source, &recorder), Value::Bool(false));
        assert_eq!(recorder.0.lock().unwrap()[0].path, "/healthz");
        let source = "authorizer.group('').resource('pods').check('fail')";
        // Each check costs kube's 350000: two a call at most, so one a question here.
        for question in [
            ".errored()",
            ".error() == 'broken'",
            ".reason() == 'by the test'",
        ] {
            let answer = evaluate(&format!("{source}{question}"), &recorder);
            assert_eq!(answer, Value::Bool(true), "{question}");
        }
        // A third check in one call is beyond the per-call limit.
        let env = Environment::with_libraries(&["authorizer"], install);
        let three = env
            .compile(&format!(
                "{source}.errored() && {source}.errored() && {source}.errored()"
            ))
            .unwrap();
        let activation = Activation::new().with("authorizer", authorizer(recorder.clone()));
        let refused = three.evaluate(&activation, &mut Budget::admission());
        assert!(
            matches!(refused, Err(crate::cel::EvalError::CostExceeded)),
            "{refused:?}"
        );
    }
}
