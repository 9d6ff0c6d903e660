//! Which etcd clusters `tenure serve` watches: `--cluster
//! NAME=ENDPOINTS` (repeatable; TLS, user, prefix and sources from the
//! other flags, the same for all), or the `[[cluster]]` tables of `--config
//! FILE`, each with its own, named as the flags are. Without either: the
//! one cluster of `--endpoints`, unnamed.
//!
//! A cluster's name becomes the first segment of its elections' names
//! (`NAME/jobs`) and a suffix of its history state's keys (`@NAME`): it is
//! one URL-safe segment, and never holds `/` or `@`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

use super::{access_config, access_of, Access, Global};
use crate::feed::{Connector, Feed, Watched};
use crate::layout::Source;

/// Longest cluster name, in bytes.
const MAX_NAME: usize = 64;

/// `--cluster NAME=ENDPOINTS` (or `NAME=kubeconfig:PATH[#CONTEXT]`,
/// `NAME=in-cluster`), as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFlag {
    pub name: String,
    /// Empty when its Leases are read through the Kubernetes API.
    pub endpoints: Vec<String>,
    pub api: Option<ApiSource>,
}

/// Where a cluster's Kubernetes API is: a kubeconfig and one of its
/// contexts, or the pod's own service account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSource {
    /// `None`: the pod's service account (`in-cluster`).
    pub kubeconfig: Option<PathBuf>,
    /// `None`: the kubeconfig's current context.
    pub context: Option<String>,
}

impl ClusterFlag {
    /// Parses `NAME=URL[,URL...]`, `NAME=kubeconfig:PATH[#CONTEXT]` or
    /// `NAME=in-cluster`.
    pub fn parse(s: &str) -> Result<ClusterFlag, String> {
        let Some((name, rest)) = s.split_once('=') else {
            return Err(format!(
                "{s:?}: give NAME=ENDPOINTS, e.g. prod=https://10.0.0.1:2379,https://10.0.0.2:2379, \
                 or NAME=kubeconfig:PATH[#CONTEXT], or NAME=in-cluster"
            ));
        };
        check_name(name)?;
        let (endpoints, api) = if let Some(path) = rest.strip_prefix("kubeconfig:") {
            let (path, context) = match path.split_once('#') {
                Some((p, c)) => (p, Some(c.to_owned()).filter(|c| !c.is_empty())),
                None => (path, None),
            };
            if path.is_empty() {
                return Err(format!(
                    "{s:?}: give the kubeconfig's path after kubeconfig:"
                ));
            }
            let kubeconfig = Some(PathBuf::from(path));
            (
                Vec::new(),
                Some(ApiSource {
                    kubeconfig,
                    context,
                }),
            )
        } else if rest == "in-cluster" {
            let api = ApiSource {
                kubeconfig: None,
                context: None,
            };
            (Vec::new(), Some(api))
        } else {
            (endpoints_of(rest.split(','))?, None)
        };
        Ok(ClusterFlag {
            name: name.to_owned(),
            endpoints,
            api,
        })
    }
}

fn endpoints_of<'a>(given: impl Iterator<Item = &'a str>) -> Result<Vec<String>, String> {
    let endpoints: Vec<String> = given
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect();
    if endpoints.is_empty() {
        return Err("no endpoints: give at least one URL, e.g. http://127.0.0.1:2379".into());
    }
    Ok(endpoints)
}

/// Whether `name` is a valid cluster name.
pub fn valid_name(name: &str) -> bool {
    check_name(name).is_ok()
}

/// A cluster's name: letters, digits, `-`, `_` and `.`, at most 64 bytes.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cluster name {name:?}: use 1 to {MAX_NAME} letters, digits, '-', '_' or '.' \
             (it is the first segment of its elections' names and URLs)"
        ))
    }
}

/// One `[[cluster]]` table of `--config FILE`: the flags' names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    name: String,
    /// etcd's endpoints; or, instead, `kubeconfig` (and `context`) or
    /// `in-cluster`: its Leases through the Kubernetes API.
    endpoints: Option<Endpoints>,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    #[serde(default)]
    in_cluster: bool,
    #[serde(default)]
    kube_heartbeats: bool,
    #[serde(default)]
    prefix: String,
    /// Seconds, as `--timeout`.
    timeout: Option<f64>,
    cacert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    #[serde(default)]
    source: Vec<String>,
    #[serde(default)]
    sources_only: bool,
}

