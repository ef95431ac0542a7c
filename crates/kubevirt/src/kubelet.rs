//! The kubelet side: each resource's socket in the device plugin directory, registration on
//! `kubelet.sock`, registering again when kubelet restarts (it deletes the directory's
//! sockets and makes `kubelet.sock` anew: inotify tells), and PodResources `List`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::pb::{deviceplugin as dp, podresources as pr};
use crate::plugin::{self, Plugin, Shared};

/// The device plugin API version registered.
pub const API_VERSION: &str = "v1beta1";
/// kubelet's registration socket in the plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// How long a call to kubelet may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Most devices read from one PodResources answer (a node has at most a few hundred pods).
const MAX_POD_DEVICES: usize = 100_000;

/// A failure talking to kubelet or serving a socket, naming the operation and the path.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// A socket could not be made.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The socket or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// kubelet could not be reached.
    #[error("{op} on {path}: {source}")]
    Connect {
        /// The call.
        op: &'static str,
        /// kubelet's socket.
        path: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// kubelet refused or did not answer.
    #[error("{op} of {subject} on {path}: {status}")]
    Call {
        /// The call.
        op: &'static str,
        /// The resource (or `pods`).
        subject: String,
        /// kubelet's socket.
        path: PathBuf,
        /// kubelet's answer.
        status: Box<tonic::Status>,
    },
    /// The directory cannot be watched.
    #[error("watching {path}: {source}")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: nix::Error,
    },
}

/// A gRPC channel over a UNIX socket.
pub async fn channel(path: &Path, op: &'static str) -> Result<Channel, KubeletError> {
    let p = path.to_path_buf();
    // The URI is required and never used: the connector dials the socket.
    Endpoint::from_static("http://[::]:50051")
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = p.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
        }))
        .await
        .map_err(|source| KubeletError::Connect {
            op,
            path: path.to_path_buf(),
            source,
        })
}

/// The socket file name of a resource: `vgpud-<name with / as _>.sock`.
pub fn endpoint(resource: &str) -> String {
    format!("vgpud-{}.sock", resource.replace(['/', '.'], "_"))
}

/// Registers `resource` served on `endpoint` with kubelet.
pub async fn register(dir: &Path, resource: &str, endpoint: &str) -> Result<(), KubeletError> {
    let path = dir.join(KUBELET_SOCKET);
    let mut c = dp::registration_client::RegistrationClient::new(channel(&path, "Register").await?);
    c.register(dp::RegisterRequest {
        version: API_VERSION.into(),
        endpoint: endpoint.into(),
        resource_name: resource.into(),
        options: Some(plugin::options()),
    })
    .await
    .map_err(|status| KubeletError::Call {
        op: "Register",
        subject: resource.into(),
        path,
        status: Box::new(status),
    })?;
    Ok(())
}

/// The device IDs pods hold, as (resource, ID), from PodResources `List`.
pub async fn held(socket: &Path) -> Result<HashSet<(String, String)>, KubeletError> {
    let mut c = pr::pod_resources_lister_client::PodResourcesListerClient::new(
        channel(socket, "List").await?,
    )
    .max_decoding_message_size(16 << 20);
    let answer = c
        .list(pr::ListPodResourcesRequest {})
        .await
        .map_err(|status| KubeletError::Call {
            op: "List",
            subject: "pods".into(),
            path: socket.to_path_buf(),
            status: Box::new(status),
        })?
        .into_inner();
    let mut out = HashSet::new();
    for pod in answer.pod_resources {
        for c in pod.containers {
            for d in c.devices {
                for id in d.device_ids {
                    if out.len() >= MAX_POD_DEVICES {
                        return Ok(out);
                    }
                    out.insert((d.resource_name.clone(), id));
                }
            }
        }
    }
    Ok(out)
}

