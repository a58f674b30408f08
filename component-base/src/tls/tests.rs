use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls_pki_types::PrivateKeyDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::test_certs::{TestPki, sec1_from_pkcs8, write_pem};
use super::*;

/// Runs one handshake over an in-memory pipe and exchanges a byte, returning
/// the server's view (negotiated ALPN, whether the client presented a
/// certificate) or the first error of either side.
async fn handshake(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
) -> Result<(Option<Vec<u8>>, bool), std::io::Error> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server_side = async {
        let mut tls = TlsAcceptor::from(server).accept(server_io).await?;
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await?;
        let (_, conn) = tls.get_ref();
        Ok::<_, std::io::Error>((
            conn.alpn_protocol().map(<[u8]>::to_vec),
            conn.peer_certificates().is_some(),
        ))
    };
    let client_side = async {
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = TlsConnector::from(client).connect(name, client_io).await?;
        tls.write_all(b"x").await?;
        tls.flush().await?;
        // Keep the stream open until the server has read, then drop it.
        let mut rest = Vec::new();
        let _ = tls.read_to_end(&mut rest).await;
        Ok::<_, std::io::Error>(())
    };
    let (server_result, client_result) = tokio::join!(server_side, client_side);
    let seen = server_result?;
    client_result?;
    Ok(seen)
}

#[tokio::test]
async fn mutual_tls_with_alpn() {
    let pki = TestPki::new();
    let server =
        server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), true, &[b"h2", b"http/1.1"]).unwrap();
    let client = client_config(Some(&pki.ca), Some((&pki.client_cert, &pki.client_key)), &[b"h2"]).unwrap();
    let (alpn, client_authenticated) = handshake(server, client).await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    assert!(client_authenticated);
}

#[tokio::test]
async fn required_client_cert_rejects_anonymous_clients() {
    let pki = TestPki::new();
    let server = server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), true, &[]).unwrap();
    let anonymous = client_config(Some(&pki.ca), None, &[]).unwrap();
    assert!(handshake(server, anonymous).await.is_err());
}

#[tokio::test]
async fn optional_client_cert_admits_anonymous_clients() {
    let pki = TestPki::new();
    let server = server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), false, &[]).unwrap();
    let anonymous = client_config(Some(&pki.ca), None, &[]).unwrap();
    let (alpn, client_authenticated) = handshake(server, anonymous).await.unwrap();
    assert_eq!(alpn, None);
    assert!(!client_authenticated);
}

#[tokio::test]
async fn client_rejects_a_server_from_another_ca() {
    let pki = TestPki::new();
    let other = TestPki::new();
    let server = server_config(&pki.server_cert, &pki.server_key, None, false, &[]).unwrap();
    let client = client_config(Some(&other.ca), None, &[]).unwrap();
    assert!(handshake(server, client).await.is_err());
}

#[tokio::test]
async fn sec1_ec_key_works() {
    let pki = TestPki::new();
    let sec1_path = pki.path("client-sec1.key");
    write_pem(&sec1_path, "EC PRIVATE KEY", &sec1_from_pkcs8(&pki.client_key_pkcs8));
    assert!(matches!(load_private_key(&sec1_path).unwrap(), PrivateKeyDer::Sec1(_)));

    let server = server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), true, &[]).unwrap();
    let client = client_config(Some(&pki.ca), Some((&pki.client_cert, &sec1_path)), &[]).unwrap();
    let (_, client_authenticated) = handshake(server, client).await.unwrap();
    assert!(client_authenticated);
}

#[test]
fn pkcs1_rsa_key_loads() {
    let pki = TestPki::new();
    let key = pki.path("rsa.key");
    let cert = pki.path("rsa.crt");
    let generated = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output();
    if !generated.as_ref().is_ok_and(|out| out.status.success()) {
        eprintln!("skipping: openssl cannot generate an RSA key here");
        return;
    }
    // openssl 3 writes PKCS#8; rewrite the key as traditional PKCS#1.
    let converted = std::process::Command::new("openssl")
        .args(["rsa", "-traditional", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(&key)
        .output()
        .unwrap();
    assert!(converted.status.success());
    assert!(std::fs::read_to_string(&key).unwrap().contains("BEGIN RSA PRIVATE KEY"));
    assert!(matches!(load_private_key(&key).unwrap(), PrivateKeyDer::Pkcs1(_)));
    server_config(&cert, &key, None, false, &[]).unwrap();
}

#[test]
fn errors_name_the_file() {
    let pki = TestPki::new();
    let missing = pki.path("missing.crt");
    let err = server_config(&missing, &pki.server_key, None, false, &[]).unwrap_err();
    assert!(matches!(err, Error::Pem { .. }));
    assert!(err.to_string().contains("missing.crt"), "{err}");

    // A certificate where a key should be.
    let err = server_config(&pki.server_cert, &pki.server_cert, None, false, &[]).unwrap_err();
    assert!(matches!(err, Error::NoPrivateKey { .. }), "{err}");
    assert!(err.to_string().contains("server.crt"), "{err}");

    // A key where a certificate should be.
    let err = server_config(&pki.server_key, &pki.server_key, None, false, &[]).unwrap_err();
    assert!(matches!(err, Error::NoCertificates { .. }), "{err}");

    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n").unwrap();
    let err = load_certs(&garbage).unwrap_err();
    assert!(err.to_string().contains("garbage.pem"), "{err}");
}

#[test]
fn mismatched_key_is_rejected() {
    let pki = TestPki::new();
    let err = server_config(&pki.server_cert, &pki.client_key, None, false, &[]).unwrap_err();
    assert!(matches!(err, Error::KeyPair { .. }), "{err}");
    assert!(err.to_string().contains("server.crt") && err.to_string().contains("client.key"));
}

#[test]
fn requiring_client_certs_needs_a_ca() {
    let pki = TestPki::new();
    let err = server_config(&pki.server_cert, &pki.server_key, None, true, &[]).unwrap_err();
    assert!(matches!(err, Error::ClientCaRequired));
}

#[test]
fn client_without_ca_uses_system_roots() {
    // The machines carry Debian's ca-certificates; elsewhere the error must say where it looked.
    match client_config(None, None, &[]) {
        Ok(_) => {}
        Err(err @ Error::NoSystemRoots { .. }) => eprintln!("no system roots here: {err}"),
        Err(err) => panic!("unexpected error: {err}"),
    }
}

#[test]
fn policy_restricts_versions_and_tls12_suites() {
    let p = super::Policy { min_version: Some("VersionTLS13".into()), cipher_suites: vec![] };
    assert_eq!(p.versions().unwrap().len(), 1);
    assert!(
        super::Policy { min_version: Some("VersionTLS10".into()), ..Default::default() }.versions().is_err()
    );
    let p = super::Policy {
        min_version: None,
        cipher_suites: vec![
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305".into(),
        ],
    };
    let provider = p.provider().unwrap();
    let tls12: Vec<String> = provider
        .cipher_suites
        .iter()
        .filter(|s| s.tls13().is_none())
        .map(|s| format!("{:?}", s.suite()))
        .collect();
    assert_eq!(tls12.len(), 2, "{tls12:?}");
    assert!(provider.cipher_suites.iter().any(|s| s.tls13().is_some()), "TLS 1.3 suites stay");
    let bad = super::Policy { min_version: None, cipher_suites: vec!["TLS_RSA_WITH_RC4_128_SHA".into()] };
    assert!(bad.provider().unwrap_err().to_string().contains("TLS_RSA_WITH_RC4_128_SHA"));
}
