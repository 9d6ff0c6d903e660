//! What the handlers take from a path or a query, as the OpenAPI document
//! states it: the grammar `ElectionName`, `WatchedName`, `parse_time` and
//! the fence's resources accept, written once as JSON Schema (the bodies'
//! fields carry theirs in `leadership.rs`), and the path parameters
//! ([`NamePath`], [`OwnNamePath`]) the handlers' docs list.
//! A value these schemas accept is one the handler accepts (no 400 for it),
//! and one they refuse is a 400: schemathesis checks both ways.

use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{Required, Schema};
use utoipa::IntoParams;

/// tenure's own election name (`ElectionName::new`): segments of
/// `[A-Za-z0-9._-]`, neither `.` nor `..`, joined by `/`, 1–128 bytes.
pub const OWN_NAME: &str = r"^(?!\.\.?(/|$))[A-Za-z0-9._-]+(/(?!\.\.?(/|$))[A-Za-z0-9._-]+)*$";

/// Another system's election (a key path `--source` watches): `/`, then
/// anything but control characters; under 512 bytes. JSON Schema counts
/// characters: the documented 511 is exact for ASCII, and a path of longer
/// characters is refused sooner than the length says.
const PATH_NAME: &str = r"^/[^\u0000-\u001f\u007f-\u009f]*$";

/// A Kubernetes Lease's name (`layout::path::is_lease_name`): two
/// non-empty parts without `/` or control characters.
const LEASE_NAME: &str = r"^[^/\u0000-\u001f\u007f-\u009f]+/[^/\u0000-\u001f\u007f-\u009f]+$";

fn string(pattern: &str, max: usize) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .min_length(Some(1))
        .max_length(Some(max))
}

/// A name the mutating calls take: tenure's own.
pub fn own_name() -> Schema {
    string(OWN_NAME, 128)
        .description(Some(
            "tenure's own election name: segments of [A-Za-z0-9._-] (not . or ..) joined by \
             '/' (encoded as %2F in the URL), at most 128 bytes; with several clusters \
             CLUSTER/NAME",
        ))
        .into()
}

/// A name the reads take: tenure's own, another system's key path, or a
/// Kubernetes Lease's (which of the first and the last, its cluster says).
pub fn watched_name() -> Schema {
    AnyOfBuilder::new()
        .item(own_name())
        .item(string(PATH_NAME, 511).description(Some(
            "another system's election: its key path, from '/', under 512 bytes",
        )))
        .item(string(LEASE_NAME, 511).description(Some(
            "a Kubernetes Lease: NAMESPACE/NAME, under 512 bytes (with several clusters \
             CLUSTER/NAMESPACE/NAME); in a cluster that reads Leases every name that is no \
             path is one, in any other none is",
        )))
        .into()
}

/// A time as `parse_time` reads it: RFC 3339, unix seconds, `now`, or a
/// duration meaning that long ago.
pub fn time() -> Schema {
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Date)))
                .description(Some("midnight UTC of that day")),
        )
        .item(string(r"^[0-9]{1,12}$", 12).description(Some("unix seconds")))
        .item(string(r"^now$", 3))
        .item(
            string(r"^[1-9][0-9]{0,5}(ms|s|m|h|d)$", 8)
                .description(Some("that long ago: 90m, 2h, 7d")),
        )
        .into()
}

/// The path of a read about one election: `{name}`, a watched name.
pub struct NamePath;

/// The path of a mutating call: `{name}`, one of tenure's own elections.
pub struct OwnNamePath;

/// `{name}` in the path, required (a derived `IntoParams` with
/// `schema_with` leaves a path parameter optional, which OpenAPI forbids).
fn name_param(what: &str, schema: Schema) -> Vec<Parameter> {
    vec![ParameterBuilder::new()
        .name("name")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(what))
        .schema(Some(schema))
        .build()]
}

impl IntoParams for NamePath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        name_param(
            "The election: its name, or another system's key path",
            watched_name(),
        )
    }
}

impl IntoParams for OwnNamePath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        name_param("The election, one of tenure's own", own_name())
    }
}
