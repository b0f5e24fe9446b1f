//! The mock envelope runner (issue 3, item 5): runs one plugin offline on a mock envelope, with the
//! host's sandbox and the manifest's grants, answering its HTTP requests from a mock if asked and
//! its Kafka records always, and reports what happened. The `outbox-host plugin test` and `plugin inspect` commands print its
//! reports; plugin authors call the same [`MockRunner`] from their own `cargo test`.

mod envelope;
mod http;
mod kafka;
mod report;
mod runner;

pub use envelope::{EnvelopeOverride, envelope_json, mock_envelope};
#[cfg(test)]
pub(crate) use http::RequestLog;
pub use http::{DeniedRequest, MockHttpHeader, MockHttpResponse, RecordedRequest};
pub(crate) use kafka::MockKafka;
pub use kafka::{MockKafkaResponse, ProducedRecord};
pub use report::{InspectReport, MockCall, MockOutcome, TestReport};
pub use runner::{MockOptions, MockRunner};
