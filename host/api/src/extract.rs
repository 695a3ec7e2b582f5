//! Extractors whose rejections are problems naming the field at fault.

use std::fmt;
use std::marker::PhantomData;

use axum::extract::{FromRequest, FromRequestParts, Request};
use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::problem::Problem;

/// A JSON body, which must be an object; a bad one is a 4xx problem naming the field.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(request: Request, state: &S) -> Result<Self, Problem> {
        // Every body of this API is an object: read through `object`, like the objects
        // nested in it, so that an array of the fields is refused at any depth.
        let axum::Json(Object(value)) =
            axum::Json::<Object<T>>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

/// `T` read by [`object`].
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        object(deserializer).map(Object)
    }
}

/// Reads a struct only from a JSON object — a whole body ([`ApiJson`]) and the structs
/// nested in one (`#[serde(deserialize_with = "object")]`): serde's derived structs would
/// also read an array of their fields in order, which no request of this API means.
pub(crate) fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ObjectVisitor<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
        type Value = T;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_map(ObjectVisitor(PhantomData))
}

/// [`object`] for an optional field: `null` is `None`.
pub(crate) fn optional_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Object<T>>::deserialize(deserializer)?.map(|Object(value)| value))
}

/// A query string; a bad one is a 400 problem naming the parameter.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Problem))]
pub struct ApiQuery<T>(pub T);

/// Path parameters; a bad one is a 400 problem.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(Problem))]
pub struct ApiPath<T>(pub T);
