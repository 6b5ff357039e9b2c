//! CloudFormation's response bucket, simulated: every PUT recorded per URL (for invariant S1
//! and L1), with seeded failures, lost replies and hangs inside the fault window.

use std::sync::Arc;

use async_trait::async_trait;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::ResponseUrl;

use crate::scenario::Region;
use crate::shared::Shared;

/// A region's view of S3.
#[derive(Debug)]
pub struct SimSink {
    pub region: Region,
    pub shared: Arc<Shared>,
}

impl SimSink {
    fn record(&self, url: &ResponseUrl, body: &[u8]) {
        let now_ms = self.shared.elapsed_ms();
        let url = url.expose_secret().to_owned();
        let mut observed = self.shared.observed();
        let puts = observed.puts.entry(url.clone()).or_default();
        let differs = puts.iter().any(|(_, earlier)| earlier != body);
        let again = !puts.is_empty();
        puts.push((now_ms, body.to_vec()));
        drop(observed);
        if differs {
            self.shared.violation(format!("S1: a different body was PUT to {url}"));
        }
        if again {
            self.shared.cover("same bytes PUT again");
        }
        let reason = cfn_once_core::response::ResponseBody::parse(body).ok().and_then(|body| body.reason);
        if reason.is_some_and(|reason| reason.contains("was still in progress when the request's deadline")) {
            self.shared.cover("deadline reached while waiting: answered FAILED");
        }
        if url.contains("cloudformation-waitcondition") {
            self.shared.cover(match self.region {
                Region::Primary => "long work: signal PUT by the primary",
                Region::Secondary => "long work: signal PUT by the secondary",
            });
        }
        self.shared.trace(Some(self.region), || format!("PUT {} bytes to {}", body.len(), short(&url)));
    }
}

#[async_trait]
impl ResponseSink for SimSink {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        let now_ms = self.shared.elapsed_ms();
        let expired =
            self.shared.handle_expiries.get(url.expose_secret()).is_some_and(|expiry_ms| now_ms >= *expiry_ms);
        if expired {
            self.shared.cover("PUT to an expired handle refused (403)");
            self.shared.observed().refused.push((now_ms, url.expose_secret().to_owned(), self.region));
            self.shared.trace(Some(self.region), || format!("PUT to {} refused: expired", short(url.expose_secret())));
            let why = "403 Forbidden: Request has expired".to_owned();
            return Err(if self.shared.expired_retryable {
                PutError::Retryable(why)
            } else {
                PutError::Permanent(why)
            });
        }
        let faults = self.shared.faults;
        if self.shared.fault(faults.put_fail) {
            self.shared.cover("response PUT failed");
            self.shared.fault_happened(self.region, "response PUT failed");
            return Err(PutError::Retryable("simulated S3 503".into()));
        }
        if self.shared.fault(faults.put_lost_reply) {
            self.shared.cover("response PUT landed, reply lost");
            self.shared.fault_happened(self.region, "response PUT landed, reply lost");
            self.record(url, body);
            return Err(PutError::Retryable("simulated lost reply".into()));
        }
        if self.shared.fault(faults.put_hang) {
            self.shared.cover("response PUT hung");
            self.shared.fault_happened(self.region, "response PUT hung");
            return std::future::pending().await;
        }
        self.record(url, body);
        Ok(())
    }
}

/// The distinguishing tail of a simulated URL, for traces.
pub fn short(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}
