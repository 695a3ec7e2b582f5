//! Certificates and TLS configuration of the fake clusters.
//!
//! Each cluster has its own CA (ECDSA P-256) and a server certificate signed by it, whose
//! SANs cover the cluster's IP address and `localhost`. (webpki refuses a self-signed
//! certificate used as both CA and server certificate, hence the separate CA.)
//!
//! Client certificates are *requested* during the handshake but verified only afterwards,
//! by [`identify_peer`], with a `WebPkiClientVerifier` built with `allow_unauthenticated()`.
//! That is how kube-apiserver behaves (Go's `tls.RequestClientCert`, then the x509
//! authenticator): a certificate from the wrong CA gets an HTTP 401 with a `Status` body,
//! not a failed handshake, and a token can still authenticate the request.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName as TlsName, RootCertStore, ServerConfig,
    SignatureScheme,
};

use crate::auth::{PeerCertificate, User};

/// Sessions each cluster remembers for resumption. Kept small: 10,000 clusters each with
/// rustls' default of 256 would cost hundreds of megabytes.
const SESSION_CACHE_SIZE: usize = 32;

/// Errors while generating certificates or building TLS configurations.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen could not generate a key or sign a certificate.
    #[error("cannot generate a certificate")]
    Generate(#[source] rcgen::Error),
    /// rustls refused a certificate, key or configuration.
    #[error("invalid TLS configuration")]
    Rustls(#[source] rustls::Error),
    /// The client-certificate verifier could not be built.
    #[error("cannot build the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// A PEM input held no certificate.
    #[error("no certificate found in the PEM input")]
    NoCertificate,
}

/// The crypto provider shared by every configuration (ring).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Fills `buf` with cryptographically secure random bytes.
pub(crate) fn random_bytes(buf: &mut [u8]) -> Result<(), TlsError> {
    provider()
        .secure_random
        .fill(buf)
        .map_err(|_| TlsError::Rustls(rustls::Error::FailedToGetRandomBytes))
}

/// A certificate and its private key, PEM and DER.
pub struct IssuedCertificate {
    certificate_pem: String,
    key_pem: String,
    certificate_der: CertificateDer<'static>,
    key_der: PrivatePkcs8KeyDer<'static>,
}

impl IssuedCertificate {
    /// The certificate, PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The private key (PKCS#8), PEM. A secret.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The certificate, DER.
    pub fn certificate_der(&self) -> &CertificateDer<'static> {
        &self.certificate_der
    }

    /// The private key, DER, for rustls.
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key_der.clone_key())
    }
}

impl Clone for IssuedCertificate {
    fn clone(&self) -> Self {
        Self {
            certificate_pem: self.certificate_pem.clone(),
            key_pem: self.key_pem.clone(),
            certificate_der: self.certificate_der.clone(),
            key_der: self.key_der.clone_key(),
        }
    }
}

impl fmt::Debug for IssuedCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCertificate")
            .field("certificate_pem", &self.certificate_pem)
            .finish_non_exhaustive()
    }
}

