//! How a failed call to a store or service ended, as the adapters classify it: the one
//! vocabulary the worker, the fenced writes and the providers act on. The AWS adapters make it
//! from SDK errors (`cfn_once::aws::classify`); the simulator makes it itself.

/// How a failed AWS call ended: what `cfn_once::aws::classify` makes of an SDK error, so that a provider
/// calling AWS itself retries what may clear and fails on what will not
/// (`ProviderError::from(classify(&error))`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Certainly not applied: throttled, conflicted, refused before it was processed, or never
    /// sent at all.
    NotApplied(String),
    /// Maybe applied: timed out after sending, a 5xx, an unreadable response, an identical
    /// request still in progress.
    Unknown(String),
    /// Certainly not applied, and nothing this process can do changes that now (credentials
    /// that expired and that nothing here can refresh): tried again by a later invocation.
    Deferred(String),
    /// Will never work as sent: missing table, denied, invalid.
    Permanent(String),
}

impl Failure {
    /// What went wrong, in a line.
    pub fn into_text(self) -> String {
        match self {
            Self::NotApplied(text) | Self::Unknown(text) | Self::Deferred(text) | Self::Permanent(text) => text,
        }
    }

    /// Whether trying the same call again may succeed (now, or later for `Deferred`).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Permanent(_))
    }

    /// The failure of a call that changes nothing (a read: `GetItem`, `GetObject`, a
    /// `Describe*`): an unknown outcome is not applied, since whatever the service did with a
    /// read, nothing changed, and reading again is safe under the same fence
    /// (`ProviderError::Transient`, not a rerun under a higher fence). The rest as it is.
    pub fn of_read(self) -> Self {
        match self {
            Self::Unknown(text) => Self::NotApplied(text),
            other => other,
        }
    }
}
