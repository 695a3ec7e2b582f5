//! TLS client configurations for talking to API servers and health URLs, shared by the
//! plugin runtime's egress (the contract's `http` and `wasi:http`) and the native prober
//! of the test kit, so that both trust and identify themselves the same way.
//!
//! A [`TlsClients`] holds what every connection shares (the `ring` crypto provider and the
//! system trust store, loaded once on first use) and gives a rustls [`ClientConfig`] per
//! request for PEM material: which servers to trust ([`Trust`]) and, for mutual TLS, the
//! client's certificate chain and key. Errors name what is wrong with the material and
//! never contain it.
//!
//! Parsing that material (PEM, the CA into a root store, the private key into a signing
//! key) costs about as much as a tenth of a loopback handshake, and a cluster is probed
//! with the same material again and again, so the parsed configurations are kept in a
//! small least-recently-used cache keyed by a digest of the material
//! ([`CONFIG_CACHE_ENTRIES`]). Every connection is still fresh: the configurations have
//! TLS session resumption disabled, so each probe makes a full handshake and sees the
//! server's current certificate (resumption would hide a rotated or revoked one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rustls::client::Resumption;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::Digest as _;

/// How many parsed client configurations [`TlsClients`] keeps: one per distinct TLS
/// material (CA, client identity) in use, so a few per cluster probed at most; beyond
/// it the least recently used is dropped and parsed again when next needed.
pub const CONFIG_CACHE_ENTRIES: usize = 512;

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

/// Builds TLS client configurations. Cheap to clone: clones share the provider, the
/// system trust store and the cache of parsed configurations.
#[derive(Debug, Clone)]
pub struct TlsClients {
    provider: Arc<CryptoProvider>,
    system_roots: Arc<OnceLock<Arc<RootCertStore>>>,
    cache: Arc<Mutex<ConfigCache>>,
}

impl Default for TlsClients {
    fn default() -> Self {
        Self {
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            system_roots: Arc::new(OnceLock::new()),
            cache: Arc::new(Mutex::new(ConfigCache::default())),
        }
    }
}

/// The sha256 of the material a configuration was built from: the trust and the identity,
/// each field tagged and length-prefixed so that no two inputs share a key. Only the
/// digest is kept, never the material.
type ConfigKey = [u8; 32];

fn config_key(trust: Trust<'_>, identity: Option<Identity<'_>>) -> ConfigKey {
    let mut digest = sha2::Sha256::new();
    let mut field = |tag: u8, bytes: &[u8]| {
        digest.update([tag]);
        digest.update((bytes.len() as u64).to_le_bytes());
        digest.update(bytes);
    };
    match trust {
        Trust::System => field(0, b""),
        Trust::Ca(pem) => field(1, pem),
        Trust::SkipVerify => field(2, b""),
    }
    if let Some(identity) = identity {
        field(3, identity.certificate_pem);
        field(4, identity.key_pem);
    }
    digest.finalize().into()
}

/// Parsed configurations, least recently used dropped first.
#[derive(Debug, Default)]
struct ConfigCache {
    entries: HashMap<ConfigKey, (Arc<ClientConfig>, u64)>,
    /// Counts uses; an entry's number is its last use.
    clock: u64,
}

