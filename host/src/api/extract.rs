//! Extractors whose rejections are problems naming the field at fault.

use axum::extract::{FromRequest, FromRequestParts};

use super::problem::Problem;

/// A JSON body; a bad one is a 4xx problem naming the field.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(Problem))]
pub struct ApiJson<T>(pub T);

/// A query string; a bad one is a 400 problem naming the parameter.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Problem))]
pub struct ApiQuery<T>(pub T);

/// Path parameters; a bad one is a 400 problem.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(Problem))]
pub struct ApiPath<T>(pub T);
