//! The in-cluster modes of `osbx verify`, what the acceptance layer's pods run: each run's report
//! published to the report ConfigMap and read back by `osbx rollout` and `osbx status`
//! ([`publish`]), the checks every interval from the serving pod ([`serve`]), and their verdicts
//! as OpenMetrics behind a bounded listener ([`metrics`]).

pub(crate) mod metrics;
pub(crate) mod publish;
pub(crate) mod serve;