impl ConfigCache {
    fn get(&mut self, key: &ConfigKey) -> Option<Arc<ClientConfig>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|(config, used)| {
            *used = clock;
            Arc::clone(config)
        })
    }

    fn insert(&mut self, key: ConfigKey, config: Arc<ClientConfig>) {
        if self.entries.len() >= CONFIG_CACHE_ENTRIES && !self.entries.contains_key(&key) {
            // A linear scan, only when full: the cache is small and misses are rare.
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| *key);
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.clock += 1;
        self.entries.insert(key, (config, self.clock));
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
    /// presents it to servers that ask for a client certificate. TLS session resumption is
    /// disabled: every connection made with it is a full handshake.
    ///
    /// Parsed once per distinct material and then served from the cache (a clone shares
    /// the parsed roots and key); material that fails to parse is not cached.
    pub fn client_config(
        &self,
        trust: Trust<'_>,
        identity: Option<Identity<'_>>,
    ) -> Result<ClientConfig, TlsError> {
        let key = config_key(trust, identity);
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key);
        if let Some(config) = cached {
            return Ok(ClientConfig::clone(&config));
        }
        let config = self.build_client_config(trust, identity)?;
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::new(config.clone()));
        Ok(config)
    }

    /// [`TlsClients::client_config`] without the cache: parses the material.
    fn build_client_config(
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
        let mut config = match identity {
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
                    .map_err(|_| TlsError::IdentityMismatch)?
            }
            None => builder.with_no_client_auth(),
        };
        // A resumed session skips the server's certificate: a probe must see the
        // certificate the server presents now (every probe uses a fresh connection).
        config.resumption = Resumption::disabled();
        Ok(config)
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
    fn parsed_configurations_are_cached_by_material_and_bounded() {
        let clients = TlsClients::new();
        let parsed = |clients: &TlsClients| {
            clients
                .cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entries
                .len()
        };
        clients
            .client_config(Trust::SkipVerify, None)
            .expect("skip");
        clients
            .client_config(Trust::SkipVerify, None)
            .expect("skip");
        clients
            .client_config(Trust::Ca(b""), None)
            .expect("empty CA");
        assert_eq!(parsed(&clients), 2, "one entry per distinct material");
        // Broken material is refused every time and never cached.
        for _ in 0..2 {
            let error = clients
                .client_config_parts(Trust::SkipVerify, Some(b"x"), Some(b"y"))
                .expect_err("not PEM");
            assert_eq!(error, TlsError::CertificateNotPem);
        }
        assert_eq!(parsed(&clients), 2);
        // Keys cannot collide by moving bytes between fields.
        assert_ne!(
            config_key(Trust::Ca(b"ab"), None),
            config_key(
                Trust::Ca(b"a"),
                Some(Identity {
                    certificate_pem: b"b",
                    key_pem: b""
                })
            )
        );

        let mut cache = ConfigCache::default();
        let config = Arc::new(
            clients
                .build_client_config(Trust::SkipVerify, None)
                .expect("config"),
        );
        let key = |i: usize| -> ConfigKey {
            let mut key = [0; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            key
        };
        for i in 0..CONFIG_CACHE_ENTRIES {
            cache.insert(key(i), Arc::clone(&config));
        }
        assert!(cache.get(&key(0)).is_some(), "key 0 used: now the newest");
        cache.insert(key(CONFIG_CACHE_ENTRIES), Arc::clone(&config));
        assert_eq!(cache.entries.len(), CONFIG_CACHE_ENTRIES);
        assert!(cache.get(&key(1)).is_none(), "the least recently used went");
        assert!(cache.get(&key(0)).is_some());
        assert!(cache.get(&key(CONFIG_CACHE_ENTRIES)).is_some());
    }

    /// Two requests with the same material and the cached configuration: the server (the
    /// fake API server, which issues TLS 1.3 session tickets) sees two full handshakes.
    /// The control re-enables resumption on the same configuration and sees the second
    /// connection resumed, so the test can tell the two apart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cached_configurations_never_resume_a_session() {
        use rustls::HandshakeKind;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let fleet = vigil_fake_kube::Fleet::builder()
            .clusters(1)
            .addresses(vigil_fake_kube::AddressPlan::Auto)
            .start()
            .await
            .expect("fleet");
        let cluster = &fleet.clusters()[0];
        let address = cluster.address();
        let ca = cluster.ca_pem();
        let admin = cluster.admin_client_certificate().expect("certificate");
        let clients = TlsClients::new();
        let config = || {
            clients
                .client_config_parts(
                    Trust::Ca(ca.as_bytes()),
                    Some(admin.certificate_pem().as_bytes()),
                    Some(admin.key_pem().as_bytes()),
                )
                .expect("config")
        };
        let handshake = |config: Arc<ClientConfig>| async move {
            let tcp = tokio::net::TcpStream::connect(address)
                .await
                .expect("connect");
            let name = server_name(&address.ip().to_string(), None).expect("name");
            let mut tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .expect("handshake");
            // Read the answer, so that the server's session tickets reach the client.
            tls.write_all(
                b"GET /api/v1/namespaces?limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await
            .expect("write");
            let mut answer = Vec::new();
            let _ = tls.read_to_end(&mut answer).await;
            assert!(answer.starts_with(b"HTTP/1.1 200"), "an answer");
            tls.get_ref().1.handshake_kind()
        };

        for _ in 0..3 {
            assert_eq!(
                handshake(Arc::new(config())).await,
                Some(HandshakeKind::Full)
            );
        }
        let mut resuming = config();
        resuming.resumption = Resumption::default();
        let resuming = Arc::new(resuming);
        assert_eq!(
            handshake(Arc::clone(&resuming)).await,
            Some(HandshakeKind::Full)
        );
        assert_eq!(
            handshake(resuming).await,
            Some(HandshakeKind::Resumed),
            "the control: with resumption the server would resume"
        );
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
