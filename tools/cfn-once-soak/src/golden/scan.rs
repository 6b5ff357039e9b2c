//! The lease table scanned while a fleet writes it: every few hundred milliseconds a consistent
//! scan, and the first item of each class of the expected format kept ([`Collected`]), with the
//! other shapes and formats seen counted for generated.txt.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::golden::records::{Item, class_of, format_of, shape_of};

/// What the scans found.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// The first item of each class, of the expected format.
    pub(crate) kept: BTreeMap<String, Item>,
    /// Items seen per class (the same item counts at every scan that sees it unchanged).
    pub(crate) seen: BTreeMap<String, u64>,
    /// Per class, the shape of the item kept, and how every other shape seen differed from it.
    pub(crate) shapes: BTreeMap<String, (BTreeMap<String, String>, BTreeSet<String>)>,
    /// Items of another format, per (class, format): not kept.
    pub(crate) other_formats: BTreeMap<(String, u32), u64>,
    pub(crate) scans: u64,
}

impl Collected {
    fn add(&mut self, item: Item, format: u32) {
        let class = class_of(&item);
        let item_format = format_of(&item);
        if item_format != format {
            *self.other_formats.entry((class, item_format)).or_default() += 1;
            return;
        }
        *self.seen.entry(class.clone()).or_default() += 1;
        let shape = shape_of(&item);
        let (first, others) = self.shapes.entry(class.clone()).or_insert_with(|| (shape.clone(), BTreeSet::new()));
        if *first != shape {
            let names: BTreeSet<&String> = first.keys().chain(shape.keys()).collect();
            let differences: Vec<String> = names
                .into_iter()
                .filter(|name| first.get(*name) != shape.get(*name))
                .map(|name| match (first.get(name), shape.get(name)) {
                    (Some(_), None) => format!("without {name}"),
                    (None, Some(kind)) => format!("with {name} ({kind})"),
                    (_, kind) => format!("{name} as {}", kind.map_or("", String::as_str)),
                })
                .collect();
            others.insert(differences.join(", "));
        }
        self.kept.entry(class).or_insert(item);
    }
}

pub(crate) type Shared = Arc<Mutex<Collected>>;

pub(crate) fn lock(collected: &Shared) -> std::sync::MutexGuard<'_, Collected> {
    collected.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One consistent scan of `table`, every page; a table not made yet is empty.
pub(crate) async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page =
            client.scan().table_name(table).consistent_read(true).set_exclusive_start_key(start.take()).send().await;
        let page = match page {
            Ok(page) => page,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
                return Ok(items);
            }
            Err(error) => anyhow::bail!("Scan of {table}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(error)),
        };
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}

/// Scans `table` every `interval` until `stop` fires, then once more.
async fn scan_until(
    client: aws_sdk_dynamodb::Client,
    table: String,
    format: u32,
    interval: Duration,
    collected: Shared,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let stopping = !matches!(stop.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty));
        match scan(&client, &table).await {
            Ok(items) => {
                let mut collected = lock(&collected);
                collected.scans += 1;
                for item in items {
                    collected.add(item, format);
                }
            }
            Err(error) => eprintln!("golden-records: {error:#}"),
        }
        if stopping {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stop => {}
        }
    }
}

/// A scanner of `table` in the background; `finish` stops it after one last scan.
pub(crate) struct Scanner {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Scanner {
    pub(crate) fn start(
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        format: u32,
        interval_ms: u64,
        collected: &Shared,
    ) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(scan_until(
            client.clone(),
            table.to_owned(),
            format,
            Duration::from_millis(interval_ms),
            Arc::clone(collected),
            stopped,
        ));
        Self { stop, task }
    }

    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
