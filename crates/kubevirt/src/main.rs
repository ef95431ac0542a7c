//! `vgpud-kubevirt`: a kubelet device plugin (API v1beta1) over vgpud's D-Bus API. It
//! advertises vgpud's devices (a pool's, or as many as vgpud could make on demand) as
//! extended resources named as KubeVirt expects, answers `Allocate` with the variables
//! virt-launcher reads, follows vgpud's signals, and removes on-demand devices no pod holds.

mod config;
mod inventory;
mod kubelet;
mod naming;
mod plugin;
mod reclaim;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures_util::StreamExt;
use vgpud_client::{BusChoice, Client};

/// The generated gRPC code of the vendored protos.
#[allow(missing_docs, clippy::all, clippy::unwrap_used)]
pub mod pb {
    /// The device plugin API, v1beta1.
    pub mod deviceplugin {
        tonic::include_proto!("v1beta1");
    }
    /// kubelet's PodResources API, v1.
    pub mod podresources {
        tonic::include_proto!("v1");
    }
}

/// A kubelet device plugin over vgpud.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The configuration file.
    #[arg(long, default_value = config::DEFAULT_PATH)]
    config: PathBuf,
    /// The kubelet device plugin directory (instead of the file's `plugin_dir`).
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    /// kubelet's PodResources socket (instead of the file's `pod_resources_socket`).
    #[arg(long)]
    pod_resources_socket: Option<PathBuf>,
    /// The D-Bus address of vgpud's bus (default: the system bus).
    #[arg(long)]
    bus_address: Option<String>,
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("connecting to vgpud: {0}")]
    Connect(vgpud_client::Error),
    #[error("watching vgpud's signals: {0}")]
    Signals(vgpud_client::Error),
    #[error(transparent)]
    Kubelet(#[from] kubelet::KubeletError),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VGPUD_KUBEVIRT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "vgpud-kubevirt stops");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), MainError> {
    let mut config = config::Config::load(&args.config)?;
    if let Some(d) = args.plugin_dir {
        config.plugin_dir = d;
    }
    if let Some(p) = args.pod_resources_socket {
        config.pod_resources_socket = p;
    }
    let bus = match args.bus_address {
        Some(a) => BusChoice::Address(a),
        None => BusChoice::System,
    };
    let client = Client::connect(&bus).await.map_err(MainError::Connect)?;
    // Signals first, so nothing between the first read and the subscription is missed.
    let signals = signals(&client).await.map_err(MainError::Signals)?;
    let resources = loop {
        match inventory::resolve(&client, &config).await {
            Ok(r) => break r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot resolve the resources yet; again in 2 s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    for r in &resources {
        tracing::info!(resource = %r.name, r#type = %r.type_id, kind = ?r.kind, mode = ?r.mode, variable = %r.env_var(), "resource");
    }
    let shared = plugin::Shared::new(client, config, resources);
    if let Err(e) = shared.refresh_now().await {
        tracing::warn!(error = %e, "first read of vgpud failed");
    }
    tokio::spawn(follow(shared.clone(), signals));
    tokio::spawn(reclaim::run(shared.clone()));
    let kubelet = kubelet::run(shared);
    tokio::select! {
        r = kubelet => r?,
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
        _ = terminated() => tracing::info!("terminated"),
    }
    Ok(())
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

type Signals = std::pin::Pin<Box<dyn futures_util::Stream<Item = ()> + Send>>;

/// Every signal on vgpud's objects (the manager's, PropertiesChanged, the object manager's
/// InterfacesAdded/Removed) and vgpud's name changing owner.
async fn signals(client: &Client) -> Result<Signals, vgpud_client::Error> {
    let conn = client.connection();
    let objects = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .path_namespace("/org/vgpud1")
        .build()?;
    let owner = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.DBus")
        .member("NameOwnerChanged")
        .arg(0, vgpud_client::BUS_NAME)
        .build()?;
    let a = zbus::MessageStream::for_match_rule(objects, conn, std::num::NonZeroUsize::new(1024))
        .await?;
    let b =
        zbus::MessageStream::for_match_rule(owner, conn, std::num::NonZeroUsize::new(16)).await?;
    Ok(Box::pin(futures_util::stream::select(a, b).map(|_| ())))
}

/// Refreshes the listings after each burst of signals (and when asked, after an Allocate or
/// a reclaim): no timer, so a change shows within one refresh.
async fn follow(shared: Arc<plugin::Shared>, mut signals: Signals) {
    loop {
        tokio::select! {
            s = signals.next() => if s.is_none() {
                tracing::error!("vgpud's signal stream ended");
                return;
            },
            _ = shared.refresh.notified() => {}
        }
        // A call's signals come as one batch: take the rest of it before reading.
        tokio::time::sleep(Duration::from_millis(20)).await;
        while let Some(Some(())) = futures_util::FutureExt::now_or_never(signals.next()) {}
        while let Err(e) = shared.refresh_now().await {
            tracing::warn!(error = %e, "reading vgpud failed; again in 1 s");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
