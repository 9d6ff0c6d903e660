//! The `tenure` command line: one function per subcommand. This is the
//! binary's edge, the only place where errors become `anyhow` and exit codes.
//!
//! Exit codes: 0 success; 1 error (etcd unreachable, nobody leads, bad
//! state, TLS/user/permission misconfiguration); 2 usage error; 3 refused (fence refused, election held, token
//! does not hold the election, `--wait-timeout` passed); 4 leadership lost
//! while running a command; 128+N ended by signal N.

mod campaign;
mod clusters;
mod dev;
mod exec;
mod group;
mod guard;
mod history;
mod kube;
mod lease;
mod migrate;
mod ops;
mod replica;
mod secrets;
mod serve;
mod sinks;
mod stderr;
mod watched;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::election::{Client, ConnectConfig, Credentials, ElectionName, Error, Keys, TlsFiles};

pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_REFUSED: i32 = 3;
pub const EXIT_LOST: i32 = 4;

/// Leader election on etcd that you can see.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// etcd endpoints, comma-separated.
    #[arg(
        long,
        env = "TENURE_ENDPOINTS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ',',
        global = true
    )]
    pub endpoints: Vec<String>,

    /// Root prefix of every key tenure reads or writes (e.g. "prod/").
    #[arg(long, env = "TENURE_PREFIX", default_value = "", global = true)]
    pub prefix: String,

    /// How long one etcd request may take, in seconds.
    #[arg(long, env = "TENURE_TIMEOUT", default_value = "5", value_name = "SECONDS", value_parser = parse_seconds, global = true)]
    pub timeout: Duration,

    /// CA certificate (PEM) that signed etcd's server certificate; for https:// endpoints
    /// (without it, the system's CAs). Fallback: $ETCDCTL_CACERT.
    #[arg(long, env = "TENURE_CACERT", value_name = "FILE", global = true)]
    pub cacert: Option<PathBuf>,

    /// Client certificate (PEM) for an etcd with --client-cert-auth. Fallback: $ETCDCTL_CERT.
    #[arg(long, env = "TENURE_CERT", value_name = "FILE", global = true)]
    pub cert: Option<PathBuf>,

    /// Private key (PEM) of --cert. Fallback: $ETCDCTL_KEY.
    #[arg(long, env = "TENURE_KEY", value_name = "FILE", global = true)]
    pub key: Option<PathBuf>,

    /// etcd user, for an etcd with authentication enabled. Fallback: $ETCDCTL_USER.
    #[arg(
        long,
        env = "TENURE_USER",
        hide_env_values = true,
        value_name = "NAME[:PASSWORD]",
        global = true
    )]
    pub user: Option<String>,

    /// Password of --user (shows in `ps`: prefer --password-file or the variable).
    /// Fallback: $ETCDCTL_PASSWORD.
    #[arg(long, env = "TENURE_PASSWORD", hide_env_values = true, global = true)]
    pub password: Option<String>,

    /// File whose first line is the password of --user.
    #[arg(long, env = "TENURE_PASSWORD_FILE", value_name = "FILE", global = true)]
    pub password_file: Option<PathBuf>,
}

/// A flag's value, else etcdctl's variable for it (empty counts as unset).
fn or_etcdctl(flag: &Option<String>, var: &str) -> Option<String> {
    flag.clone()
        .or_else(|| std::env::var(var).ok())
        .filter(|v| !v.is_empty())
}

fn path_or_etcdctl(flag: &Option<PathBuf>, var: &str) -> Option<PathBuf> {
    flag.clone()
        .or_else(|| std::env::var_os(var).map(PathBuf::from))
        .filter(|p| !p.as_os_str().is_empty())
}

fn read_password_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the password file {}", path.display()))?;
    let line = text.lines().next().unwrap_or("");
    anyhow::ensure!(
        !line.is_empty(),
        "the password file {} is empty: its first line must be the password",
        path.display()
    );
    Ok(line.to_owned())
}

/// The TLS files and etcd user from flags, `TENURE_*` and `ETCDCTL_*`.
pub fn connect_config(g: &Global) -> anyhow::Result<ConnectConfig> {
    access_config(access_of(g), "--user")
}