/// `endpoints = "a,b"` or `endpoints = ["a", "b"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Endpoints {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    cluster: Vec<Table>,
}

/// What the clusters' specifications say, before connecting.
#[derive(Debug)]
struct Spec {
    name: String,
    endpoints: Vec<String>,
    prefix: String,
    timeout: Duration,
    access: Access,
    sources: Vec<Source>,
    sources_only: bool,
    /// `Some`: read through the Kubernetes API (no endpoints), with
    /// heartbeat leases or not.
    api: Option<(ApiSource, bool)>,
}

/// The clusters of `--cluster` and `--config` (`None`: neither given).
/// Both at once are refused: one list, in one place.
pub async fn connect(
    global: &Global,
    flags: &[ClusterFlag],
    config: Option<&Path>,
    (sources, sources_only): (&[Source], bool),
    (heartbeats, max_elections): (bool, usize),
) -> anyhow::Result<Option<Vec<Watched>>> {
    let Some(specs) = specs_of(global, flags, config, sources, sources_only, heartbeats)? else {
        return Ok(None);
    };
    let mut seen = std::collections::BTreeSet::new();
    for s in &specs {
        anyhow::ensure!(
            seen.insert(s.name.as_str()),
            "cluster {:?} is named twice: each cluster needs its own name",
            s.name
        );
    }
    let mut out = Vec::with_capacity(specs.len());
    for s in specs {
        out.push(match s.api.clone() {
            Some((api, heartbeats)) => through_api(s.name, &api, heartbeats, max_elections)?,
            None => connect_one(s).await?,
        });
    }
    Ok(Some(out))
}

/// The clusters the flags or the file name, each with its settings
/// (`None`: neither names any).
fn specs_of(
    global: &Global,
    flags: &[ClusterFlag],
    config: Option<&Path>,
    sources: &[Source],
    sources_only: bool,
    heartbeats: bool,
) -> anyhow::Result<Option<Vec<Spec>>> {
    let specs = match (flags.is_empty(), config) {
        (true, None) => return Ok(None),
        (false, Some(_)) => anyhow::bail!(
            "--cluster and --config both name clusters: give them all in one place \
             (the file's [[cluster]] tables take the same settings as the flags)"
        ),
        (false, None) => flags
            .iter()
            .map(|f| Spec {
                name: f.name.clone(),
                endpoints: f.endpoints.clone(),
                prefix: global.prefix.clone(),
                timeout: global.timeout,
                access: access_of(global),
                sources: sources.to_vec(),
                sources_only,
                api: f.api.clone().map(|a| (a, heartbeats)),
            })
            .collect::<Vec<_>>(),
        (true, Some(path)) => {
            // A file's clusters say all of it: a flag that would apply to
            // every cluster is refused, not silently dropped.
            let given: Vec<&str> = [
                ("--prefix", !global.prefix.is_empty()),
                ("--cacert", global.cacert.is_some()),
                ("--cert", global.cert.is_some()),
                ("--key", global.key.is_some()),
                ("--user", global.user.is_some()),
                ("--password", global.password.is_some()),
                ("--password-file", global.password_file.is_some()),
                ("--source", !sources.is_empty()),
                ("--sources-only", sources_only),
                ("--kube-heartbeats", heartbeats),
            ]
            .into_iter()
            .filter_map(|(flag, set)| set.then_some(flag))
            .collect();
            anyhow::ensure!(
                given.is_empty(),
                "{} given with --config: set it in each [[cluster]] table of {} (prefix, cacert, \
                 cert, key, user, password-file, source, sources-only, kube-heartbeats), where it \
                 applies to that cluster alone",
                given.join(", "),
                path.display()
            );
            read_file(path, global.timeout)?
        }
    };
    Ok(Some(specs))
}

/// One cluster read through the Kubernetes API: no etcd, no client.
fn through_api(
    name: String,
    api: &ApiSource,
    heartbeats: bool,
    max_elections: usize,
) -> anyhow::Result<Watched> {
    let config = super::kube::config(
        api.kubeconfig.as_deref(),
        api.context.as_deref(),
        heartbeats,
        max_elections,
    )
    .with_context(|| format!("cluster {name:?}"))?;
    Ok(Watched::through_api(Some(Arc::from(name)), config))
}

