//! One cluster a feed watches, as serve was told of it: its name, its
//! etcd connection (made at start, or made again until it answers) and
//! sources, or its Kubernetes API; and the etcd cluster id the operator
//! adopted for it.

use std::sync::Arc;
use std::time::Duration;

use crate::election::Client;
use crate::layout::Source;

/// One cluster to watch.
#[derive(Clone)]
pub struct Watched {
    /// `None`: the one cluster of a serve without `--cluster`.
    pub name: Option<Arc<str>>,
    /// `None`: etcd did not answer at start, and connecting needs an
    /// answer (a user's token); [`Connector::connect`] is tried again.
    pub client: Option<Client>,
    pub connector: Connector,
    pub sources: Vec<Source>,
    pub sources_only: bool,
    /// `Some`: its Leases are read through the Kubernetes API instead of
    /// its etcd (`serve --kubeconfig`/`--in-cluster`; no client, no
    /// connector).
    pub api: Option<Arc<crate::watch::kube::KubeConfig>>,
    /// The etcd cluster id the operator adopted for it (`--adopt-etcd`):
    /// taken as a new timeline of this cluster though its history recorded
    /// another (`feed/identity.rs`).
    pub adopt: Option<u64>,
}

/// How to connect to one cluster, again and again until it answers.
#[derive(Clone)]
pub struct Connector {
    endpoints: Vec<String>,
    prefix: String,
    config: crate::election::ConnectConfig,
    timeout: Duration,
}

impl Connector {
    /// The one cluster's, already connected (nothing to try again).
    pub fn of(client: &Client) -> Connector {
        Connector {
            endpoints: client.endpoints().to_vec(),
            prefix: client.keys().prefix().to_owned(),
            config: client.connect_config().clone(),
            timeout: client.op_timeout(),
        }
    }

    /// No etcd at all (Leases read through the Kubernetes API).
    pub fn none() -> Connector {
        Connector {
            endpoints: Vec::new(),
            prefix: String::new(),
            config: Default::default(),
            timeout: Duration::from_secs(5),
        }
    }

    pub async fn connect(&self) -> Result<Client, crate::election::Error> {
        Ok(
            Client::connect_with(&self.endpoints, &self.prefix, self.config.clone())
                .await?
                .with_op_timeout(self.timeout),
        )
    }

    /// One to connect to `endpoints` under `prefix`, each request bounded
    /// by `timeout`.
    pub fn new(
        endpoints: Vec<String>,
        prefix: String,
        config: crate::election::ConnectConfig,
        timeout: Duration,
    ) -> Connector {
        Connector {
            endpoints,
            prefix,
            config,
            timeout,
        }
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }
}

impl Watched {
    /// A cluster whose Leases are read through `api`: no etcd.
    pub fn through_api(
        name: Option<Arc<str>>,
        api: Arc<crate::watch::kube::KubeConfig>,
    ) -> Watched {
        Watched {
            name,
            client: None,
            connector: Connector::none(),
            sources: Vec::new(),
            sources_only: true,
            api: Some(api),
            adopt: None,
        }
    }
}
