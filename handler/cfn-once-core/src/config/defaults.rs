//! The defaults of the configuration's variables, named so the README, `--help` and the
//! simulator quote the values a deployed handler runs with.

/// Default `CFN_ONCE_LEASE_MS`: how long, in ms, a lease lasts without a heartbeat before another
/// execution may take over.
pub const LEASE_MS_DEFAULT: u64 = 30_000;
/// Default `CFN_ONCE_SKEW_MS`: margin in ms added before a lease counts as expired, for clock
/// skew between regions.
pub const SKEW_MS_DEFAULT: u64 = 2_000;
/// Default `CFN_ONCE_PUT_ATTEMPTS_MAX`: PUT attempts per delivery before the message is retried.
pub const PUT_ATTEMPTS_MAX_DEFAULT: u32 = 5;
/// Default `CFN_ONCE_PUT_TIMEOUT_MS`: how long one PUT attempt may take, in ms.
pub const PUT_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default `CFN_ONCE_STORE_TIMEOUT_MS`: how long one lease-store call may take, in ms.
pub const STORE_TIMEOUT_MS_DEFAULT: u64 = 3_000;
/// Default `CFN_ONCE_RETENTION_DAYS`: days a lease record is kept before the sweeper may delete it.
pub const RETENTION_DAYS_DEFAULT: u64 = 30;
/// Default `CFN_ONCE_RETRY_DELAY_S_MAX`: the longest backoff of a message, in seconds.
pub const RETRY_DELAY_S_MAX_DEFAULT: u32 = 300;
/// Default `CFN_ONCE_CONTROL_CACHE_MS`: how long, in ms, an answer of the active-region control
/// is reused before the control is asked again.
pub const CONTROL_CACHE_MS_DEFAULT: u64 = 5_000;
/// Default `CFN_ONCE_STANDBY_RETRY_S`: how long, in seconds, a standby primary leaves a message
/// before looking again.
pub const STANDBY_RETRY_S_DEFAULT: u64 = 30;
/// Default `CFN_ONCE_DEADLINE_CEILING_S`: the latest deadline of any request, in seconds from
/// when it was sent (CloudFormation's longest wait).
pub const DEADLINE_CEILING_S_DEFAULT: u64 = 3_600;
/// Default `CFN_ONCE_DEADLINE_MARGIN_MS`: with this little left before a request's deadline, in
/// ms, an unanswered request is answered FAILED.
pub const DEADLINE_MARGIN_MS_DEFAULT: u64 = 20_000;
/// Default `CFN_ONCE_SQS_TIMEOUT_MS`: how long one SQS call after a batch may take, in ms.
pub const SQS_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// SQS's largest `maxReceiveCount`, which `infra/regional.yaml` sets on both queues.
pub const MAX_RECEIVE_COUNT_DEFAULT: u32 = 1_000;
/// CloudFormation waits at most an hour (`ServiceTimeout` is 1 to 3600 s).
pub const DEADLINE_CEILING_S_MAX: u64 = 3_600;
/// Default `CFN_ONCE_VISIBILITY_TIMEOUT_S`: SQS's longest visibility timeout, 12 hours. Unset,
/// every record is treated as one a crash could hide past its deadline margin, which costs one
/// ChangeMessageVisibilityBatch per batch; `infra/regional.yaml` sets the queue's own value.
pub const VISIBILITY_TIMEOUT_S_DEFAULT: u64 = 43_200;
/// Default `CFN_ONCE_SECONDARY_DELAY_S`: the secondary queue's `DelaySeconds` that
/// `infra/regional.yaml` deploys. Short, so that the secondary sees a copy while a request with
/// a ServiceTimeout of 30 s can still be answered; the primary's head start
/// (`CFN_ONCE_HEAD_START_S`) is kept by the handler, proportioned to each request's time.
pub const SECONDARY_DELAY_S_DEFAULT: u64 = 5;

/// Default `CFN_ONCE_HEAD_START_S`: the longest the secondary leaves a request nobody started
/// to the primary (a request with less time gets a fifth of it).
pub const HEAD_START_S_DEFAULT: u64 = 60;