/// One cluster's connection: connected now, or (etcd not answering) later.
async fn connect_one(s: Spec) -> anyhow::Result<Watched> {
    let name = s.name.clone();
    let config = access_config(s.access, &format!("cluster {name:?}'s user"))?;
    let at = s.endpoints.join(",");
    let connector = Connector::new(s.endpoints, s.prefix, config, s.timeout);
    // A cluster that does not answer now is watched once it does; a
    // certificate, user or password problem is an error now.
    let client = match connector.connect().await {
        Ok(c) => Some(c),
        Err(e) if e.is_unavailable() => {
            eprintln!(
                "tenure: cluster {name}: etcd at {at} does not answer ({e}); its elections \
                 are not watched until it does"
            );
            None
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cluster {name:?}: connecting to etcd at {at}"))
        }
    };
    Ok(Watched {
        name: Some(Arc::from(name)),
        client,
        connector,
        sources: s.sources,
        sources_only: s.sources_only,
        api: None,
        adopt: None,
    })
}

/// The `[[cluster]]` tables of `path`; relative paths in them are taken
/// from the file's folder.
fn read_file(path: &Path, timeout: Duration) -> anyhow::Result<Vec<Spec>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    let file: File = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "the configuration {} is not valid: {e}\nexpected [[cluster]] tables with \
             name, and endpoints (with optionally prefix, timeout, cacert, cert, key, user, \
             password-file, source, sources-only) or kubeconfig (with optionally context, \
             kube-heartbeats) or in-cluster = true",
            path.display()
        )
    })?;
    anyhow::ensure!(
        !file.cluster.is_empty(),
        "the configuration {} names no cluster: add a [[cluster]] table with name and endpoints \
         (or kubeconfig)",
        path.display()
    );
    let dir = path.parent().unwrap_or(Path::new("."));
    file.cluster
        .into_iter()
        .map(|t| {
            let what = format!("{}: cluster {:?}", path.display(), t.name);
            check_name(&t.name).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            spec_of(t, &what, dir, timeout)
        })
        .collect()
}

