//! The error page: a status, a heading and what to do, in the pages' frame.

use askama::Template;
use axum::http::StatusCode;
use axum::response::Response;

use super::{render, Head};
use crate::events::now_ms;
use crate::web::AppState;

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    head: Head,
    status: u16,
    heading: String,
    message: String,
}

pub(in crate::web) fn error_page(
    state: &AppState,
    status: StatusCode,
    heading: &str,
    message: String,
) -> Response {
    let page = ErrorPage {
        head: Head::new(state, format!("{} · tenure", status.as_u16()), now_ms()),
        status: status.as_u16(),
        heading: heading.to_owned(),
        message,
    };
    render(status, &page)
}
