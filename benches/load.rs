//! The write load: many elections changing leader as fast as etcd commits.
//!
//! Each election has one long-lived lease (granted once) and runs `cycles`
//! terms back to back with tenure's own txns (see `common`): the campaign
//! txn (a PUT of the leader key: `term_started`), then the resign txn (the
//! DELETE of the leader key and the PUT of the end marker in one revision:
//! `term_ended`, cause `resigned`). Two revisions and three etcd events per
//! term. The holder alternates, so every start names a previous holder.
//! All elections write concurrently, over a few client connections.

use std::time::{Duration, Instant};

use anyhow::Result;
use etcd_client::Client as Etcd;
use tenure::election::ElectionName;

use crate::common::{self, campaign_txn, connect, grant, resign_txn};

/// Elections ready to churn: names, one lease each, a few connections.
pub struct Fleet {
    pub names: Vec<ElectionName>,
    pub leases: Vec<i64>,
    clients: Vec<Etcd>,
}

/// What one [`Fleet::churn`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// etcd's revision before the first write.
    pub before: i64,
    /// The last revision written.
    pub last: i64,
    pub terms: usize,
    pub elapsed: Duration,
}

impl Written {
    pub fn revisions(&self) -> i64 {
        self.last - self.before
    }

    /// etcd events in `(before, last]`: three per term.
    pub fn etcd_events(&self) -> usize {
        self.terms * 3
    }
}

impl Fleet {
    pub async fn new(endpoint: &str, prefix: &str, elections: usize) -> Result<Fleet> {
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(connect(endpoint).await?);
        }
        let names: Vec<ElectionName> = (0..elections)
            .map(|i| common::name(&format!("{prefix}-{i:05}")))
            .collect();
        let mut leases = Vec::with_capacity(elections);
        for chunk in (0..elections).collect::<Vec<_>>().chunks(64) {
            let mut set = tokio::task::JoinSet::new();
            for &i in chunk {
                let mut c = clients[i % clients.len()].clone();
                set.spawn(async move { (i, grant(&mut c, 3600).await) });
            }
            let mut got = Vec::new();
            while let Some(r) = set.join_next().await {
                let (i, lease) = r?;
                got.push((i, lease?));
            }
            got.sort();
            leases.extend(got.into_iter().map(|(_, l)| l));
        }
        Ok(Fleet {
            names,
            leases,
            clients,
        })
    }

    pub async fn revision(&self) -> Result<i64> {
        common::revision(&mut self.clients[0].clone()).await
    }

    /// Every election runs `cycles` terms, all elections at once.
    pub async fn churn(&self, cycles: usize) -> Result<Written> {
        let before = self.revision().await?;
        let t = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for (i, (name, &lease)) in self.names.iter().zip(&self.leases).enumerate() {
            let mut c = self.clients[i % self.clients.len()].clone();
            let name = name.clone();
            set.spawn(async move {
                let mut last = 0;
                for cycle in 0..cycles {
                    let holder = if cycle % 2 == 0 { "cand-a" } else { "cand-b" };
                    let Some(token) = campaign_txn(&mut c, &name, holder, lease).await? else {
                        anyhow::bail!("{name} is held by someone else");
                    };
                    last = resign_txn(&mut c, &name, token, lease).await?;
                }
                Ok::<i64, anyhow::Error>(last)
            });
        }
        let mut last = before;
        while let Some(r) = set.join_next().await {
            last = last.max(r??);
        }
        Ok(Written {
            before,
            last,
            terms: cycles * self.names.len(),
            elapsed: t.elapsed(),
        })
    }

    /// Every election gets a leader (one campaign txn each, 64 at a time).
    pub async fn campaign_all(&self, holder: &str) -> Result<Vec<i64>> {
        let mut tokens = vec![0; self.names.len()];
        let idx: Vec<usize> = (0..self.names.len()).collect();
        for chunk in idx.chunks(64) {
            let mut set = tokio::task::JoinSet::new();
            for &i in chunk {
                let mut c = self.clients[i % self.clients.len()].clone();
                let (name, lease, holder) = (
                    self.names[i].clone(),
                    self.leases[i],
                    format!("{holder}-{i}"),
                );
                set.spawn(async move { (i, campaign_txn(&mut c, &name, &holder, lease).await) });
            }
            while let Some(r) = set.join_next().await {
                let (i, t) = r?;
                tokens[i] = t?.ok_or_else(|| anyhow::anyhow!("{} already held", self.names[i]))?;
            }
        }
        Ok(tokens)
    }

    /// Revokes the leases (their end markers go with them).
    pub async fn release(&self) {
        for (i, &lease) in self.leases.iter().enumerate() {
            let mut c = self.clients[i % self.clients.len()].clone();
            let _ = tokio::time::timeout(Duration::from_secs(2), c.lease_revoke(lease)).await;
        }
    }
}
