//! Standard Webhooks signatures: `v1,` and the base64 HMAC-SHA256, under each key, of
//! `{webhook-id}.{webhook-timestamp}.{body}`; several keys (a rotation) give several
//! space-separated signatures, any of which a receiver accepts.

use base64::Engine as _;
use ring::hmac;

/// The `webhook-signature` header of `body`, sent as message `id` at `timestamp` (seconds
/// since the epoch), signed with each of `keys`.
pub fn sign(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut signed = Vec::with_capacity(id.len() + body.len() + 24);
    signed.extend_from_slice(id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(timestamp.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    keys.iter()
        .map(|key| {
            let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), &signed);
            format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification (its reference libraries test
    /// the same values).
    #[test]
    fn the_specification_example_signs_as_published() {
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let signature = sign(
            std::slice::from_ref(&key),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let rotated = sign(
            &[b"another key of 16+ bytes".to_vec(), key],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        let parts: Vec<&str> = rotated.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], signature);
        assert_ne!(parts[0], signature);
    }
}