/// The TLS files and etcd user of the flags, `TENURE_*` and `ETCDCTL_*`.
pub(crate) fn access_of(g: &Global) -> Access {
    Access {
        cacert: path_or_etcdctl(&g.cacert, "ETCDCTL_CACERT"),
        cert: path_or_etcdctl(&g.cert, "ETCDCTL_CERT"),
        key: path_or_etcdctl(&g.key, "ETCDCTL_KEY"),
        user: or_etcdctl(&g.user, "ETCDCTL_USER"),
        password: or_etcdctl(&g.password, "ETCDCTL_PASSWORD"),
        password_file: g.password_file.clone(),
    }
}

/// How to reach one etcd: TLS files and user, as given.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// `a` as a connection's configuration; `user_flag` names where the user
/// was given, for the messages.
pub(crate) fn access_config(a: Access, user_flag: &str) -> anyhow::Result<ConnectConfig> {
    let tls = TlsFiles {
        ca: a.cacert,
        cert: a.cert,
        key: a.key,
    };
    let password = a.password;
    let credentials = match a.user {
        None => {
            anyhow::ensure!(
                password.is_none() && a.password_file.is_none(),
                "a password was given without an etcd user: give {user_flag} NAME"
            );
            None
        }
        Some(user) => {
            let (name, inline) = match user.split_once(':') {
                Some((n, p)) => (n.to_owned(), Some(p.to_owned())),
                None => (user, None),
            };
            anyhow::ensure!(!name.is_empty(), "{user_flag} has an empty user name");
            let from_file = a
                .password_file
                .as_deref()
                .map(read_password_file)
                .transpose()?;
            let given = [inline.is_some(), password.is_some(), from_file.is_some()];
            anyhow::ensure!(
                given.iter().filter(|g| **g).count() <= 1,
                "the password of etcd user {name:?} is given more than once: use one of \
                 {user_flag} NAME:PASSWORD, --password (TENURE_PASSWORD) or --password-file"
            );
            let Some(password) = inline.or(password).or(from_file) else {
                anyhow::bail!(
                    "no password for etcd user {name:?}: give --password-file FILE (or \
                     TENURE_PASSWORD, or {user_flag} {name}:PASSWORD)"
                );
            };
            Some(Credentials::new(name, password))
        }
    };
    Ok(ConnectConfig { tls, credentials })
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Become leader (or wait for it), run CMD while leader, stop it when leadership is lost.
    Campaign(campaign::CampaignArgs),
    /// Show who leads an election (exit 1 when nobody does).
    Leader {
        /// One of tenure's own elections, another system's key path
        /// (`/service/pg`) read through its --source, or a Kubernetes Lease
        /// (`NAMESPACE/NAME`, with --source kubernetes:PREFIX or --kubeconfig).
        #[arg(value_parser = any_name)]
        name: crate::layout::path::WatchedName,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// The layout of another system's election: LAYOUT:PREFIX, as for `tenure serve`.
        #[arg(long = "source", env = "TENURE_SOURCES", value_delimiter = ',', value_name = "LAYOUT:PREFIX", value_parser = crate::layout::Source::parse)]
        sources: Vec<crate::layout::Source>,
        /// A Kubernetes Lease (`NAMESPACE/NAME`) read through the API of this
        /// kubeconfig's current context instead of etcd.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// As --kubeconfig, with the pod's own service account.
        #[arg(long, conflicts_with = "kubeconfig")]
        in_cluster: bool,
    },
    /// Print every leader change of an election, one line each, until interrupted.
    Observe {
        name: ElectionName,
        /// Print one JSON value per line (`null` when nobody leads).
        #[arg(long)]
        json: bool,
        /// Also show the queue (queue layout): who waits behind the leader,
        /// in order, and every change of it. With --json, each line is
        /// `{"leader": …, "waiting": […]}`.
        #[arg(long)]
        queue: bool,
    },
    /// Check a token against the shared fence of a resource (exit 3 when refused).
    Fence {
        name: ElectionName,
        resource: String,
        #[arg(long)]
        token: i64,
        #[arg(long)]
        json: bool,
    },
    /// End the term whose token is given, and no other.
    Resign {
        name: ElectionName,
        #[arg(long)]
        token: i64,
    },
    /// Operator action: delete the leader key, whoever holds it.
    Depose { name: ElectionName },
    /// Watch every election under the prefix: metrics, traces, history, HTTP.
    Serve(Box<serve::ServeCommand>),
    /// Print the recorded terms of an election from the history file.
    History(history::HistoryArgs),
    /// Local etcd + dashboard + a demo fleet: see tenure working with one command.
    Dev(dev::DevArgs),
}

