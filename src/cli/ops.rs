//! The one-shot subcommands on one election: `tenure leader` (of tenure's
//! own elections; another system's goes through `watched.rs`), `observe`,
//! `fence`, `resign`, `depose`. Each prints what etcd answered and returns
//! the exit code.

use anyhow::Context;

use super::{stderr, EXIT_ERROR, EXIT_OK, EXIT_REFUSED};
use crate::election::{Client, ElectionName};
use crate::text::visible;

/// How `tenure observe` prints: JSON lines or text, the queue too or not.
pub struct Shown {
    pub json: bool,
    pub queue: bool,
}

/// `tenure leader NAME`: the holder, its token and lease, the queue.
pub async fn leader(
    client: &Client,
    name: &ElectionName,
    json: bool,
    at: &str,
) -> anyhow::Result<i32> {
    let status = client
        .leader(name)
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
            visible(&l.holder),
            l.name,
            l.token,
            l.lease_id,
            l.layout
        );
        print_waiting(&status.waiting);
    }
    if let Some(floor) = status.below_floor {
        stderr::say(format_args!(
            "tenure: token {} is at or below tenure's token floor {floor}: this term \
             dates from before etcd was restored from a snapshot, and its fences are \
             refused (docs/operations.md, Restoring etcd)",
            status.leader.token
        ));
    }
    Ok(EXIT_OK)
}

fn print_waiting(waiting: &[crate::election::Leader]) {
    for (i, w) in waiting.iter().enumerate() {
        println!(
            "  {}. {} waits (token {})",
            i + 1,
            visible(&w.holder),
            w.token
        );
    }
}

/// `tenure observe NAME`: every change of leader (and of the queue), until
/// a signal or the observer's end.
pub async fn observe(
    client: &Client,
    name: &ElectionName,
    shown: Shown,
    at: &str,
) -> anyhow::Result<i32> {
    let mut observer = client
        .observe(name)
        .await
        .with_context(|| format!("observing {name} at {at}"))?;
    let stop = crate::election::shutdown_signal();
    tokio::pin!(stop);
    loop {
        let next = async {
            if shown.queue {
                observer.next_change().await
            } else {
                observer
                    .next()
                    .await
                    .map(|leader| crate::election::Observed {
                        leader,
                        waiting: Vec::new(),
                    })
            }
        };
        let change = tokio::select! {
            c = next => c,
            _ = &mut stop => return Ok(EXIT_OK),
        };
        let Some(seen) = change else {
            return match observer.take_error() {
                Some(e) => Err(e.into()),
                None => Ok(EXIT_ERROR),
            };
        };
        print_observed(name, &seen, &shown)?;
    }
}

fn print_observed(
    name: &ElectionName,
    seen: &crate::election::Observed,
    shown: &Shown,
) -> anyhow::Result<()> {
    match (shown.json, shown.queue) {
        (true, true) => println!("{}", serde_json::to_string(seen)?),
        (true, false) => println!("{}", serde_json::to_string(&seen.leader)?),
        (false, _) => {
            match &seen.leader {
                Some(l) => println!(
                    "{} leads {} (token {})",
                    visible(&l.holder),
                    l.name,
                    l.token
                ),
                None => println!("nobody leads {name}"),
            }
            print_waiting(&seen.waiting);
        }
    }
    Ok(())
}

/// `tenure fence NAME RESOURCE TOKEN`: accepted (exit 0) or refused (3),
/// with why.
pub async fn fence(
    client: &Client,
    name: &ElectionName,
    resource: &str,
    token: i64,
    json: bool,
    at: &str,
) -> anyhow::Result<i32> {
    let d = client
        .fence(name, resource, token)
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

/// `tenure resign NAME TOKEN`: that term ended, if it is the current one.
pub async fn resign(client: &Client, name: &ElectionName, token: i64) -> anyhow::Result<i32> {
    let l = client.resign(name, token).await?;
    println!(
        "resigned: {} (token {}) no longer leads {}",
        visible(&l.holder),
        l.token,
        l.name
    );
    Ok(EXIT_OK)
}

/// `tenure depose NAME`: the current term ended by an operator.
pub async fn depose(client: &Client, name: &ElectionName) -> anyhow::Result<i32> {
    match client.depose(name).await? {
        Some(l) => {
            println!(
                "deposed {} (token {}, lease {:x}) from {}",
                visible(&l.holder),
                l.token,
                l.lease_id,
                l.name
            );
            Ok(EXIT_OK)
        }
        None => {
            eprintln!("tenure: nobody leads {name}; nothing to depose");
            Ok(EXIT_ERROR)
        }
    }
}
