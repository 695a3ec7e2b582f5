//! Reading a request: the query parameters of a list or get, and the `Accept` header.

use std::borrow::Cow;

use super::status::Failure;

/// The form a response takes, chosen from the `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Representation {
    /// The object (or list) itself, as JSON.
    Object,
    /// `meta.k8s.io/v1` `Table`, what `kubectl get` asks for.
    Table,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (or its list), what metadata-only clients ask for.
    PartialObjectMetadata,
    /// `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`, for `/api` and `/apis`.
    AggregatedDiscovery,
}

/// Picks the first media range in `accept` that names one of `offered`. A missing or empty
/// header means JSON, as for the real server. `offered` always holds
/// [`Representation::Object`], which plain `application/json` and `*/*` select; media types
/// other than JSON (protobuf, YAML, CBOR) are skipped, so a client listing JSON as a fallback
/// gets JSON.
pub(crate) fn negotiate(
    accept: Option<&str>,
    offered: &[Representation],
) -> Result<Representation, Failure> {
    let Some(accept) = accept.filter(|accept| !accept.trim().is_empty()) else {
        return Ok(Representation::Object);
    };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media_type = parts.next().unwrap_or_default();
        if !matches!(media_type, "application/json" | "application/*" | "*/*") {
            continue;
        }
        let (mut as_kind, mut group, mut version) = (None, None, None);
        for parameter in parts {
            if let Some((key, value)) = parameter.split_once('=') {
                let value = value.trim().trim_matches('"');
                match key.trim() {
                    "as" => as_kind = Some(value),
                    "g" => group = Some(value),
                    "v" => version = Some(value),
                    _ => {}
                }
            }
        }
        let representation = match (as_kind, group, version) {
            (None, _, _) => Some(Representation::Object),
            (Some("Table"), Some("meta.k8s.io"), Some("v1")) => Some(Representation::Table),
            (
                Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                Some("meta.k8s.io"),
                Some("v1"),
            ) => Some(Representation::PartialObjectMetadata),
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => {
                Some(Representation::AggregatedDiscovery)
            }
            // meta.k8s.io/v1beta1 and apidiscovery v2beta1 are gone from v1.33 servers.
            _ => None,
        };
        if let Some(representation) = representation.filter(|wanted| offered.contains(wanted)) {
            return Ok(representation);
        }
    }
    Err(Failure::not_acceptable())
}

/// What a `Table` row carries besides its cells (`?includeObject=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    /// The default: a `PartialObjectMetadata`, from which kubectl takes the namespace and labels.
    #[default]
    Metadata,
    Object,
}

/// The query parameters of a list or get request that the fake server honours. Others
/// (`timeout`, `timeoutSeconds`, `pretty`, `resourceVersionMatch`, …) are accepted and
/// ignored, since the fixtures never change.
#[derive(Debug, Default)]
pub(crate) struct ListQuery<'q> {
    /// `limit`; `None` when absent or not positive, as the real server reads it.
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<Cow<'q, str>>,
    pub(crate) label_selector: Cow<'q, str>,
    pub(crate) field_selector: Cow<'q, str>,
    pub(crate) include_object: IncludeObject,
    pub(crate) watch: bool,
    pub(crate) resource_version: Option<Cow<'q, str>>,
}

impl<'q> ListQuery<'q> {
    pub(crate) fn parse(query: Option<&'q str>) -> Result<Self, Failure> {
        let mut parsed = Self::default();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|pair| !pair.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match &*percent_decode(key) {
                "limit" => {
                    let limit: i64 = value.parse().map_err(|_| {
                        Failure::bad_request(format!(
                            "strconv.ParseInt: parsing {value:?}: invalid syntax"
                        ))
                    })?;
                    parsed.limit = usize::try_from(limit).ok().filter(|&limit| limit > 0);
                }
                "continue" if !value.is_empty() => parsed.continue_token = Some(value),
                "labelSelector" => parsed.label_selector = value,
                "fieldSelector" => parsed.field_selector = value,
                "includeObject" => {
                    parsed.include_object = match &*value {
                        "None" => IncludeObject::None,
                        "Metadata" | "" => IncludeObject::Metadata,
                        "Object" => IncludeObject::Object,
                        other => {
                            return Err(Failure::bad_request(format!(
                                "includeObject: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
                            )));
                        }
                    };
                }
                // Go's strconv.ParseBool, which the real server uses.
                "watch" => {
                    parsed.watch = matches!(&*value, "1" | "t" | "T" | "true" | "TRUE" | "True");
                }
                "resourceVersion" if !value.is_empty() => parsed.resource_version = Some(value),
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// Decodes `%XY` escapes and `+` (a space in a query), leaving malformed escapes as they are.
fn percent_decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let hex = |byte: u8| char::from(byte).to_digit(16);
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = match bytes.get(index..index + 3) {
            Some([b'%', high, low]) => hex(*high).zip(hex(*low)),
            _ => None,
        };
        match (bytes[index], escaped) {
            (_, Some((high, low))) => {
                // Two hex digits make at most 255, so the narrowing cannot fail.
                decoded.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                index += 3;
            }
            (b'+', None) => {
                decoded.push(b' ');
                index += 1;
            }
            (byte, None) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&decoded).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(
            percent_decode("app%3Dweb%2Ctier+in+%28a%2Cb%29"),
            "app=web,tier in (a,b)"
        );
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("bad%zz%4"), "bad%zz%4");
    }

    #[test]
    fn negotiation_follows_the_accept_order() {
        let offered = [Representation::Object, Representation::Table];
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            negotiate(Some(kubectl), &offered).ok(),
            Some(Representation::Table)
        );
        assert_eq!(
            negotiate(Some("application/json"), &offered).ok(),
            Some(Representation::Object)
        );
        assert_eq!(negotiate(None, &offered).ok(), Some(Representation::Object));
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf, */*"), &offered).ok(),
            Some(Representation::Object)
        );
        assert!(negotiate(Some("application/vnd.kubernetes.protobuf"), &offered).is_err());
        let discovery =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            negotiate(Some(discovery), &offered).ok(),
            Some(Representation::Object)
        );
    }
}
