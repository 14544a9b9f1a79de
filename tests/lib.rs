//! The integration tests, one module per area, most of them driving the real `stagegraph`
//! binary in a temporary folder (see `support`).

mod loopback;
mod support;

mod action;
mod ask;
mod bounds;
mod check;
mod ci_output;
mod claude_code;
mod cli;
mod compound;
mod context_update;
mod contract;
mod diagnostics;
mod docs;
mod explain;
mod face;
mod finally;
mod first_workflow;
mod fuzz_regressions;
mod interrupts;
mod kept_checks;
mod models;
mod names;
mod otel;
mod overlay;
mod plan;
mod progress;
mod project;
mod providers;
mod records;
mod refresh;
mod release;
mod reliability;
mod report;
mod resume;
mod review;
mod run;
mod secrets;
mod selection;
mod static_checks;
mod test_runner;
mod writes;
