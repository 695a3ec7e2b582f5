//! TLS client configurations for talking to API servers and health URLs, shared by the
//! plugin runtime's egress (the contract's `http` and `wasi:http`) and the native prober
//! of the test kit, so that both trust and identify themselves the same way.
//!
//! A [`TlsClients`] holds what every connection shares (the `ring` crypto provider and the
//! system trust store, loaded once on first use) and builds a fresh rustls
//! [`ClientConfig`] per request from PEM material: which servers to trust ([`Trust`]) and,
//! for mutual TLS, the client's certificate chain and key. Errors name what is wrong with
//! the material and never contain it.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Which server certificates a client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust<'a> {
    /// Certificates that chain to the system trust store (kubectl's behaviour for a
    /// cluster without `certificate-authority`).
    System,
    /// Certificates that chain to these PEM CA certificates, and only those.
    Ca(&'a [u8]),
    /// Any certificate (kubeconfig's `insecure-skip-tls-verify`); the handshake
    /// signatures are still checked.
    SkipVerify,
}

/// A client certificate chain and its private key, both PEM, for mutual TLS.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Identity<'a> {
    /// The certificate chain, leaf first.
    pub certificate_pem: &'a [u8],
    /// The private key of the leaf.
    pub key_pem: &'a [u8],
}

impl std::fmt::Debug for Identity<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is secret; its presence is all a log may show.
        f.debug_struct("Identity").finish_non_exhaustive()
    }
}

/// Why a client configuration could not be built. The messages describe the material,
/// never quote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// rustls refused the protocol set-up.
    #[error("TLS set-up failed: {0}")]
    Setup(String),
    /// The CA bundle holds something that is not a PEM certificate.
    #[error("the CA is not PEM")]
    CaNotPem,
    /// A CA certificate is not one rustls accepts as a trust anchor.
    #[error("the CA certificate is invalid")]
    CaInvalid,
    /// The client certificate is not PEM.
    #[error("the client certificate is not PEM")]
    CertificateNotPem,
    /// The client key is not a PEM private key.
    #[error("the client key is not PEM")]
    KeyNotPem,
    /// The client certificate and key do not belong together.
    #[error("the client certificate and key do not fit")]
    IdentityMismatch,
    /// Only one of the client certificate and key was given.
    #[error("a client certificate needs its key, and a key its certificate")]
    IncompleteIdentity,
    /// The name to verify the server against is not a DNS name or an IP address.
    #[error("invalid TLS server name")]
    ServerName,
}

/// Builds TLS client configurations. Cheap to clone: clones share the provider and the
/// system trust store.
#[derive(Debug, Clone)]
pub struct TlsClients {
    provider: Arc<CryptoProvider>,
    system_roots: Arc<OnceLock<Arc<RootCertStore>>>,
}

impl Default for TlsClients {
    fn default() -> Self {
        Self {
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            system_roots: Arc::new(OnceLock::new()),
        }
    }
}

impl TlsClients {
    /// A builder with the `ring` provider; the system trust store is read on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The system trust store, read once. Certificates it cannot parse are skipped, as
    /// other TLS clients skip them.
    fn system_roots(&self) -> Arc<RootCertStore> {
        Arc::clone(self.system_roots.get_or_init(|| {
            let mut roots = RootCertStore::empty();
            for certificate in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(certificate);
            }
            Arc::new(roots)
        }))
    }

    /// A client configuration that accepts servers by `trust` and, given an `identity`,
    /// presents it to servers that ask for a client certificate.
    pub fn client_config(
        &self,
        trust: Trust<'_>,
        identity: Option<Identity<'_>>,
    ) -> Result<ClientConfig, TlsError> {
        let builder = ClientConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        let builder = match trust {
            Trust::SkipVerify => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipVerify(
                    self.provider.signature_verification_algorithms,
                ))),
            Trust::Ca(pem) => {
                let mut roots = RootCertStore::empty();
                for certificate in CertificateDer::pem_slice_iter(pem) {
                    let certificate = certificate.map_err(|_| TlsError::CaNotPem)?;
                    roots.add(certificate).map_err(|_| TlsError::CaInvalid)?;
                }
                builder.with_root_certificates(roots)
            }
            Trust::System => builder.with_root_certificates(self.system_roots()),
        };
        match identity {
            Some(identity) => {
                let chain = CertificateDer::pem_slice_iter(identity.certificate_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| TlsError::CertificateNotPem)?;
                if chain.is_empty() {
                    return Err(TlsError::CertificateNotPem);
                }
                let key = PrivateKeyDer::from_pem_slice(identity.key_pem)
                    .map_err(|_| TlsError::KeyNotPem)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|_| TlsError::IdentityMismatch)
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }

    /// Like [`TlsClients::client_config`], from a certificate and a key that may each be
    /// missing, as a kubeconfig user or a plugin's request gives them: both or neither.
    pub fn client_config_parts(
        &self,
        trust: Trust<'_>,
        certificate_pem: Option<&[u8]>,
        key_pem: Option<&[u8]>,
    ) -> Result<ClientConfig, TlsError> {
        let identity = match (certificate_pem, key_pem) {
            (Some(certificate_pem), Some(key_pem)) => Some(Identity {
                certificate_pem,
                key_pem,
            }),
            (None, None) => None,
            _ => return Err(TlsError::IncompleteIdentity),
        };
        self.client_config(trust, identity)
    }
}

/// The name a server's certificate is checked against: `name` when given (kubeconfig's
/// `tls-server-name`), else the host the client connects to.
pub fn server_name(host: &str, name: Option<&str>) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.unwrap_or(host).to_owned()).map_err(|_| TlsError::ServerName)
}

/// `insecure-skip-tls-verify`: accepts any server certificate, still checks the handshake
/// signatures.
#[derive(Debug)]
struct SkipVerify(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_material_is_named_not_quoted() {
        let clients = TlsClients::new();
        let check = |trust: Trust<'_>, certificate: Option<&[u8]>, key: Option<&[u8]>| {
            clients.client_config_parts(trust, certificate, key).err()
        };
        assert_eq!(check(Trust::SkipVerify, None, None), None);
        assert_eq!(check(Trust::Ca(b""), None, None), None);
        assert_eq!(
            check(
                Trust::Ca(b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"),
                None,
                None
            ),
            Some(TlsError::CaNotPem)
        );
        assert_eq!(
            check(Trust::SkipVerify, Some(b"secret-cert"), None),
            Some(TlsError::IncompleteIdentity)
        );
        let error = check(Trust::SkipVerify, Some(b"secret-cert"), Some(b"secret-key"))
            .expect("no PEM certificate in it");
        assert_eq!(error, TlsError::CertificateNotPem);
        assert!(!error.to_string().contains("secret"));
    }

    #[test]
    fn server_names_fall_back_to_the_host() {
        assert!(server_name("127.0.0.1", None).is_ok());
        assert!(server_name("127.0.0.1", Some("kubernetes.default")).is_ok());
        assert_eq!(
            server_name("127.0.0.1", Some("not a name")),
            Err(TlsError::ServerName)
        );
    }
}