pub(crate) fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("{s:?} must be a positive number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// Parses the command line, runs it, and returns the process exit code.
pub fn main() -> i32 {
    // `tenure campaign`'s guard process: no logging, no runtime, no etcd.
    if std::env::args_os().nth(1).is_some_and(|a| a == guard::ARG) {
        return guard::main();
    }
    // The step that arms the command's parent-death signal, then becomes it.
    if std::env::args_os().nth(1).is_some_and(|a| a == exec::ARG) {
        return exec::main();
    }
    let code = run_cli();
    // tenure's own messages are queued (stderr::say): give them a moment to
    // reach stderr, but never hang on a stderr nobody reads.
    stderr::flush(Duration::from_secs(1));
    code
}

fn run_cli() -> i32 {
    let cli = Cli::parse();
    // Flushes spans on the way out.
    let _traces = init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure: cannot start the async runtime: {e}");
            return EXIT_ERROR;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            stderr::say(format_args!("error: {e:#}"));
            match e.downcast_ref::<Error>() {
                Some(Error::NotHolder { .. }) => EXIT_REFUSED,
                Some(Error::NameCollision { .. }) => EXIT_USAGE,
                _ => EXIT_ERROR,
            }
        }
    }
}

/// Logs to stderr (`TENURE_LOG`, default `warn`), and spans over OTLP when
/// the standard `OTEL_*` variables configure an endpoint.
fn init_logging() -> Option<crate::telemetry::TracesGuard> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(stderr::MakeQueued)
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(fmt);
    match crate::telemetry::layer_from_env() {
        Ok(Some((traces, guard))) => {
            let _ = registry.with(traces).try_init();
            Some(guard)
        }
        Ok(None) => {
            let _ = registry.try_init();
            None
        }
        Err(e) => {
            let _ = registry.try_init();
            eprintln!("tenure: traces are off: {e}");
            None
        }
    }
}

async fn connect(global: &Global) -> anyhow::Result<Client> {
    let config = connect_config(global)?;
    let at = global.endpoints.join(",");
    let client = match Client::connect_with(&global.endpoints, &global.prefix, config).await {
        Ok(c) => c,
        // These say what to fix, with the endpoint: no more context needed.
        Err(e) if e.is_access_denied() => return Err(e.into()),
        Err(e) => return Err(e).with_context(|| format!("connecting to etcd at {at}")),
    };
    Ok(client.with_op_timeout(global.timeout))
}

/// What a command needs from etcd's authorization, for the message when
/// etcd denies it: the access, the keys it was denied on, and the
/// `etcdctl role grant-permission ROLE` arguments that grant it.
struct Need {
    access: &'static str,
    keys: Vec<String>,
    grant: Vec<String>,
}

impl Need {
    fn of(command: &Command, keys: &Keys) -> Need {
        let (elections, fences) = (keys.elections_root(), keys.fences_root());
        let prefix = |access: &str, p: &str| format!("--prefix=true {access} '{p}'");
        let rw = |keys: Vec<String>, grant: Vec<String>| Need {
            access: "readwrite",
            keys,
            grant,
        };
        match command {
            Command::Leader { name, sources, .. } if name.own().is_none() => {
                let path = name.as_str();
                let source = sources.iter().find(|s| s.may_name(path));
                let key = match source {
                    Some(s) if s.reads_leases() => {
                        lease::key_of(s, path).unwrap_or_else(|| s.key_path(path).to_owned())
                    }
                    Some(s) => s.key_path(path).to_owned(),
                    None => path.to_owned(),
                };
                Need {
                    access: "read",
                    grant: vec![prefix("read", &key)],
                    keys: vec![key],
                }
            }
            Command::Leader { name, .. } => Need {
                access: "read",
                keys: name.own().map(|n| keys.leader_key(n)).into_iter().collect(),
                grant: vec![prefix("read", &elections)],
            },
            Command::Observe { name, .. } => Need {
                access: "read",
                keys: vec![keys.leader_key(name)],
                grant: vec![prefix("read", &elections)],
            },
            Command::Campaign(args) => rw(
                vec![keys.leader_key(&args.name)],
                vec![prefix("readwrite", &elections)],
            ),
            Command::Resign { name, .. } | Command::Depose { name } => rw(
                vec![keys.leader_key(name)],
                vec![prefix("readwrite", &elections)],
            ),
            Command::Fence { name, .. } => rw(
                vec![keys.leader_key(name), fences.clone()],
                vec![
                    prefix("readwrite", &elections),
                    prefix("readwrite", &fences),
                ],
            ),
            // serve alone watches one range, [P election/, P fence0), so
            // that one stream keeps both prefixes in revision order: etcd
            // checks the whole range, so the grant is that range. With
            // --source: exactly each source's prefixes.
            Command::Serve(cmd) => Need::serve(&crate::feed::watched_ranges(
                keys.prefix(),
                &cmd.args.sources,
                cmd.args.sources_only,
            )),
            _ => {
                let (start, end) = keys.watch_range();
                Need {
                    access: "read",
                    grant: vec![format!("read '{start}' '{end}'")],
                    keys: vec![format!("{start}..{end}")],
                }
            }
        }
    }
}

