//! Steady state: clusters registered through the API one after the other at the rate
//! they are to be probed, so that their probes stay spread over the interval as a real
//! fleet's are, then vigil's CPU, writes and scheduling lag over a window of several
//! intervals.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::vigil::{Setup, Vigil, Window};

/// One steady run: the interval the rate needed and what the window measured.
pub struct Steady {
    pub clusters: usize,
    pub interval: u64,
    pub window: Window,
}

/// Registers `clusters` (API bodies) at `rate` per second into a fresh `vigil serve`
/// whose interval makes that the probe rate, lets one interval pass, and measures the
/// next `max(3 intervals, 10 s)`. Every cluster must be ONLINE at the end.
pub async fn steady(
    binary: &Path,
    plugin_dir: &Path,
    credential_dir: Option<&Path>,
    work: &Path,
    clusters: &[serde_json::Value],
    rate: f64,
) -> Result<Steady, String> {
    let n = clusters.len();
    let interval = ((n as f64 / rate).round() as u64).max(1);
    let vigil = Vigil::start(&Setup {
        binary,
        plugin_dir,
        kubeconfigs: None,
        credential_dir,
        interval,
        work: work.to_path_buf(),
    })?;
    let deadline = Duration::from_secs(600);
    vigil
        .wait_for(
            deadline,
            Duration::from_millis(50),
            "vigil answering",
            |_| true,
        )
        .await?;
    let start = Instant::now();
    for (i, body) in clusters.iter().enumerate() {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(at.into()).await;
        vigil.register(body).await?;
    }
    let total = n as u64;
    vigil
        .wait_for(
            deadline,
            Duration::from_millis(250),
            "every registered cluster probed",
            |s| s.decided >= total,
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(interval)).await;
    let from = vigil.mark().await?;
    tokio::time::sleep(Duration::from_secs((3 * interval).max(10))).await;
    let to = vigil.mark().await?;
    if to.scrape.online < total {
        return Err(format!(
            "only {} of {n} clusters ONLINE at the end of the steady window at {rate}/s",
            to.scrape.online
        ));
    }
    Ok(Steady {
        clusters: n,
        interval,
        window: Window::between(&from, &to),
    })
}
