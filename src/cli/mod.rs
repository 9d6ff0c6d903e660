//! The `tenure` command line: one function per subcommand. This is the
//! binary's edge, the only place where errors become `anyhow` and exit codes.
//!
//! Exit codes: 0 success; 1 error (etcd unreachable, nobody leads, bad
//! state); 2 usage error; 3 refused (fence refused, election held, token
//! does not hold the election, `--wait-timeout` passed); 4 leadership lost
//! while running a command; 128+N ended by signal N.

mod campaign;
mod dev;
mod history;
mod serve;

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::election::{Client, ElectionName, Error};

pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Become leader (or wait for it), run CMD while leader, stop it when leadership is lost.
    Campaign(campaign::CampaignArgs),
    /// Show who leads an election (exit 1 when nobody does).
    Leader {
        name: ElectionName,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print every leader change of an election, one line each, until interrupted.
    Observe {
        name: ElectionName,
        /// Print one JSON value per line (`null` when nobody leads).
        #[arg(long)]
        json: bool,
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
    Serve(serve::ServeArgs),
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
            eprintln!("tenure: error: {e:#}");
            match e.downcast_ref::<Error>() {
                Some(Error::NotHolder { .. }) => EXIT_REFUSED,
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
        .with_writer(std::io::stderr)
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
    let client = Client::connect(&global.endpoints, &global.prefix)
        .await
        .with_context(|| format!("connecting to etcd at {}", global.endpoints.join(",")))?;
    Ok(client.with_op_timeout(global.timeout))
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    // Connecting is lazy: commands that need no etcd (history) never touch it.
    let client = connect(&cli.global).await?;
    let at = cli.global.endpoints.join(",");
    match cli.command {
        Command::Campaign(args) => campaign::run(&client, args).await,
        Command::Serve(args) => serve::run(client, args).await,
        Command::History(args) => history::run(args),
        Command::Dev(args) => dev::run(args).await,
        Command::Leader { name, json } => {
            let status = client
                .leader(&name)
                .await
                .with_context(|| format!("reading the leader of {name} from {at}"))?;
            let Some(status) = status else {
                eprintln!("tenure: nobody leads {name}");
                return Ok(EXIT_ERROR);
            };
            if json {
                println!("{}", serde_json::to_string(&status)?);
            } else {
                let l = &status.leader;
                let ttl = status
                    .ttl_remaining_seconds
                    .map(|t| format!("{t} s left"))
                    .unwrap_or_else(|| "no lease".to_owned());
                println!(
                    "{} leads {} (token {}, lease {:x}, {ttl}, {} layout)",
                    l.holder, l.name, l.token, l.lease_id, l.layout
                );
            }
            Ok(EXIT_OK)
        }
        Command::Observe { name, json } => {
            let mut observer = client
                .observe(&name)
                .await
                .with_context(|| format!("observing {name} at {at}"))?;
            let stop = crate::election::shutdown_signal();
            tokio::pin!(stop);
            loop {
                let change = tokio::select! {
                    c = observer.next() => c,
                    _ = &mut stop => return Ok(EXIT_OK),
                };
                let Some(leader) = change else {
                    return Ok(EXIT_ERROR);
                };
                if json {
                    println!("{}", serde_json::to_string(&leader)?);
                } else {
                    match leader {
                        Some(l) => println!("{} leads {} (token {})", l.holder, l.name, l.token),
                        None => println!("nobody leads {name}"),
                    }
                }
            }
        }
        Command::Fence {
            name,
            resource,
            token,
            json,
        } => {
            let d = client
                .fence(&name, &resource, token)
                .await
                .with_context(|| format!("checking the fence at {at}"))?;
            if json {
                println!("{}", serde_json::to_string(&d)?);
            } else if d.accepted {
                println!("accepted: token {token} may write {resource} (election {name})");
            } else {
                let current = match (d.current_token, &d.current_holder) {
                    (Some(t), Some(h)) => format!("the current term is {h:?} with token {t}"),
                    _ => "nobody leads".to_owned(),
                };
                let stored = d
                    .stored_token
                    .map(|t| format!("; {resource} has accepted token {t}"))
                    .unwrap_or_default();
                println!(
                    "refused: {}: token {token} may not write {resource}: {current}{stored}",
                    d.reason.map(|r| r.as_str()).unwrap_or("refused")
                );
            }
            Ok(if d.accepted { EXIT_OK } else { EXIT_REFUSED })
        }
        Command::Resign { name, token } => {
            let l = client.resign(&name, token).await?;
            println!(
                "resigned: {} (token {}) no longer leads {}",
                l.holder, l.token, l.name
            );
            Ok(EXIT_OK)
        }
        Command::Depose { name } => match client.depose(&name).await? {
            Some(l) => {
                println!(
                    "deposed {} (token {}, lease {:x}) from {}",
                    l.holder, l.token, l.lease_id, l.name
                );
                Ok(EXIT_OK)
            }
            None => {
                eprintln!("tenure: nobody leads {name}; nothing to depose");
                Ok(EXIT_ERROR)
            }
        },
    }
}