impl Need {
    /// What serve reads: each watched range, as a prefix where it is one.
    fn serve(ranges: &[(Vec<u8>, Vec<u8>)]) -> Need {
        let shown = |start: &[u8], end: &[u8]| {
            let (start, end) = (String::from_utf8_lossy(start), String::from_utf8_lossy(end));
            match crate::layout::path::prefix_range(start.as_bytes()) {
                Some((_, e)) if e == end.as_bytes() => {
                    (format!("{start}*"), format!("--prefix=true read '{start}'"))
                }
                _ => (format!("{start}..{end}"), format!("read '{start}' '{end}'")),
            }
        };
        let (keys, grant) = ranges.iter().map(|(s, e)| shown(s, e)).unzip();
        Need {
            access: "read",
            grant,
            keys,
        }
    }
}

/// "Permission denied", said with the user, its roles, the keys and the
/// `etcdctl` command that grants them.
async fn explain_denied(client: &Client, need: &Need) -> anyhow::Error {
    let user = match client.connect_config().user() {
        Some(u) => format!("user {u:?}"),
        None => "this client (no --user: etcd then takes the user from the client \
                 certificate's common name, if any)"
            .to_owned(),
    };
    let roles = client.user_roles().await.unwrap_or_default();
    let role = roles.first().cloned().unwrap_or_else(|| "ROLE".to_owned());
    let roles = if roles.is_empty() {
        "no role".to_owned()
    } else {
        format!("roles {}", roles.join(", "))
    };
    let keys = need
        .keys
        .iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(" and ");
    let grant = need
        .grant
        .iter()
        .map(|g| format!("`etcdctl role grant-permission {role} {g}`"))
        .collect::<Vec<_>>()
        .join(" and ");
    anyhow::anyhow!(
        "etcd denied {user} ({roles}) {} access to {keys}: grant it with {grant}",
        need.access,
    )
}

/// `tenure leader`'s name as typed: read as the sources given name
/// elections once they are known ([`leader_name`]).
fn any_name(raw: &str) -> Result<crate::layout::path::WatchedName, String> {
    use crate::layout::path::WatchedName;
    WatchedName::parse(raw)
        .or_else(|e| WatchedName::parse_in(raw, true).map_err(|_| e))
        .map_err(|e| e.to_string())
}

/// `tenure leader`'s name read as its sources name elections: where they
/// read Kubernetes' Leases (a `kubernetes` source, or the API), a name
/// that is no path is a Lease's, never tenure's own.
fn leader_name(command: &mut Command) -> anyhow::Result<()> {
    if let Command::Leader {
        name,
        sources,
        kubeconfig,
        in_cluster,
        ..
    } = command
    {
        let leases =
            kubeconfig.is_some() || *in_cluster || sources.iter().any(|s| s.reads_leases());
        *name = crate::layout::path::WatchedName::parse_in(name.as_str(), leases)?;
    }
    Ok(())
}

