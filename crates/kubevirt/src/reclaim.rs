//! Removes on-demand devices no pod holds: kubelet's PodResources `List` says which device
//! IDs pods hold; a device of ours that none has held for the grace period is removed. A
//! device whose VM still runs is never removed: vgpud refuses (`Busy`) to remove a device
//! the kernel reports in use (its VFIO device open by QEMU), and the plugin keeps it and
//! asks again at the next look.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpud_client::Options;

use crate::config::Mode;
use crate::kubelet;
use crate::plugin::Shared;

/// Looks every `reclaim_interval_s` until the process ends.
pub async fn run(shared: Arc<Shared>) {
    let interval = Duration::from_secs(shared.config.reclaim_interval_s);
    let grace = Duration::from_secs(shared.config.reclaim_grace_s);
    // (resource index, ID) → since when no pod holds it.
    let mut unheld: HashMap<(usize, String), Instant> = HashMap::new();
    loop {
        tokio::time::sleep(interval).await;
        sweep(&shared, grace, &mut unheld).await;
    }
}

async fn sweep(shared: &Shared, grace: Duration, unheld: &mut HashMap<(usize, String), Instant>) {
    let held = match kubelet::held(&shared.config.pod_resources_socket).await {
        Ok(h) => h,
        Err(e) => {
            // Nothing is decided without kubelet's word: no clock runs.
            tracing::warn!(error = %e, "PodResources unavailable; nothing is reclaimed");
            unheld.clear();
            return;
        }
    };
    let now = Instant::now();
    let mut changed = false;
    for (i, r) in shared.resources.iter().enumerate() {
        let mut st = shared.states[i].lock().await;
        // The IDs to judge: those handed out, and (on demand) every device of ours.
        let mut ids: Vec<(String, Option<String>)> = st
            .memory
            .allocated
            .iter()
            .map(|id| (id.clone(), None))
            .collect();
        if r.mode == Mode::OnDemand {
            for (id, e) in &st.memory.last {
                if e.made {
                    ids.retain(|(i, _)| i != id);
                    ids.push((id.clone(), Some(e.uuid.clone())));
                }
            }
        }
        let mut live = Vec::new();
        for (id, uuid) in ids {
            let key = (i, id.clone());
            if held.contains(&(r.name.clone(), id.clone())) {
                unheld.remove(&key);
                continue;
            }
            let since = *unheld.entry(key.clone()).or_insert(now);
            live.push(key.clone());
            if now.duration_since(since) < grace {
                continue;
            }
            match uuid {
                None => {
                    // Nothing of ours to remove (a pool device, or one already gone).
                    st.memory.allocated.remove(&id);
                    unheld.remove(&key);
                    changed = true;
                }
                Some(uuid) => match shared.client.remove_device(&uuid, &Options::new()).await {
                    Ok(()) | Err(vgpud_client::Error::NotFound(_)) => {
                        tracing::info!(resource = %r.name, id = %id, %uuid, "reclaimed: no pod held it for the grace period");
                        st.memory.allocated.remove(&id);
                        unheld.remove(&key);
                        changed = true;
                    }
                    Err(vgpud_client::Error::Busy(why)) => {
                        tracing::warn!(resource = %r.name, id = %id, %uuid, %why, "kept: in use");
                    }
                    Err(e) => {
                        tracing::warn!(resource = %r.name, id = %id, %uuid, error = %e, "reclaiming failed");
                    }
                },
            }
        }
        unheld.retain(|k, _| k.0 != i || live.contains(k));
    }
    if changed {
        shared.refresh.notify_one();
    }
}
