//! `tenure dev`: a local etcd (from PATH, loopback, temp data dir), `tenure
//! serve --no-auth`, and the demo fleet. Prints the dashboard's URL; Ctrl-C
//! stops everything and removes the temp dir.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use tokio::process::Command;

use super::serve::{self, ServeArgs};
use crate::election::{shutdown_signal, Client};

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Address of the dashboard.
    #[arg(long, env = "TENURE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// How often the split-brain story replays, in seconds.
    #[arg(long, default_value = "180")]
    pub story_every: u64,

    /// Keep the history here instead of in the temp dir.
    #[arg(long)]
    pub db: Option<PathBuf>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `program` in PATH.
fn in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn find_etcd() -> anyhow::Result<PathBuf> {
    in_path("etcd").ok_or_else(|| {
            anyhow::anyhow!(
                "etcd is not in PATH. Install it with: sudo apt-get install -y etcd-server etcd-client \
                 (or run scripts/setup.sh), then run tenure dev again"
            )
        })
}

pub async fn run(args: DevArgs) -> anyhow::Result<i32> {
    let etcd_bin = find_etcd()?;
    let dir = tempfile_dir()?;
    let (mut etcd, endpoint, peer) = start_etcd(&etcd_bin, &dir)?;
    let client = Client::connect(std::slice::from_ref(&endpoint), "")
        .await?
        .with_op_timeout(Duration::from_secs(2));
    until_ready(&mut etcd, &client, &endpoint, &peer).await?;
    eprintln!("tenure dev: etcd {endpoint} (data in {})", dir.display());
    // etcdctl beside the etcd that runs, else in PATH.
    let etcdctl = etcd_bin
        .parent()
        .map(|d| d.join("etcdctl"))
        .filter(|p| p.is_file())
        .or_else(|| in_path("etcdctl"));
    let programs = crate::dev::Programs {
        tenure: std::env::current_exe().context("locating the tenure binary")?,
        etcdctl: etcdctl.clone(),
        endpoint: endpoint.clone(),
    };
    let fleet = crate::dev::start(
        client.clone(),
        programs,
        Duration::from_secs(args.story_every.max(30)),
    );
    announce(&args, &endpoint, etcdctl.is_some());
    let mut serve_args = serve_args(&args, &dir, etcdctl.is_some())?;
    // A kept history (--db) was written over an earlier run's etcd: this
    // one is new at every start, and adopted as that history's etcd.
    let key = client.keys().elections_root().into_bytes();
    if let Some(id) = crate::feed::identity::etcd_cluster_id(&client, key).await {
        serve_args.adopt_etcd = vec![format!("{id:x}")];
    }
    let code = serve::run_until(client, serve_args, async {
        let _ = shutdown_signal().await;
    })
    .await;
    drop(fleet);
    let _ = etcd.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    code
}

/// The demo's etcd on two free loopback ports, its data in `dir`; its
/// client and peer URLs.
fn start_etcd(
    etcd_bin: &Path,
    dir: &Path,
) -> anyhow::Result<(tokio::process::Child, String, String)> {
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let endpoint = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let etcd = Command::new(etcd_bin)
        .args(["--name", "tenure-dev", "--data-dir"])
        .arg(dir.join("etcd"))
        .args([
            "--listen-client-urls",
            &endpoint,
            "--advertise-client-urls",
            &endpoint,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .arg("--initial-cluster")
        .arg(format!("tenure-dev={peer}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", etcd_bin.display()))?;
    Ok((etcd, endpoint, peer))
}

/// Waits (10 s at most) until the demo's etcd answers a read.
async fn until_ready(
    etcd: &mut tokio::process::Child,
    client: &Client,
    endpoint: &str,
    peer: &str,
) -> anyhow::Result<()> {
    let probe = crate::election::ElectionName::new("probe")?;
    for _ in 0..100 {
        if let Some(status) = etcd.try_wait()? {
            bail!("etcd exited at start ({status}); is the port of {endpoint} or {peer} taken?");
        }
        if client.leader(&probe).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("etcd did not become ready at {endpoint} within 10 s")
}

/// What the demo runs, and where to look.
fn announce(args: &DevArgs, endpoint: &str, etcdctl: bool) {
    let other = if etcdctl {
        format!(", {}cron/leader (etcdctl elect)", crate::dev::ELECT_PREFIX)
    } else {
        eprintln!(
            "tenure dev: etcdctl is not in PATH: the fleet has no election of another system"
        );
        String::new()
    };
    eprintln!(
        "tenure dev: demo fleet running (payments/primary, search/indexer, billing/reconciler, orders/scheduler, boss-fight{other})"
    );
    eprintln!(
        "tenure dev: open http://{}/ — Ctrl-C stops everything",
        args.listen
    );
    eprintln!("tenure dev: try: TENURE_ENDPOINTS={endpoint} tenure leader boss-fight --json");
}

/// The demo's serve: open to everyone on loopback, its history in `dir`
/// unless `--db` says otherwise.
fn serve_args(args: &DevArgs, dir: &Path, etcdctl: bool) -> anyhow::Result<ServeArgs> {
    Ok(ServeArgs {
        listen: args.listen,
        db: args.db.clone().unwrap_or_else(|| dir.join("history.db")),
        retention: Duration::from_secs(7 * 24 * 3600),
        max_elections: 100_000,
        api_token: None,
        read_token: None,
        no_auth: true,
        allowed_hosts: Vec::new(),
        max_ttl: 3600,
        campaign_rate: 100,
        max_body: 16 * 1024,
        cluster_poll: Duration::from_secs(2),
        writer_ttl: Duration::from_secs(5),
        // Its etcd is new at every start: a kept history would read as a
        // reset each time, and a floor would refuse the demo's campaigns.
        raise_token_floor: false,
        adopt_etcd: Vec::new(),
        // The other system's election, read as `--source` reads it.
        sources: if etcdctl {
            vec![crate::layout::Source::parse(&format!(
                "concurrency:{}",
                crate::dev::ELECT_PREFIX
            ))?]
        } else {
            Vec::new()
        },
        clusters: Vec::new(),
        config: None,
        sources_only: false,
        kubeconfig: None,
        in_cluster: false,
        kube_heartbeats: false,
    })
}

/// A fresh directory under the system temp dir.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "tenure-dev-{}-{}",
        std::process::id(),
        crate::events::now_ms()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
