//! A request's deadline: the moment after which an answer no longer helps.
//!
//! CloudFormation waits `ServiceTimeout` seconds (1 to 3600, default 3600) from sending the
//! request, and the presigned ResponseURL stops working when it expires (two hours in the
//! wild). The deadline is the earliest of those and a configured ceiling, all measured from when
//! the request was sent (SQS's `SentTimestamp`, which a queue delay does not move). Backoff never
//! waits past it, and when it is near and nobody has committed, the request is answered FAILED
//! rather than left to time out in silence (invariant L1).

/// Which bound set the deadline; named in a FAILED Reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineSource {
    /// The resource's `ServiceTimeout`, counted from when the request was sent.
    ServiceTimeout,
    /// The expiry written into the presigned ResponseURL, after which no PUT is accepted.
    PresignedUrlExpiry,
    /// The configured ceiling (`CFN_ONCE_DEADLINE_CEILING_S`), when nothing earlier applies.
    Ceiling,
    /// A work's wait condition `Timeout` (`CfnOnceWaitTimeout`), counted from when the request
    /// that started it was sent.
    WaitTimeout,
    /// The expiry written into a presigned wait condition handle.
    HandleExpiry,
}

/// The deadline of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestDeadline {
    /// When the deadline falls, epoch ms.
    pub at_ms: u64,
    /// Which bound set it, so a FAILED Reason can say why the request ran out of time.
    pub source: DeadlineSource,
    /// When the request was sent, epoch ms: the margins kept before the deadline are
    /// proportioned to the time between the two ([`RequestDeadline::span_ms`]).
    pub sent_ms: u64,
}

impl RequestDeadline {
    /// The earliest of: `sent_ms` + ServiceTimeout, the URL's expiry, `sent_ms` + ceiling.
    pub fn of(sent_ms: u64, service_timeout_s: Option<u64>, url_expiry_ms: Option<u64>, ceiling_s: u64) -> Self {
        let mut deadline = Self {
            at_ms: sent_ms.saturating_add(ceiling_s.saturating_mul(1000)),
            source: DeadlineSource::Ceiling,
            sent_ms,
        };
        let candidates = [
            (service_timeout_s.map(|s| sent_ms.saturating_add(s.saturating_mul(1000))), DeadlineSource::ServiceTimeout),
            (url_expiry_ms, DeadlineSource::PresignedUrlExpiry),
        ];
        for (at_ms, source) in candidates {
            if let Some(at_ms) = at_ms
                && at_ms < deadline.at_ms
            {
                deadline = Self { at_ms, source, sent_ms };
            }
        }
        deadline
    }

    /// A work's deadline: the earliest of `sent_ms` + the wait condition's timeout and the
    /// handle's expiry.
    pub fn of_work(sent_ms: u64, timeout_s: u64, handle_expiry_ms: Option<u64>) -> Self {
        let timeout = Self {
            at_ms: sent_ms.saturating_add(timeout_s.saturating_mul(1000)),
            source: DeadlineSource::WaitTimeout,
            sent_ms,
        };
        match handle_expiry_ms {
            Some(at_ms) if at_ms < timeout.at_ms => Self { at_ms, source: DeadlineSource::HandleExpiry, sent_ms },
            _ => timeout,
        }
    }

    /// The time CloudFormation gives the request: from when it was sent to its deadline.
    pub fn span_ms(&self) -> u64 {
        self.at_ms.saturating_sub(self.sent_ms)
    }

    /// True once less than `margin_ms` is left.
    pub fn is_near(&self, now_ms: u64, margin_ms: u64) -> bool {
        now_ms.saturating_add(margin_ms) >= self.at_ms
    }

    /// The latest moment a message may be scheduled to come back: `margin_ms` before the
    /// deadline, so there is still time to answer.
    pub fn latest_wake_ms(&self, margin_ms: u64) -> u64 {
        self.at_ms.saturating_sub(margin_ms)
    }

    /// What the deadline is, for a Reason.
    pub fn describe(&self) -> &'static str {
        match self.source {
            DeadlineSource::ServiceTimeout => "the resource's ServiceTimeout",
            DeadlineSource::PresignedUrlExpiry => "the expiry of CloudFormation's presigned ResponseURL",
            DeadlineSource::Ceiling => "the handler's deadline ceiling (CFN_ONCE_DEADLINE_CEILING_S)",
            DeadlineSource::WaitTimeout => "the wait condition's timeout (CfnOnceWaitTimeout)",
            DeadlineSource::HandleExpiry => "the expiry of the wait condition handle's presigned URL",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_bound_wins() {
        let sent = 1_000_000;
        let check = |timeout_s, expiry_ms, expected: (u64, DeadlineSource)| {
            let deadline = RequestDeadline::of(sent, timeout_s, expiry_ms, 3_600);
            assert_eq!((deadline.at_ms, deadline.source), expected, "timeout {timeout_s:?}, expiry {expiry_ms:?}");
        };
        check(None, None, (sent + 3_600_000, DeadlineSource::Ceiling));
        check(Some(60), None, (sent + 60_000, DeadlineSource::ServiceTimeout));
        check(Some(60), Some(sent + 30_000), (sent + 30_000, DeadlineSource::PresignedUrlExpiry));
        check(Some(7_200), Some(sent + 7_200_000), (sent + 3_600_000, DeadlineSource::Ceiling));
        check(None, Some(sent + 10), (sent + 10, DeadlineSource::PresignedUrlExpiry));
    }

    #[test]
    fn nearness_and_latest_wake() {
        let deadline = RequestDeadline { at_ms: 100_000, source: DeadlineSource::ServiceTimeout, sent_ms: 0 };
        assert!(!deadline.is_near(79_999, 20_000));
        assert!(deadline.is_near(80_000, 20_000));
        assert!(deadline.is_near(200_000, 20_000));
        assert_eq!(deadline.latest_wake_ms(20_000), 80_000);
        assert_eq!(deadline.latest_wake_ms(200_000), 0);
    }
}
