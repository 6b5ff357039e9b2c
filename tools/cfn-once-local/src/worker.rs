//! One region's worker on local AWS: the local event source mapping feeding the handler, in a
//! task that can be stopped, killed (a crash: the in-flight batch is dropped mid-protocol) and
//! started again.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::esm::LocalEventSourceMapping;
use cfn_once::app::App;

/// A regional worker.
#[derive(Debug)]
pub struct RegionalWorker {
    app: Arc<App>,
    esm: LocalEventSourceMapping,
    running: Option<(JoinHandle<()>, oneshot::Sender<()>)>,
}

impl RegionalWorker {
    /// A stopped worker serving `esm`'s queue with `app`.
    pub fn new(app: App, esm: LocalEventSourceMapping) -> Self {
        Self { app: Arc::new(app), esm, running: None }
    }

    /// Starts polling, unless already running.
    pub fn start(&mut self) {
        if self.running.is_some() {
            return;
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let (app, esm) = (Arc::clone(&self.app), self.esm.clone());
        let task = tokio::spawn(async move {
            let handler = |event| cfn_once::lambda::handle(&app, event);
            esm.run(handler, async { drop(stopped.await) }, |report| {
                if let Err(error) = report {
                    tracing::warn!(error = format!("{error:#}"), "event source mapping poll failed");
                }
            })
            .await;
        });
        self.running = Some((task, stop));
    }

    /// Whether it is polling: started, and neither stopped nor killed since.
    pub fn is_running(&self) -> bool {
        self.running.as_ref().is_some_and(|(task, _)| !task.is_finished())
    }

    /// Stops after the batch in hand is settled.
    pub async fn stop(&mut self) {
        if let Some((task, stop)) = self.running.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Takes the worker down for an outage: kills it, then waits out its last long poll, which
    /// is still open on the server side. A message arriving during that poll would be handed to
    /// the dead poller and stay invisible for the visibility timeout, exactly as with a real
    /// poller that died; after this, new messages simply wait for the worker to come back.
    pub async fn take_down(&mut self) {
        self.kill().await;
        tokio::time::sleep(self.esm.long_poll() + std::time::Duration::from_millis(300)).await;
    }

    /// Stops at once, dropping the batch in hand wherever it is: a crash.
    pub async fn kill(&mut self) {
        if let Some((task, _stop)) = self.running.take() {
            task.abort();
            let _ = task.await;
        }
    }
}
