//! How the simulation is set up besides the seed: the lease store's mode, and the bugs the
//! self-check plants to see that the checks catch them.

/// Which lease store the regions share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// One linearizable copy, as a multi-Region strongly consistent table provides.
    Mrsc,
    /// A replica per region, conditions checked locally, replicated after `lag_ms`, last
    /// writer wins: DynamoDB's default global tables, which cfn-once must not use.
    Mrec { lag_ms: u64 },
}

/// How the simulation is set up besides the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub mode: StoreMode,
    /// A deliberately broken lease store: the self-check must catch it.
    pub planted_bug: Option<PlantedBug>,
    /// Settings drawn as users write them (the command line's default; `--legacy-draws` turns
    /// it off): a ServiceTimeout log-uniform from 1 s for four requests in ten, and, in the
    /// weather, the secondary queue's delay anywhere from 0 to 900 s for four seeds in ten. The
    /// named seeds of the self-checks were found without it, and replay without it.
    pub user_settings: bool,
}

/// The bugs the simulator's self-check plants in the lease store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// Commit ignores its condition (fence mine, state RUNNING): two executions both commit.
    UnfencedCommit,
    /// A work's committed signal is forgotten when another execution takes its lease (the
    /// acquire grants it as if the signal were never committed): a takeover signals again.
    SignalAgain,
    /// The response bucket answers a PUT to an expired wait condition handle with a retryable
    /// error instead of S3's final 403, so the handler retries a signal nobody can take.
    ExpiredRetried,
    /// The provider reports a call whose answer was lost as transient (certainly not applied)
    /// instead of unknown, so the worker runs it again under the same fence while the first
    /// run goes on.
    RerunSameFence,
    /// A fenced write's retry after a lost reply is made as a write of its own (a token of its
    /// own) and the item that refuses it read as if it did not carry the write's token, so an
    /// ADD counts twice and a write that stands is taken for one refused.
    UnknownAsNotApplied,
    /// A fenced write's token names the run's fence (once per run, as cfn-once made it before
    /// writes were once per request), so a rerun after an unknown outcome adds again.
    TokenPerRun,
    /// The lease store reads and writes records of a newer format as if they were its own (a
    /// handler that checks no format), so records a newer version wrote are overwritten.
    FormatBlind,
    /// The handler keeps its configured deadline margin whole whatever a request's time (the
    /// fixed 20 s margin of earlier versions), so a short ServiceTimeout is answered FAILED
    /// without its provider running.
    FixedMargin,
}

impl PlantedBug {
    /// The command line's spelling (`--planted-bug=<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Self::UnfencedCommit => "unfenced-commit",
            Self::SignalAgain => "signal-again",
            Self::ExpiredRetried => "expired-retried",
            Self::RerunSameFence => "rerun-same-fence",
            Self::UnknownAsNotApplied => "unknown-as-not-applied",
            Self::TokenPerRun => "token-per-run",
            Self::FormatBlind => "format-blind",
            Self::FixedMargin => "fixed-margin",
        }
    }

    /// Parses [`PlantedBug::name`].
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::UnfencedCommit,
            Self::SignalAgain,
            Self::ExpiredRetried,
            Self::RerunSameFence,
            Self::UnknownAsNotApplied,
            Self::TokenPerRun,
            Self::FormatBlind,
            Self::FixedMargin,
        ]
        .into_iter()
        .find(|bug| bug.name() == name)
    }
}
