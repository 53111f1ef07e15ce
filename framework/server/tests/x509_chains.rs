//! Client certificates of X.509 v1 and v3 chains as the openssl command makes them: which
//! authenticate, which are refused and why (the authenticator's legacy-leaf path).

use extension_apiserver::auth::X509Authenticator;
use extension_apiserver::tls::certs::parse_certs_pem;
use extension_apiserver_testing::openssl::{KeyType, OpensslCa};
use extension_apiserver_testing::pki::{TestCa, TestCert};

/// The user `root`'s bundle makes of `cert`'s chain, or the error's text.
fn verdict(root: &OpensslCa, cert: &TestCert) -> Result<(String, Vec<String>), String> {
    let chain = parse_certs_pem(cert.cert_pem.as_bytes()).unwrap();
    let auth = X509Authenticator::from_pem(root.cert_pem.as_bytes()).unwrap();
    match auth.authenticate_chain(&chain) {
        Ok(Some(user)) => Ok((user.name, user.groups)),
        Ok(None) => Err("no user".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn refused(root: &OpensslCa, cert: &TestCert, why: &str) {
    let err = verdict(root, cert).expect_err("must be refused");
    assert!(err.contains(why), "{err}");
}

#[test]
fn v1_leaves_of_every_key_type_authenticate() {
    let ca = OpensslCa::of(&TestCa::new("client-ca"));
    for key in [KeyType::Rsa, KeyType::Ecdsa, KeyType::Ed25519] {
        let jane = ca.v1_client("jane", &["devs", "ops"], key);
        let (name, groups) = verdict(&ca, &jane).unwrap();
        assert_eq!(name, "jane", "{key:?}");
        assert_eq!(groups, ["devs", "ops", "system:authenticated"], "{key:?}");
    }
}

#[test]
fn v1_root_and_v3_intermediates_are_followed() {
    let root = OpensslCa::v1_root("legacy-root");
    let jane = root.v1_client("jane", &[], KeyType::Ecdsa);
    assert_eq!(verdict(&root, &jane).unwrap().0, "jane");
    let ca = root.intermediate("issuing", &["basicConstraints=critical,CA:true"]);
    let sub = ca.intermediate("sub", &["basicConstraints=critical,CA:true"]);
    let bob = sub.v1_client("bob", &[], KeyType::Rsa);
    assert_eq!(verdict(&root, &bob).unwrap().0, "bob");
    // The chain must carry the intermediates.
    let (leaf_only, _) = bob
        .cert_pem
        .split_at(bob.cert_pem.find("-----END").unwrap());
    let leaf_only = TestCert {
        cert_pem: format!("{leaf_only}-----END CERTIFICATE-----\n"),
        key_pem: bob.key_pem,
    };
    refused(&root, &leaf_only, "unknown authority");
}

#[test]
fn issuers_must_be_fit_to_sign_for_clients() {
    let root = OpensslCa::v1_root("legacy-root");
    let cases: [(&[&str], &str); 3] = [
        (&[], "not authorized to sign"),
        (
            &[
                "basicConstraints=critical,CA:true",
                "extendedKeyUsage=serverAuth",
            ],
            "incompatible key usage",
        ),
        (
            &[
                "basicConstraints=critical,CA:true",
                "1.2.3.4=critical,ASN1:NULL",
            ],
            "unhandled critical extension 1.2.3.4",
        ),
    ];
    for (extensions, why) in cases {
        let ca = root.intermediate("unfit", extensions);
        refused(&root, &ca.v1_client("jane", &[], KeyType::Ecdsa), why);
    }
    let fine = [
        "basicConstraints=critical,CA:true",
        "extendedKeyUsage=clientAuth",
    ];
    let ca = root.intermediate("fine", &fine);
    assert!(verdict(&root, &ca.v1_client("jane", &[], KeyType::Ecdsa)).is_ok());
    // pathlen:0 allows no intermediate below it.
    let ca = root.intermediate("top", &["basicConstraints=critical,CA:true,pathlen:0"]);
    let sub = ca.intermediate("below", &["basicConstraints=critical,CA:true"]);
    let jane = sub.v1_client("jane", &[], KeyType::Ecdsa);
    refused(&root, &jane, "too many intermediates");
}

#[test]
fn expired_foreign_and_forged_v1_leaves_are_refused() {
    let ca = OpensslCa::of(&TestCa::new("client-ca"));
    let expired = ca.expired_v1_client("jane", &[], KeyType::Rsa);
    refused(&ca, &expired, "expired");
    let foreign = OpensslCa::of(&TestCa::new("other-ca"));
    let stranger = foreign.v1_client("jane", &[], KeyType::Rsa);
    refused(&ca, &stranger, "unknown authority");

    // A leaf whose signature was altered is not the CA's.
    let jane = ca.v1_client("jane", &[], KeyType::Ed25519);
    let mut der = parse_certs_pem(jane.cert_pem.as_bytes()).unwrap()[0].to_vec();
    let last = der.len() - 1;
    der[last] ^= 1;
    let auth = X509Authenticator::from_pem(ca.cert_pem.as_bytes()).unwrap();
    let err = auth.authenticate_chain(&[der.into()]).unwrap_err();
    assert!(err.to_string().contains("signature"), "{err}");
}
