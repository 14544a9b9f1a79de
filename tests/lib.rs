mod support;

mod check;
mod diagnostics;
mod explain;
mod models;
mod overlay;
mod plan;
mod run;