async fn run(mut cli: Cli) -> anyhow::Result<i32> {
    leader_name(&mut cli.command)?;
    // Commands that need no etcd (history) or run their own (dev) never
    // connect: `tenure dev` stays plain loopback.
    let cli = match cli.command {
        // Off the runtime: the PostgreSQL client blocks.
        Command::History(args) => {
            return tokio::task::spawn_blocking(move || history::run(args)).await?
        }
        Command::Dev(args) => return dev::run(args).await,
        // Leases through the Kubernetes API: no etcd.
        Command::Serve(cmd) if cmd.args.kubeconfig.is_some() || cmd.args.in_cluster => {
            return serve::run_kube(*cmd).await
        }
        Command::Leader {
            name,
            json,
            kubeconfig,
            in_cluster,
            ..
        } if kubeconfig.is_some() || in_cluster => {
            return lease::through_api(name.as_str(), kubeconfig.as_deref(), json).await
        }
        // Several clusters: each its own connection.
        Command::Serve(cmd) if !cmd.args.clusters.is_empty() || cmd.args.config.is_some() => {
            return Ok(serve::run_many(&cli.global, *cmd)
                .await?
                .unwrap_or(EXIT_USAGE));
        }
        command => Cli { command, ..cli },
    };
    let client = connect(&cli.global).await?;
    let need = Need::of(&cli.command, client.keys());
    match run_connected(&client, cli).await {
        Err(e)
            if matches!(
                e.downcast_ref::<Error>(),
                Some(Error::PermissionDenied { .. })
            ) =>
        {
            Err(explain_denied(&client, &need).await)
        }
        // These say what to fix, in one line: no context needed.
        Err(e) => match e.downcast_ref::<Error>() {
            Some(inner) if inner.is_access_denied() => Err(anyhow::anyhow!("{inner}")),
            _ => Err(e),
        },
        ok => ok,
    }
}

async fn run_connected(client: &Client, cli: Cli) -> anyhow::Result<i32> {
    let client = client.clone();
    let at = cli.global.endpoints.join(",");
    match cli.command {
        Command::Campaign(args) => campaign::run(&client, args).await,
        Command::Serve(cmd) => serve::run(client, *cmd).await,
        Command::History(args) => history::run(args),
        Command::Dev(args) => dev::run(args).await,
        Command::Leader {
            name,
            json,
            sources,
            ..
        } => match name.own() {
            Some(name) => ops::leader(&client, name, json, &at).await,
            None => watched::leader(&client, name.as_str(), &sources, json).await,
        },
        Command::Observe { name, json, queue } => {
            ops::observe(&client, &name, ops::Shown { json, queue }, &at).await
        }
        Command::Fence {
            name,
            resource,
            token,
            json,
        } => ops::fence(&client, &name, &resource, token, json, &at).await,
        Command::Resign { name, token } => ops::resign(&client, &name, token).await,
        Command::Depose { name } => ops::depose(&client, &name).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> anyhow::Result<ConnectConfig> {
        let mut argv = vec!["tenure"];
        argv.extend(args);
        argv.extend(["leader", "x"]);
        let cli = Cli::try_parse_from(argv)?;
        connect_config(&cli.global)
    }

    #[test]
    fn user_and_password_resolution() {
        // The password may contain ':'; the first one splits.
        let c = config(&["--user", "app:pa:ss"]).expect("config");
        assert_eq!(c.credentials, Some(Credentials::new("app", "pa:ss")));
        let c = config(&["--user", "app", "--password", "pw"]).expect("config");
        assert_eq!(c.credentials, Some(Credentials::new("app", "pw")));

        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\nignored\n").expect("write");
        let f = file.to_str().expect("utf-8 path");
        let c = config(&["--user", "app", "--password-file", f]).expect("config");
        assert_eq!(c.credentials, Some(Credentials::new("app", "from-file")));

        let twice = config(&["--user", "app:x", "--password-file", f]);
        assert!(format!("{:#}", twice.expect_err("twice")).contains("more than once"));
        let orphan = config(&["--password", "pw"]);
        assert!(format!("{:#}", orphan.expect_err("no user")).contains("without an etcd user"));
        std::fs::write(&file, "\n").expect("write");
        let empty = config(&["--user", "app", "--password-file", f]);
        assert!(format!("{:#}", empty.expect_err("empty")).contains("is empty"));
    }

    #[test]
    fn credentials_never_print_the_password() {
        let c = config(&["--user", "app:s3cret"]).expect("config");
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