/// One table's cluster (`what` names it in errors; paths from `dir`).
fn spec_of(t: Table, what: &str, dir: &Path, timeout: Duration) -> anyhow::Result<Spec> {
    let here = |p: Option<PathBuf>| p.map(|p| dir.join(p));
    let api = api_of(&t, what, dir)?;
    let endpoints = match (&t.endpoints, &api) {
        (Some(Endpoints::One(s)), None) => endpoints_of(s.split(',')),
        (Some(Endpoints::Many(v)), None) => endpoints_of(v.iter().map(String::as_str)),
        (None, Some(_)) => Ok(Vec::new()),
        (None, None) => Err(
            "give endpoints (etcd), or kubeconfig or in-cluster = true (the \
             Kubernetes API)"
                .to_owned(),
        ),
        (Some(_), Some(_)) => Err("endpoints and kubeconfig (or in-cluster) both name where \
             it is: give one"
            .to_owned()),
    }
    .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let sources = t
        .source
        .iter()
        .map(|s| Source::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{what}: source: {e}"))?;
    anyhow::ensure!(
        !t.sources_only || !sources.is_empty(),
        "{what}: sources-only needs at least one source"
    );
    let timeout = match t.timeout {
        None => timeout,
        Some(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => Duration::from_secs_f64(s),
        Some(s) => anyhow::bail!("{what}: timeout {s}: give seconds, above 0 and at most 3600"),
    };
    Ok(Spec {
        name: t.name,
        endpoints,
        prefix: t.prefix,
        timeout,
        access: Access {
            cacert: here(t.cacert),
            cert: here(t.cert),
            key: here(t.key),
            user: t.user,
            password: None,
            password_file: here(t.password_file),
        },
        sources,
        sources_only: t.sources_only,
        api,
    })
}

/// Whether a table reads its Leases through the Kubernetes API: its
/// kubeconfig (and context) or the pod's account, with heartbeat leases or
/// not. etcd's settings beside it are refused, not silently dropped.
fn api_of(t: &Table, what: &str, dir: &Path) -> anyhow::Result<Option<(ApiSource, bool)>> {
    let api = match (&t.kubeconfig, t.in_cluster) {
        (Some(path), false) => ApiSource {
            kubeconfig: Some(dir.join(path)),
            context: t.context.clone(),
        },
        (None, true) if t.context.is_none() => ApiSource {
            kubeconfig: None,
            context: None,
        },
        (Some(_), true) => anyhow::bail!("{what}: kubeconfig and in-cluster: give one"),
        (None, true) => anyhow::bail!("{what}: context is a kubeconfig's: give kubeconfig too"),
        (None, false) => {
            let etcd_only = t.context.is_some() || t.kube_heartbeats;
            anyhow::ensure!(
                !etcd_only,
                "{what}: context and kube-heartbeats need kubeconfig or in-cluster"
            );
            return Ok(None);
        }
    };
    let etcd: Vec<&str> = [
        ("prefix", !t.prefix.is_empty()),
        ("timeout", t.timeout.is_some()),
        ("cacert", t.cacert.is_some()),
        ("cert", t.cert.is_some()),
        ("key", t.key.is_some()),
        ("user", t.user.is_some()),
        ("password-file", t.password_file.is_some()),
        ("source", !t.source.is_empty()),
        ("sources-only", t.sources_only),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    anyhow::ensure!(
        etcd.is_empty(),
        "{what}: {} set for a cluster read through the Kubernetes API: those are etcd's \
         (its kubeconfig says how to reach and trust the API)",
        etcd.join(", ")
    );
    Ok(Some((api, t.kube_heartbeats)))
}

/// Key ranges, `[start, end)`.
type Ranges = Vec<(Vec<u8>, Vec<u8>)>;

/// Refuses two `--cluster` names for one etcd (the same cluster id) whose
/// watched ranges overlap: every election there would be recorded twice,
/// and a campaign to one name answered with the other's holder. Asked of
/// the clusters that answered at start (with a count-only read, which any
/// role that may read its range is allowed); two names on one etcd with
/// disjoint ranges (two `--prefix`es) are accepted. A cluster id alone does
/// not name an etcd (every etcd made with the default
/// `--initial-cluster-token` and member name has the same one): two names
/// are one etcd when the answering member's id, the revision and the count
/// of the first range agree too, read one after the other (a write between
/// the two reads lets a true duplicate through, never refuses two etcds
/// that differ).
pub async fn refuse_one_etcd_twice(
    clusters: &[(&Watched, Option<&crate::watch::WatchConfig>)],
) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, [i64; 4], Ranges)> = Vec::new();
    for &(c, cfg) in clusters {
        let (Some(name), Some(client), Some(cfg)) = (&c.name, &c.client, cfg) else {
            continue;
        };
        let ranges = cfg.sources_read(client.keys().prefix()).ranges();
        let Some((start, _)) = ranges.first().cloned() else {
            continue;
        };
        let mut etcd = client.etcd().clone();
        let count = etcd_client::GetOptions::new().with_count_only();
        let Some(id) = client
            .op(etcd.get(start, Some(count)))
            .await
            .ok()
            .and_then(|r| {
                let h = r.header()?;
                Some([
                    h.cluster_id() as i64,
                    h.member_id() as i64,
                    h.revision(),
                    r.count(),
                ])
            })
        else {
            continue;
        };
        let overlap = |a: &Ranges, b: &Ranges| {
            a.iter()
                .any(|(s1, e1)| b.iter().any(|(s2, e2)| s1 < e2 && s2 < e1))
        };
        if let Some((other, _, _)) = seen
            .iter()
            .find(|(_, i, r)| *i == id && overlap(r, &ranges))
        {
            anyhow::bail!(
                "--cluster {other} and --cluster {name} are the same etcd (cluster id {:x}, \
                 member {:x}, revision {}) watching the same keys: each election would be \
                 recorded twice. Name each etcd once, or give the two different --prefix values",
                id[0],
                id[1],
                id[2]
            );
        }
        seen.push((name, id, ranges));
    }
    Ok(())
}

/// `--adopt-etcd [NAME=]ID`, each to its feed: an ID of tenure's messages
/// (hex); a name no feed has, or a bare ID with several clusters, is
/// refused.
pub fn adopt(feeds: &mut [Feed], flags: &[String]) -> anyhow::Result<()> {
    for flag in flags.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        let (name, id) = match flag.split_once('=') {
            Some((n, id)) => (Some(n.trim()), id.trim()),
            None => (None, flag),
        };
        let hex = id.trim_start_matches("0x");
        let id = u64::from_str_radix(hex, 16)
            .ok()
            .filter(|&id| id != 0)
            .with_context(|| {
                format!(
                    "--adopt-etcd {flag}: the cluster id is etcd's, in hex as tenure prints it \
                     (e.g. --adopt-etcd a=cdf818194e3a8c32)"
                )
            })?;
        let feed = match name {
            Some(n) => feeds.iter_mut().find(|f| f.scope().as_deref() == Some(n)),
            None if feeds.len() == 1 && feeds.iter().all(|f| f.scope().is_none()) => {
                feeds.first_mut()
            }
            None => None,
        };
        let Some(feed) = feed.filter(|f| f.watched.api.is_none()) else {
            anyhow::bail!(
                "--adopt-etcd {flag}: no such etcd cluster in this serve: give NAME=ID with the \
                 name of a --cluster (or of a [[cluster]] table) watching etcd, or ID alone \
                 for the one cluster of a serve without --cluster"
            );
        };
        feed.watched.adopt = Some(id);
        if let Some(cfg) = &mut feed.cfg {
            cfg.adopt = Some(id);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_a_name_and_endpoints() {
        let f = ClusterFlag::parse("prod=http://a:2379, http://b:2379").unwrap();
        assert_eq!(f.name, "prod");
        assert_eq!(f.endpoints, ["http://a:2379", "http://b:2379"]);
        for bad in [
            "prod",
            "=http://a",
            "a/b=http://a",
            "a@b=http://a",
            "p=",
            ".=http://a",
        ] {
            assert!(ClusterFlag::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_flag_names_a_kubeconfig_and_its_context_or_the_pods_account() {
        let f = ClusterFlag::parse("eks=kubeconfig:/home/me/.kube/config#prod-admin").unwrap();
        assert_eq!((f.name.as_str(), f.endpoints.len()), ("eks", 0));
        assert_eq!(
            f.api,
            Some(ApiSource {
                kubeconfig: Some(PathBuf::from("/home/me/.kube/config")),
                context: Some("prod-admin".to_owned()),
            })
        );
        let f = ClusterFlag::parse("k=kubeconfig:kc").unwrap();
        assert_eq!(f.api.and_then(|a| a.context), None);
        let f = ClusterFlag::parse("here=in-cluster").unwrap();
        assert_eq!(f.api.map(|a| a.kubeconfig), Some(None));
        assert!(ClusterFlag::parse("k=kubeconfig:").is_err());
        assert!(ClusterFlag::parse("k=kubeconfig:#ctx").is_err());
    }

    #[test]
    fn a_file_takes_the_flags_names_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clusters.toml");
        std::fs::write(
            &path,
            "[[cluster]]\nname = \"a\"\nendpoints = [\"https://127.0.0.1:1\"]\ncacert = \"ca.pem\"\n\
             source = [\"patroni:/service/\"]\nsources-only = true\n\n\
             [[cluster]]\nname = \"b\"\nendpoints = \"http://127.0.0.1:2,http://127.0.0.1:3\"\n\
             user = \"tenure\"\npassword-file = \"/pw\"\nprefix = \"p/\"\ntimeout = 2.5\n",
        )
        .unwrap();
        let specs = read_file(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].access.cacert, Some(dir.path().join("ca.pem")));
        assert!(specs[0].sources_only && specs[0].sources.len() == 1);
        assert_eq!(specs[1].endpoints.len(), 2);
        assert_eq!(specs[1].access.password_file, Some(PathBuf::from("/pw")));
        assert_eq!(specs[1].timeout, Duration::from_millis(2500));
        assert_eq!(specs[1].prefix, "p/");

        std::fs::write(&path, "[[cluster]]\nname = \"a\"\nendpoint = \"x\"\n").unwrap();
        let e = read_file(&path, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("endpoint") && e.contains("[[cluster]]"), "{e}");
        std::fs::write(&path, "").unwrap();
        let e = read_file(&path, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("names no cluster"), "{e}");
    }
}
