//! Scheduling: requests, the budget loop, admission, and the step hand-off types.

pub mod admission;
pub mod config;
pub mod finish;
pub mod max_tokens;
pub mod output;
pub mod request;
pub mod scheduler;

pub use admission::{AdmissionEstimate, Rates, RejectReason};
pub use config::{BatchPolicy, ConfigError, KvReservation, SchedulerConfig};
pub use max_tokens::MaxTokens;
pub use output::{Lookahead, RequestResult, ScheduledRequest, SchedulerOutput};
pub use request::{FinishReason, Request, RequestId, RequestStatus};
pub use scheduler::{SchedStats, Scheduler, SchedulerError};