/// One resource's server on its socket.
struct Served {
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Binds `path` afresh (a stale file goes) and serves resource `index` on it.
fn serve(shared: &Arc<Shared>, index: usize, path: &Path) -> Result<Served, KubeletError> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(KubeletError::Io {
                op: "removing the stale socket",
                path: path.to_path_buf(),
                source,
            })
        }
    }
    let listener = UnixListener::bind(path).map_err(|source| KubeletError::Io {
        op: "binding",
        path: path.to_path_buf(),
        source,
    })?;
    let (stop, stopped) = oneshot::channel::<()>();
    let svc = dp::device_plugin_server::DevicePluginServer::new(Plugin {
        shared: shared.clone(),
        index,
    });
    let name = shared.resources[index].name.clone();
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let r = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(resource = %name, error = %e, "serving the device plugin failed");
        }
    });
    Ok(Served {
        path: path.to_path_buf(),
        stop: Some(stop),
    })
}

/// Watches `dir` (creates and deletes) on a thread of its own; each event's file name comes
/// through the channel.
fn watch(dir: &Path) -> Result<mpsc::Receiver<String>, KubeletError> {
    let err = |source| KubeletError::Watch {
        path: dir.to_path_buf(),
        source,
    };
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).map_err(err)?;
    inotify
        .add_watch(
            dir,
            AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM,
        )
        .map_err(err)?;
    let (tx, rx) = mpsc::channel(64);
    let path = dir.to_path_buf();
    std::thread::Builder::new()
        .name("plugin-dir-watch".into())
        .spawn(move || loop {
            match inotify.read_events() {
                Ok(events) => {
                    for e in events {
                        let name = e
                            .name
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        if tx.blocking_send(name).is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(dir = %path.display(), error = %e, "inotify read failed");
                    return;
                }
            }
        })
        .map_err(|source| KubeletError::Io {
            op: "starting the watch thread for",
            path: dir.to_path_buf(),
            source,
        })?;
    Ok(rx)
}

/// Serves every resource and keeps it registered: registers at start when kubelet is there,
/// serves a socket again when it is deleted, and registers every resource again whenever
/// `kubelet.sock` is made anew. Runs until the watch fails.
pub async fn run(shared: Arc<Shared>) -> Result<(), KubeletError> {
    let dir = shared.config.plugin_dir.clone();
    std::fs::create_dir_all(&dir).map_err(|source| KubeletError::Io {
        op: "creating",
        path: dir.clone(),
        source,
    })?;
    let mut events = watch(&dir)?;
    let endpoints: Vec<String> = shared.resources.iter().map(|r| endpoint(&r.name)).collect();
    let mut served: Vec<Option<Served>> = shared.resources.iter().map(|_| None).collect();
    let mut need_register = true;
    loop {
        // Serve what is not served (first start, or kubelet deleted the socket).
        for (i, slot) in served.iter_mut().enumerate() {
            let gone = slot.as_ref().is_none_or(|s| !s.path.exists());
            if gone {
                *slot = None;
                match serve(&shared, i, &dir.join(&endpoints[i])) {
                    Ok(s) => {
                        tracing::info!(resource = %shared.resources[i].name, socket = %s.path.display(), "serving");
                        *slot = Some(s);
                        need_register = true;
                    }
                    Err(e) => tracing::error!(error = %e, "cannot serve"),
                }
            }
        }
        if need_register && dir.join(KUBELET_SOCKET).exists() {
            need_register = false;
            for (i, r) in shared.resources.iter().enumerate() {
                match register(&dir, &r.name, &endpoints[i]).await {
                    Ok(()) => tracing::info!(resource = %r.name, "registered with kubelet"),
                    Err(e) => {
                        tracing::warn!(error = %e, "registration failed; again when kubelet.sock is made");
                    }
                }
            }
        }
        let Some(name) = events.recv().await else {
            return Ok(());
        };
        if name == KUBELET_SOCKET && dir.join(KUBELET_SOCKET).exists() {
            need_register = true;
        }
        // Let a burst (kubelet removing every socket) settle, then look at them all.
        tokio::time::sleep(Duration::from_millis(50)).await;
        while let Ok(name) = events.try_recv() {
            if name == KUBELET_SOCKET && dir.join(KUBELET_SOCKET).exists() {
                need_register = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn endpoints_are_file_names() {
        assert_eq!(
            super::endpoint("nvidia.com/GRID_RTX6000-4Q"),
            "vgpud-nvidia_com_GRID_RTX6000-4Q.sock"
        );
    }
}