/// A certificate authority of one fake cluster.
#[derive(Debug)]
pub struct CertificateAuthority {
    certificate_pem: String,
    certificate_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl CertificateAuthority {
    /// Generates a new CA (ECDSA P-256) named `common_name`.
    pub fn generate(common_name: &str) -> Result<Self, TlsError> {
        let key = KeyPair::generate().map_err(TlsError::Generate)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let certificate = params.self_signed(&key).map_err(TlsError::Generate)?;
        Ok(Self {
            certificate_pem: certificate.pem(),
            certificate_der: certificate.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM (what a kubeconfig's `certificate-authority-data` holds,
    /// base64-encoded).
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The CA certificate, DER.
    pub fn certificate_der(&self) -> &CertificateDer<'static> {
        &self.certificate_der
    }

    /// Issues a server certificate for `ip`, also valid for `localhost` and the in-cluster
    /// names of the `kubernetes` service.
    pub fn issue_server_certificate(&self, ip: IpAddr) -> Result<IssuedCertificate, TlsError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.subject_alt_names = vec![SanType::IpAddress(ip)];
        for dns in [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
        ] {
            params.subject_alt_names.push(SanType::DnsName(
                dns.try_into().map_err(TlsError::Generate)?,
            ));
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        self.issue(&params)
    }

    /// Issues a client certificate for `user`: CN is the name, O the first group. (rcgen
    /// writes each attribute once, so one group per certificate.)
    pub fn issue_client_certificate(&self, user: &User) -> Result<IssuedCertificate, TlsError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        if let Some(group) = user.groups.first() {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group.as_str());
        }
        params
            .distinguished_name
            .push(DnType::CommonName, user.name.as_str());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        self.issue(&params)
    }

    fn issue(&self, params: &CertificateParams) -> Result<IssuedCertificate, TlsError> {
        let key = KeyPair::generate().map_err(TlsError::Generate)?;
        let certificate = params
            .signed_by(&key, &self.issuer)
            .map_err(TlsError::Generate)?;
        Ok(IssuedCertificate {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            certificate_der: certificate.der().clone(),
            key_der: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }
}

/// The TLS side of one cluster at one moment; replaced as a whole on rotation.
#[derive(Debug)]
pub(crate) struct ServerTls {
    /// The CA that signed the current server certificate.
    pub(crate) ca: Arc<CertificateAuthority>,
    /// The configuration for new connections.
    pub(crate) config: Arc<ServerConfig>,
    /// Verifies client certificates against every CA this cluster has had.
    pub(crate) client_verifier: Arc<dyn ClientCertVerifier>,
    /// The administrator's client certificate, issued on first use.
    admin_client: OnceLock<Arc<IssuedCertificate>>,
}

impl ServerTls {
    /// Builds the configuration for a server certificate signed by `ca`; client
    /// certificates are accepted when signed by any of `client_cas`.
    pub(crate) fn new(
        ca: Arc<CertificateAuthority>,
        server: &IssuedCertificate,
        client_cas: &[CertificateDer<'static>],
    ) -> Result<Self, TlsError> {
        let provider = provider();
        let mut roots = RootCertStore::empty();
        for ca in client_cas {
            roots.add(ca.clone()).map_err(TlsError::Rustls)?;
        }
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(TlsError::Verifier)?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?
            .with_client_cert_verifier(Arc::new(RequestClientCertificate {
                inner: client_verifier.clone(),
            }))
            .with_single_cert(vec![server.certificate_der().clone()], server.key_der())
            .map_err(TlsError::Rustls)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_SIZE);
        Ok(Self {
            ca,
            config: Arc::new(config),
            client_verifier,
            admin_client: OnceLock::new(),
        })
    }

    /// The administrator's client certificate, signed by the current CA.
    pub(crate) fn admin_client(&self) -> Result<Arc<IssuedCertificate>, TlsError> {
        if let Some(issued) = self.admin_client.get() {
            return Ok(issued.clone());
        }
        let issued = Arc::new(self.ca.issue_client_certificate(&User::admin())?);
        // Two threads may race here; either certificate is valid, keep the first.
        Ok(self.admin_client.get_or_init(|| issued).clone())
    }
}

/// Requests a client certificate and checks only the handshake signature (proof that the
/// client holds the key); the chain is verified after the handshake by [`identify_peer`].
#[derive(Debug)]
struct RequestClientCertificate {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[TlsName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Verifies a connection's client certificate chain and reads its user (CN) and groups (O).
pub(crate) fn identify_peer(
    verifier: &dyn ClientCertVerifier,
    chain: Option<&[CertificateDer<'_>]>,
) -> PeerCertificate {
    let Some((end_entity, intermediates)) = chain.and_then(<[_]>::split_first) else {
        return PeerCertificate::None;
    };
    if verifier
        .verify_client_cert(end_entity, intermediates, UnixTime::now())
        .is_err()
    {
        return PeerCertificate::Invalid;
    }
    let Ok((_, certificate)) = x509_parser::parse_x509_certificate(end_entity) else {
        return PeerCertificate::Invalid;
    };
    let subject = certificate.subject();
    let Some(name) = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
    else {
        return PeerCertificate::Invalid;
    };
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    PeerCertificate::Valid(User {
        name: name.to_owned(),
        groups,
    })
}

/// Reads the certificates of a PEM text.
pub fn certificates_from_pem(pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let certificates: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect();
    if certificates.is_empty() {
        Err(TlsError::NoCertificate)
    } else {
        Ok(certificates)
    }
}

/// A rustls client configuration that trusts `ca_pem` and, if given, presents a client
/// certificate; ALPN offers `alpn` (e.g. `[b"h2"]`). For tests and benchmarks.
pub fn client_config(
    ca_pem: &str,
    identity: Option<&IssuedCertificate>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates_from_pem(ca_pem)? {
        roots.add(certificate).map_err(TlsError::Rustls)?;
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(identity) => builder
            .with_client_auth_cert(vec![identity.certificate_der().clone()], identity.key_der())
            .map_err(TlsError::Rustls)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_are_identified_only_when_signed_by_a_trusted_ca() {
        let ca = Arc::new(CertificateAuthority::generate("test-ca").expect("ca"));
        let other = CertificateAuthority::generate("other-ca").expect("other ca");
        let server = ca
            .issue_server_certificate("127.0.0.1".parse().expect("ip"))
            .expect("server");
        let tls =
            ServerTls::new(ca.clone(), &server, &[ca.certificate_der().clone()]).expect("tls");
        let alice = User::new("alice", &["devs"]);

        let good = ca.issue_client_certificate(&alice).expect("client");
        let chain = [good.certificate_der().clone()];
        assert_eq!(
            identify_peer(tls.client_verifier.as_ref(), Some(&chain)),
            PeerCertificate::Valid(alice.clone())
        );

        let foreign = other.issue_client_certificate(&alice).expect("client");
        let chain = [foreign.certificate_der().clone()];
        assert_eq!(
            identify_peer(tls.client_verifier.as_ref(), Some(&chain)),
            PeerCertificate::Invalid
        );

        assert_eq!(
            identify_peer(tls.client_verifier.as_ref(), None),
            PeerCertificate::None
        );
        assert_eq!(
            identify_peer(tls.client_verifier.as_ref(), Some(&[])),
            PeerCertificate::None
        );
    }

    #[test]
    fn pem_round_trips() {
        let ca = CertificateAuthority::generate("test-ca").expect("ca");
        let parsed = certificates_from_pem(ca.certificate_pem()).expect("pem");
        assert_eq!(parsed, vec![ca.certificate_der().clone()]);
        assert!(matches!(
            certificates_from_pem("nothing"),
            Err(TlsError::NoCertificate)
        ));
    }
}
