//! [`MockServer`]: the engine and the HTTP app on a real socket inside this process, with OOM
//! death (listener dropped, streams cut) or restart, and graceful shutdown.

use crate::config::Config;
use crate::conn::Timeouts;
use crate::engine::EngineHandle;
use crate::http::{app, AppState};
use crate::listen::StampedListener;
use crate::truth::{GroundTruth, DEFAULT_TRUTH_WINDOW};
use anyhow::Context;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// A mock server running inside this process on a real socket.
pub struct MockServer {
    addr: SocketAddr,
    truth: GroundTruth,
    crash_log: Arc<Mutex<Option<String>>>,
    crash_events: watch::Receiver<u64>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    serve: tokio::task::JoinHandle<()>,
    supervisor: tokio::task::JoinHandle<()>,
    state: AppState,
}

/// Pending connections the listening socket queues before accepting (the kernel caps it at
/// `net.core.somaxconn`). uvicorn, which serves SGLang's HTTP API, listens with 2048. Rule: at
/// least as many as the clients that connect at once; tokio's `TcpListener::bind` listens with
/// 128, and the kernel drops handshakes past the queue (they retry a second later).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the first address `host:port` resolves to that accepts a listening socket.
async fn bind(host: &str, port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = match addr {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        };
        let bound = socket.and_then(|s| {
            // As std's and tokio's bind do on Unix: a restarted server can take its port back
            // while the previous run's connections are in TIME_WAIT.
            #[cfg(unix)]
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            let listener = s.listen(LISTEN_BACKLOG)?;
            crate::listen::timestamp_arrivals(&listener);
            Ok(listener)
        });
        match bound {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the host resolved to no address",
        )
    }))
}

/// How the server process runs, beside the simulated deployment ([`Config`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeOptions {
    /// Ended requests whose ground truth is kept (every running request's is).
    pub truth_window: usize,
    /// The connections' keep-alive and header-read timeouts.
    pub timeouts: Timeouts,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            truth_window: DEFAULT_TRUTH_WINDOW,
            timeouts: Timeouts::default(),
        }
    }
}

impl MockServer {
    /// Validates the config, binds host:port and spawns the engine and the HTTP server, with the
    /// default [`ServeOptions`].
    pub async fn start(config: Config) -> anyhow::Result<MockServer> {
        MockServer::start_with(config, ServeOptions::default()).await
    }

    /// [`MockServer::start`] with these serving options.
    pub async fn start_with(config: Config, options: ServeOptions) -> anyhow::Result<MockServer> {
        if options.truth_window == 0 {
            anyhow::bail!("the ground truth window must hold at least 1 request");
        }
        config
            .validate()
            .context("invalid mock-server configuration")?;
        let listener = bind(&config.host, config.port)
            .await
            .with_context(|| format!("cannot bind {}:{}", config.host, config.port))?;
        let addr = listener.local_addr()?;
        let truth = GroundTruth::with_window(options.truth_window);
        let crashed = Arc::new(watch::channel(None::<String>).0);
        let engine = EngineHandle::spawn(config.clone(), truth.clone(), crashed.clone());
        let state = AppState::new(engine);
        if config.startup_s > 0.0 {
            // Start-up is model time, scaled like every other duration.
            state.set_starting_until(Some(
                Instant::now() + Duration::from_secs_f64(config.startup_s / config.time_scale),
            ));
        }
        let router = app(state.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let listener = StampedListener::new(listener);
        let serve = tokio::spawn(crate::conn::serve(
            listener,
            router,
            options.timeouts,
            stop_rx,
        ));
        let crash_log = Arc::new(Mutex::new(None));
        let (ev_tx, ev_rx) = watch::channel(0u64);
        let supervisor = {
            let crash_log = crash_log.clone();
            let state = state.clone();
            let truth = truth.clone();
            let serve_abort = serve.abort_handle();
            let mut rx = crashed.subscribe();
            tokio::spawn(async move {
                loop {
                    if rx.wait_for(|c| c.is_some()).await.is_err() {
                        return;
                    }
                    let reason = rx.borrow().clone().unwrap_or_default();
                    *crash_log.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                    if !config.restart_on_oom {
                        // The process is dead: stop accepting connections.
                        serve_abort.abort();
                        ev_tx.send_modify(|n| *n += 1);
                        return;
                    }
                    let startup =
                        Duration::from_secs_f64(config.startup_s.max(0.0) / config.time_scale);
                    state.set_starting_until(Some(Instant::now() + startup));
                    crashed.send_replace(None);
                    let engine =
                        EngineHandle::spawn(config.clone(), truth.clone(), crashed.clone());
                    state.replace_engine(engine);
                    tracing::warn!("engine restarted after out-of-memory (empty cache)");
                    // Waiters see the restarted state (503 while starting, new engine).
                    ev_tx.send_modify(|n| *n += 1);
                }
            })
        };
        Ok(MockServer {
            addr,
            truth,
            crash_log,
            crash_events: ev_rx,
            shutdown: Some(stop_tx),
            serve,
            supervisor,
            state,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A live view of the ground truth.
    pub fn truth(&self) -> GroundTruth {
        self.truth.clone()
    }

    /// The app state (engine handle and start-up state).
    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// `Some(reason)` after an OOM death (also after a restart).
    pub fn crashed(&self) -> Option<String> {
        self.crash_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Resolves when the server dies of OOM.
    pub async fn wait_crashed(&self) -> String {
        let mut rx = self.crash_events.clone();
        let _ = rx.wait_for(|n| *n > 0).await;
        self.crashed().unwrap_or_default()
    }

    /// Stops accepting, lets open responses finish, and stops the engine.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.serve).await;
        self.supervisor.abort();
    }
}
