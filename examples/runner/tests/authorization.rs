//! Each subresource is authorized as itself in delegated mode (TokenReview and
//! SubjectAccessReview on a fake core kube-apiserver): a user allowed only `get runs` reads
//! runs but is refused `runs/log`, `runs/attach`, `runs/cancel` and `runs/summary`; an
//! operator allowed them uses them.

use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
use extension_apiserver_testing::pki::TestCa;
use kube::Api;
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use runner::{Run, RunPhase, Runner, RunnerOptions};

use crate::common::{self, ALLOWED, get, path, phase, post, wait_for};
use crate::ws;

const CALLER: &str = "system:serviceaccount:runner:apiserver";

/// A client of `server` sending `token` (its admin kubeconfig, another user).
async fn client_with_token(server: &TestServer, token: &str) -> kube::Client {
    let mut kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    for user in &mut kubeconfig.auth_infos {
        user.auth_info = Some(AuthInfo {
            token: Some(token.to_string().into()),
            ..AuthInfo::default()
        });
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_allowed_only_get_runs_is_refused_each_subresource() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let (client_ca, front_proxy) = (TestCa::new("client-ca"), TestCa::new("front-proxy-ca"));
    core.set_authentication_config(&AuthenticationConfig::with_front_proxy(
        &client_ca.cert_pem,
        &front_proxy.cert_pem,
    ));
    for (token, name) in [("viewer-token", "viewer"), ("operator-token", "operator")] {
        let user = TokenUser {
            username: name.into(),
            groups: vec!["system:authenticated".into()],
            ..TokenUser::default()
        };
        core.add_token(token, user);
    }
    core.allow(Rule::user(
        "viewer",
        &["get", "list"],
        runner::GROUP,
        &["runs"],
    ));
    let operator_resources = [
        "runs",
        "runs/log",
        "runs/attach",
        "runs/cancel",
        "runs/summary",
    ];
    core.allow(Rule::user(
        "operator",
        &["get", "list", "create"],
        runner::GROUP,
        &operator_resources,
    ));

    let kubeconfig = core.kubeconfig(CALLER);
    let runner = Runner::new(RunnerOptions::allowing(&ALLOWED));
    let server = TestServer::builder()
        .dir(dir.path())
        .options(move |options| {
            options.auth.authentication_kubeconfig = Some(kubeconfig.clone());
            options.auth.authorization_kubeconfig = Some(kubeconfig);
        })
        .extend(move |server| runner.install(server))
        .start()
        .await;
    let viewer = client_with_token(&server, "viewer-token").await;
    let operator = client_with_token(&server, "operator-token").await;

    let runs: Api<Run> = Api::namespaced(operator.clone(), "default");
    common::create(&runs, "cat", &["/bin/cat"], true).await;
    wait_for(&runs, "cat", |r| phase(r) == RunPhase::Running).await;
    let viewed: Api<Run> = Api::namespaced(viewer.clone(), "default");
    assert_eq!(
        viewed.get("cat").await.unwrap().metadata.name.as_deref(),
        Some("cat")
    );

    let refused = |code: u16, body: &str, what: &str| {
        assert_eq!(code, 403, "{what}: {body}");
        let message = common::status(body)["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains(&format!("User \"viewer\" cannot {what}")),
            "{message}"
        );
    };
    let (code, body) = get(&viewer, &path("cat", "log", "")).await;
    refused(code, &body, "get resource \"runs/log\"");
    let (code, body) = get(&viewer, &path("cat", "summary", "")).await;
    refused(code, &body, "get resource \"runs/summary\"");
    let (code, body) = post(&viewer, &path("cat", "cancel", ""), "{}").await;
    refused(code, &body, "create resource \"runs/cancel\"");
    let attach = path("cat", "attach", "stdin=true&stdout=true");
    match ws::connect(&viewer, &attach, "v5.channel.k8s.io").await {
        Ok(_) => panic!("the viewer attached"),
        Err(response) => assert_eq!(response.status().as_u16(), 403),
    }

    // The operator may: each answer is the subresource's own.
    let (code, _) = get(&operator, &path("cat", "summary", "")).await;
    assert_eq!(code, 200);
    let Ok(mut channels) = ws::connect(&operator, &attach, "v5.channel.k8s.io").await else {
        panic!("the operator may attach");
    };
    channels.send(ws::STDIN, b"hi\n").await;
    let mut got = ws::Received::default();
    channels.read_stdout_until(b"hi\n", &mut got).await;
    channels.close_stdin().await;
    let got = channels.read_to_end(got).await;
    assert_eq!(got.status()["status"], "Success");
    let (code, body) = get(&operator, &path("cat", "log", "")).await;
    assert_eq!((code, body.as_str()), (200, "hi\n"));

    // Every decision went to the core's SubjectAccessReview, with the subresource.
    let reviews = core.access_reviews();
    let asked = |subresource: &str| {
        reviews
            .iter()
            .any(|r| r["user"] == "viewer" && r["resourceAttributes"]["subresource"] == subresource)
    };
    for subresource in ["log", "attach", "cancel", "summary"] {
        assert!(asked(subresource), "{subresource}: {reviews:?}");
    }
    server.stop().await;
}
